"""The chaos harness's fixed-seed subset (make chaos runs more seeds and longer schedules)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from tests.chaos.harness import run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    aws = EmbeddedAws("127.0.0.1", free_port()).start()
    yield aws.endpoint_url
    aws.stop()


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
# others. 3 and 8 stay, the schedules that once broke the check.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", [3, 8])
def test_no_invariant_breaks_under_crashes_faults_and_races(endpoint: str, seed: int) -> None:
    result = run(seed, endpoint=endpoint, load_seconds=180)
    assert result.violations == [], (
        f"seed {seed}: replay with python -m tests.chaos.harness --first-seed {seed} --seeds 1"
    )
    assert sum(result.crashes.values()) > 0 and sum(result.faults.values()) > 0  # the schedule did inject
    assert result.statuses["SUCCEEDED"] > 20
    # every overlap policy met a handler longer than its interval (the buffer_one loss hid where none did)
    assert {f"{p}/long" for p in ("skip", "buffer_one", "allow")} <= set(result.recurring)
