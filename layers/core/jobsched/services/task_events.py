"""Container tasks' stop events: ECS's "ECS Task State Change" for a STOPPED task records the outcome
of the run attempt that started it, durably, whether or not a worker still follows the task.

    event: a STOPPED task of the stack's cluster, not a service's (the EventBridge rule's pattern,
        jobsched.domain.ecs_tasks.stopped_pattern)
        v
    whose? run id and attempt from the JOBSCHED_* environment RunTask gave it, startedBy agreeing
        │ none, or they disagree ──> "foreign": ignored
        v
    read the run row (consistent) ──> unknown run; or not RUNNING; or RUNNING another attempt; or
        │                             no lease row yet (the fast path before its first beat)
        │                             ──> ignored: the worker records it
        v
    record RUNNING -> SUCCEEDED|FAILED of that attempt: conditional on the lease owner read above (an
        owner is one attempt's: a takeover or a retry leases under a new one), the outcome mapped as
        the worker's poll maps it (jobsched.domain.ecs_tasks.task_ended)
        │ refused: the worker, or a twin of this event, recorded it first ──> nothing more
        v
    settle (services.settle): a failure handed to the failure workflow, a success settled

Crash points and races (whichever records first wins; the other finds the attempt recorded):
    the event before the worker's poll: the event records and settles; the worker's next poll sees
        STOPPED, its own record is refused, it finds its attempt recorded under its own lease,
        settles again (a no-op: one workflow execution per attempt, by name) and frees the job's
        markers as after its own record (services.run.Worker)
    the event after the worker's record: the row is past RUNNING (or on a later attempt): ignored
    the worker died: the event records and settles; the run's message comes back and finds the run
        recorded: a duplicate, dropped (a failure handed over again: a no-op)
    the event duplicated (EventBridge delivers at least once) or late: refused or ignored
    this function dies after the record, before the settle: the retried event finds the run past
        RUNNING and does nothing; the run's message (its worker's refused record, or its
        redelivery) settles it, as after a worker that died between its record and its hand-over
    no event at all (a failed delivery past the rule's retries): the worker's poll records it
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from aws_lambda_powertools import Logger

from jobsched.domain import times
from jobsched.domain.ecs_tasks import StoppedTask, stopped_task, task_outcome
from jobsched.domain.keys import parse_run_id
from jobsched.domain.records import AttemptEnd
from jobsched.domain.status import RunStatus
from jobsched.domain.targets import PythonTarget
from jobsched.ports import Clock, CrashPoints, JobStore, RunStore, no_crash
from jobsched.services.dag import DagService
from jobsched.services.failures import FailureService
from jobsched.services.settle import settle_recorded

logger = Logger(child=True)


class TaskEventOutcome(StrEnum):
    """What one stop event did."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    FOREIGN = "foreign"
    """Not a task jobsched started for a run."""
    UNKNOWN_RUN = "unknown_run"
    """Its run or job does not exist (deleted, or another stack's)."""
    NOT_RUNNING = "not_running"
    """The run is not RUNNING on that attempt: recorded already (by the worker or a twin event),
    moved on, or not leased yet (the worker will record it)."""


@dataclass
class TaskStopEvents:
    """Records container targets' stopped tasks on their runs (see the module docstring)."""

    jobs: JobStore
    runs: RunStore
    failures: FailureService
    dag: DagService
    clock: Clock
    crash: CrashPoints = no_crash

    def stopped(self, detail: Mapping[str, Any]) -> TaskEventOutcome:
        """Record the attempt a STOPPED task's event is about, once; anything else changes nothing."""
        task = stopped_task(detail)
        if task is None:
            return TaskEventOutcome.FOREIGN
        try:
            job_id, scheduled_for = parse_run_id(task.run_id)
        except ValueError:
            return TaskEventOutcome.FOREIGN
        sf = times.stored(scheduled_for)
        row = self.runs.get(job_id, sf)
        job = self.jobs.get_job(job_id)
        if row is None or job is None:
            return TaskEventOutcome.UNKNOWN_RUN
        if row.status != RunStatus.RUNNING or row.attempt != task.attempt or row.lease_owner is None:
            return TaskEventOutcome.NOT_RUNNING
        # A Python job's task is its run's own task (Worker.run_in_own_task), a container job's the
        # user's: only the former's RAN_UNRECORDED exit means an unrecorded handler (TaskLost).
        end = self._end(task, started_at=row.started_at, own_task=isinstance(job.target, PythonTarget))
        # Conditional on the owner as read: the write applies only while this attempt's lease holds
        # the row RUNNING (RunStore.record), so a twin event, the worker's own record, a takeover
        # and a retry all make it refuse.
        done = self.runs.record(job_id, sf, owner=row.lease_owner, end=end)
        if not done.applied:
            return TaskEventOutcome.NOT_RUNNING
        self.crash("task_events.after_record")
        recorded = self.runs.get(job_id, sf)
        if recorded is not None:
            settle_recorded(job, recorded, failures=self.failures, dag=self.dag, now=end.finished_at)
        logger.info(
            "container task stopped: attempt recorded",
            extra={"run_id": task.run_id, "attempt": task.attempt, "task_arn": task.task_arn},
        )
        return TaskEventOutcome.FAILED if end.error is not None else TaskEventOutcome.SUCCEEDED

    def _end(self, task: StoppedTask, *, started_at: datetime | None, own_task: bool) -> AttemptEnd:
        result, error = task_outcome(task.task_arn, task.task, own_task=own_task)
        finished = self.clock.now()
        if task.stopped_at:
            # An unreadable stoppedAt: the event's arrival stands in for it.
            with contextlib.suppress(ValueError):
                finished = times.to_utc(datetime.fromisoformat(task.stopped_at))
        started = started_at or finished
        return AttemptEnd(
            attempt=task.attempt,
            started_at=started,
            finished_at=max(finished, started),
            result=json.dumps(result, separators=(",", ":")) if result is not None else None,
            error=error,
        )
