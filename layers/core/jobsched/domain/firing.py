"""When a job fires next, as a reader of the job should see it (pure: no I/O).

A job's stored next_run_at is the dispatcher's hand-over cursor, not its next firing: the first tick
not yet handed to the queue. Ticks before it are already in SQS, each delayed until its second (a
recurring job's up to the hand-over horizon ahead, 840 s on AWS), so at 14:33:22 a `*/20 * * * * *`
job's cursor may read 14:34:20 while 14:33:40 and 14:34:00 wait in the queue:

    handed over (in SQS)                    not yet handed over
    ──14:33:20──14:33:40──14:34:00──┬──14:34:20──14:34:40──>
             now ^ 14:33:22         cursor
             next fire: 14:33:40 = min(first tick still to fire after now, cursor)

A tick fires at tick + the job's jitter offset, and its run is keyed by the tick (scheduled_for),
so the answer is the tick, which may lie up to the offset before now while its message waits.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobsched import cron
from jobsched.domain.models import Job
from jobsched.domain.status import JobStatus


def next_fire(job: Job, *, now: datetime, jitter_offset_seconds: int = 0) -> datetime | None:
    """The scheduled_for of the job's next tick still to fire after `now`; None when none will.

    Only a SCHEDULED job fires (a paused one has no next run until it is resumed). A tick not yet
    handed over is the cursor, due now if the dispatcher is behind; ticks before the cursor fire
    unless they lie before start_at. With no cursor the dispatcher hands over nothing more: end_at
    bounds what is still in the queue; after max_runs the last tick handed over is not stored, so
    nothing is shown (wrong for at most one hand-over horizon, rather than forever).
    """
    if job.status != JobStatus.SCHEDULED:
        return None
    offset = timedelta(seconds=jitter_offset_seconds)
    cursor = job.next_run_at
    if job.type != "recurring" or not job.cron_expr:
        if cursor is not None:
            return cursor
        # A one-off's single tick was handed over: it waits in the queue until it fires.
        if job.type == "one_off" and job.run_at is not None and job.run_at + offset > now:
            return job.run_at
        return None
    policy = job.policy
    after = now - offset
    if policy.start_at is not None:
        after = max(after, policy.start_at - timedelta(milliseconds=1))
    in_queue = cron.parse(job.cron_expr, job.timezone).next_after(after)
    if cursor is not None:
        return min(cursor, in_queue)
    if policy.end_at is None or in_queue > policy.end_at:
        return None
    if policy.max_runs is not None and job.dispatched >= policy.max_runs:
        return None
    return in_queue


def next_fires(job: Job, *, first: datetime | None, count: int) -> list[datetime]:
    """Up to `count` ticks from `first` (next_fire's answer, included), oldest first; [] unless a
    SCHEDULED recurring job fires again. end_at bounds them; max_runs bounds the ticks after the
    cursor (those before it are handed over already)."""
    if first is None or count <= 0 or job.status != JobStatus.SCHEDULED:
        return []
    if job.type != "recurring" or not job.cron_expr:
        return []
    schedule = cron.parse(job.cron_expr, job.timezone)
    policy = job.policy
    left = None if policy.max_runs is None else policy.max_runs - job.dispatched
    out: list[datetime] = []
    tick = first
    while len(out) < count:
        if policy.end_at is not None and tick > policy.end_at:
            break
        if left is not None and (job.next_run_at is None or tick >= job.next_run_at):
            if left <= 0:
                break
            left -= 1
        out.append(tick)
        tick = schedule.next_after(tick)
    return out
