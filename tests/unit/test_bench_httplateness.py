"""bench/httplateness.py (table f): one lateness per tick, from the webhook's first arrival."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from bench import httplateness
from bench.lateness import Scenario
from bench.peers import Arrival

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def arrival(job_id: str, scheduled_for: datetime, late_s: float) -> Arrival:
    at = scheduled_for.timestamp() + late_s
    return Arrival(at, "/hook", {"job_id": job_id, "scheduled_for": scheduled_for.isoformat()})


def test_a_tick_counts_once_at_its_first_arrival_and_a_tick_that_never_arrived_is_not_run() -> None:
    # Given a once-a-minute job at second 7 and a 3-minute window: ticks 12:00:07, 12:01:07, 12:02:07
    ticks = [START + timedelta(minutes=k, seconds=7) for k in range(3)]
    # and the webhook saw the first tick twice (a redelivery 30 s later), the second once, the third never,
    # and a tick before the window
    arrivals = [
        arrival("j1", ticks[0], 30.0),
        arrival("j1", ticks[0], 0.25),
        arrival("j1", ticks[1], 0.5),
        arrival("j1", START - timedelta(seconds=53), 0.1),
    ]

    # When the row is made from the arrivals
    late = httplateness.lateness_by_tick(arrivals)
    row = httplateness.row_of(
        Scenario("minute", "test"), late, {"j1": "7 * * * * *"}, (START, START + timedelta(minutes=3))
    )

    # Then each window tick counts once, at its first arrival, and the missing one is not run
    assert row.values == [pytest.approx(0.25), pytest.approx(0.5)]
    assert row.not_run == 1
