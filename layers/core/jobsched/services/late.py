"""Late watches: a "late" alert for a run that has not started late_after_seconds after its tick.

The worker raises "late" when a run starts late (AlertService.late_start), and the dispatcher when
it hands a tick over already late. A run that never starts (its message waits behind the job's
slot, a quota or a throttled mapping, or was never received) met neither, and stayed unalerted.
Neither pass sees such a run afterwards: the dispatcher's due entry moves past a tick once it is
handed over, and the reconciler reads only the queue's dead letters. So the dispatcher hands over,
beside each tick of a job that alerts on "late", a LateWatch delayed until the tick is late, and
the worker that receives it looks at the run:

    dispatcher: send [run message (due at tick), LateWatch (due at tick + late_after)]   one batch
    worker, at tick + late_after:
        early (SQS delays stop at 900 s) -> send itself again for the rest, ack
        job gone, not SCHEDULED (paused, cancelled, done), or no longer alerting late -> ack
        run row started, finished, skipped or cancelled -> ack (the worker judged its start)
        a live start marker of the run on its job (the fast path writes its row at the end) -> ack
        otherwise: not started -> raise "late" (alert id (run, "late"): once, whoever raises first)

    crash before the ack -> the watch surfaces again and looks again: the alert's conditional
        record keeps one; a watch that is lost loses an alert, never a run.

Jobs that do not alert on "late" send no watch: the healthy run path is unchanged for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobsched.domain import times
from jobsched.domain.alerts import LateWatch
from jobsched.domain.models import Job, live_runs
from jobsched.domain.records import DueEntry, Outgoing
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.ports import Clock, JobStore, RunQueue, RunStore
from jobsched.services.alerts import AlertService, policy_of

# A watch looks this long after the run became late: a run that starts on the dot is not late.
MARGIN = timedelta(seconds=1)


def watch_for(entry: DueEntry, tick: datetime, *, now: datetime) -> tuple[LateWatch, datetime] | None:
    """The LateWatch of `tick` and when it is due, or None: the job does not alert on "late", or
    the tick is late already (the dispatcher's own pass judges those: Dispatcher._alert)."""
    if entry.late_after_seconds is None or entry.type == "dependent":
        return None
    due = tick + timedelta(seconds=entry.late_after_seconds) + MARGIN
    if due <= now:
        return None
    watch = LateWatch(late_watch=times.stored(tick), job_id=entry.job_id, due=times.stored(due))
    return watch, due


@dataclass
class LateWatcher:
    """Looks at the run a LateWatch names and raises "late" if it has not started."""

    jobs: JobStore
    runs: RunStore
    queue: RunQueue
    alerts: AlertService | None
    clock: Clock

    def check(self, watch: LateWatch) -> str:
        """What the watch found: "early" (sent again), "started", "quiet" (no alert wanted) or "late"."""
        now = self.clock.now()
        due = times.parse_stored(watch.due)
        if due > now:  # SQS delays a message at most 900 s: the rest of the wait is a new message
            self.queue.send([Outgoing(watch, math.ceil((due - now).total_seconds()))])
            return "early"
        job = self.jobs.get_job(watch.job_id)
        if self.alerts is None or job is None or job.status != JobStatus.SCHEDULED:
            return "quiet"
        policy = policy_of(job)
        if not policy.wants("late") or policy.late_after_seconds is None:
            return "quiet"
        sf = watch.late_watch
        if self._started(job, sf, now):
            return "started"
        tick = times.parse_stored(sf)
        late = (now - tick).total_seconds()
        self.alerts.raise_alert(  # refused if raised before: once per run and kind
            job,
            "late",
            scheduled_for=tick,
            detail=f"not started {late:.0f} s after its tick (late after {policy.late_after_seconds} s)",
        )
        return "late"

    def _started(self, job: Job, sf: str, now: datetime) -> bool:
        """Whether the run of `sf` started (or was decided: skipped, cancelled, finished)."""
        row = self.runs.get(job.job_id, sf)
        if row is not None and (row.status != RunStatus.PENDING or row.attempt > 0):
            return True
        # No row, or PENDING: a fast-path run writes its row when it ends, and is known to run by the
        # start marker it keeps live on its job while it does.
        return sf in live_runs(job, now)
