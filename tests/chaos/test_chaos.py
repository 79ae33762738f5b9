"""The chaos harness's fixed-seed subset (make chaos runs more seeds and longer schedules): seed 3."""

from __future__ import annotations

import pytest

from tests.chaos.conftest import assert_schedule_holds

pytestmark = pytest.mark.slow


# The schedules take every overlap policy, with handlers longer than their interval (they heartbeat
# while the fleet goes on), slow pollers and cancels at random moments; before they did, every job
# was `skip` with an instant handler, so no tick ever met a running one and buffer_one's lost ticks
# went unseen. 3 and 8 broke the check once (make chaos, 20 seeds; then seeds 1-10): ticks the faults had made
# late were cancelled, or never handed over, when the harness cancelled the jobs the moment faults
# stopped. The harness now lets the fleet settle fault-free first. 8 failed once more, in CI: the
# harness held a batch's other messages while a long handler in it played the fleet's seconds, so
# moto's real-time visibility hid a due tick until the quiesce (a harness fault: such a batch now goes
# back to the queue first). Replays are not exact (Step Functions runs on real time, a page's calls
# on threads), so these stay as regression schedules.
# Its own bounds: 180 s of load and 150 of settle played second by second against moto, then a drain
# of up to CHAOS_DRAIN_SECONDS (300) real seconds. The suite's 300 s default cut seeds 1 and 8 off
# mid-load on a slower machine (10 min for a 240 s schedule, 0 violations, run alone).
# Seed 1, which never broke, left the suite (about 5 of its 38 minutes): `make chaos` runs it with 19
# others. 3 and 8 stay, the schedules that once broke the check, each in a file of its own
# (test_chaos_8.py) so that `make test`'s processes (a file to a process) run them side by side.
@pytest.mark.timeout(900)
def test_no_invariant_breaks_under_crashes_faults_and_races(endpoint: str) -> None:
    assert_schedule_holds(endpoint, 3)
