"""The next firing a view of a job shows (pure), against reference timelines.

Each row: the job as stored (its cursor: the first tick not yet handed over), the time it is read
at, and the next run that will fire. T0 = 14:33:00Z.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobsched.domain.firing import next_fire
from jobsched.domain.models import Job, SchedulePolicy
from jobsched.domain.status import JobStatus

T0 = datetime(2026, 11, 30, 14, 33, tzinfo=UTC)


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(
    cursor: datetime | None,
    cron_expr: str | None = "*/20 * * * * *",
    *,
    type: str = "recurring",
    status: JobStatus = JobStatus.SCHEDULED,
    run_at: datetime | None = None,
    dispatched: int = 0,
    **policy: Any,
) -> Job:
    return Job(
        job_id="job_x", tenant="t", type=type, status=status, handler="demo.echo", payload={},
        cron_expr=cron_expr, run_at=run_at, next_run_at=cursor, dispatched=dispatched,
        policy=SchedulePolicy.model_validate(policy), created_at=T0, updated_at=T0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("stored", "now", "offset", "expected"),
    [
        # the timeline: 14:33:40 and 14:34:00 are in the queue, the cursor is 14:34:20
        (job(s(80)), s(22), 0, s(40)),
        # nothing handed over ahead (no horizon): the cursor is the next firing
        (job(s(40)), s(22), 0, s(40)),
        # read on a tick's second: that tick has fired, the next one is next
        (job(s(80)), s(40), 0, s(60)),
        # the dispatcher is behind: the cursor is overdue and fires first, late
        (job(s(-20)), s(22), 0, s(-20)),
        # jitter 7 s: 14:33:20 fires at 14:33:27, so at 14:33:22 it is still to fire
        (job(s(80), jitter_seconds=10), s(22), 7, s(20)),
        (job(s(80), jitter_seconds=10), s(28), 7, s(40)),
        # start_at 14:34:00: ticks before it were never handed over
        (job(s(60), start_at=s(60)), s(22), 0, s(60)),
        # end_at 14:34:00 reached: no cursor; 14:33:40 and 14:34:00 still fire, then nothing
        (job(None, end_at=s(60)), s(22), 0, s(40)),
        (job(None, end_at=s(60)), s(61), 0, None),
        # max_runs handed over: the last tick handed over is not stored, so nothing is claimed
        (job(None, max_runs=3, dispatched=3), s(22), 0, None),
        # paused, cancelled, completed: no next run
        (job(None, status=JobStatus.PAUSED), s(22), 0, None),
        (job(s(80), status=JobStatus.CANCELLED), s(22), 0, None),
        (job(None, status=JobStatus.COMPLETED), s(22), 0, None),
        # a one-off not yet handed over, then handed over and waiting in the queue, then fired
        (job(s(40), None, type="one_off", run_at=s(40)), s(22), 0, s(40)),
        (job(None, None, type="one_off", run_at=s(40)), s(22), 0, s(40)),
        (job(None, None, type="one_off", run_at=s(40)), s(41), 0, None),
        # a dependant has no time of its own
        (job(None, None, type="dependent"), s(22), 0, None),
    ],
)  # fmt: skip
def test_it_shows_the_next_tick_that_will_fire(
    stored: Job, now: datetime, offset: int, expected: datetime | None
) -> None:
    assert next_fire(stored, now=now, jitter_offset_seconds=offset) == expected


def test_it_follows_the_schedules_timezone_across_a_dst_change() -> None:
    # Given a daily 09:00 Europe/Berlin job read on the evening before the spring-forward night,
    # its next tick handed over already and the cursor a day later
    evening = datetime(2026, 3, 28, 20, 0, tzinfo=UTC)
    stored = job(datetime(2026, 3, 30, 7, 0, tzinfo=UTC), "0 9 * * *")
    stored = stored.model_copy(update={"timezone": "Europe/Berlin"})
    # Then the next firing is 09:00 CEST, 07:00Z (not 08:00Z, the winter offset)
    assert next_fire(stored, now=evening) == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)
