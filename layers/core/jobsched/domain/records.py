"""Typed answers of the stores: what a service reads back from a conditional write or a range read.

Every store implementation (jobsched.adapters.dynamodb, jobsched.adapters.memory) answers these,
so no service ever sees a storage engine's item format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobsched.domain.alerts import LateWatch
from jobsched.domain.models import Execution, Job, RunMessage, SchedulePolicy
from jobsched.domain.operations import OperationMessage
from jobsched.domain.status import RunStatus

# How long a run row is kept after its tick (the runs table's TTL, `expires_at`). A packed one-off whose
# tick is older has lost its history with its row: it is gone (jobsched.domain.packs.expired).
RUN_HISTORY_DAYS = 90

Cursor = dict[str, Any]
"""Where a paged read continues: opaque to services (they encode it for clients as it is)."""


@dataclass(frozen=True, slots=True)
class DueEntry:
    """What the due index holds about a job with a pending tick."""

    job_id: str
    tenant: str
    type: str
    next_run_at: datetime
    cron_expr: str | None
    timezone: str
    policy: SchedulePolicy = field(default_factory=SchedulePolicy)
    dispatched: int = 0
    lane: str = "lambda"
    """The worker queue its runs go to: "lambda" (the execution queue) or "ecs" (jobsched.domain.compute)."""
    late_after_seconds: int | None = None
    """The job alerts on "late" after this long: its ticks go out with a LateWatch (None: it does not)."""

    @classmethod
    def of(cls, job: Job) -> DueEntry:
        """The entry a stored job with a pending tick stands for."""
        assert job.next_run_at is not None
        return cls(
            job_id=job.job_id,
            tenant=job.tenant,
            type=job.type,
            next_run_at=job.next_run_at,
            cron_expr=job.cron_expr,
            timezone=job.timezone,
            policy=job.policy,
            dispatched=job.dispatched,
            lane=job.placement().runs_on,
            late_after_seconds=job.alerts.late_after_seconds if job.alerts else None,
        )


@dataclass(frozen=True, slots=True)
class DuePage:
    """One page of a due-index range read."""

    entries: list[DueEntry]
    cursor: Cursor | None
    items_read: int


@dataclass(frozen=True, slots=True)
class Transition:
    """The outcome of a conditional run write.

    applied: `previous` is the row before the write (None: the write created it), and `row` the row
    after it when the store knows it without a read (a put), else None.
    refused: `row` is the row as it stood (None: there is no row), and `previous` is None.
    """

    applied: bool
    row: Execution | None = None
    previous: Execution | None = None


@dataclass(frozen=True, slots=True)
class ShardLease:
    """A held shard lease and the oldest minute bucket the shard has not finished draining."""

    shard: int
    owner: str
    watermark: str | None


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """An Idempotency-Key already used: the hash of the request it came with, and its answer."""

    request_hash: str
    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of a tenant's dead-letter index."""

    job_id: str
    run_id: str
    scheduled_for: datetime
    dead_at: datetime
    attempt: int
    error_type: str | None
    error_message: str | None


@dataclass(frozen=True, slots=True)
class NewRun:
    """What a run row is created with when its first write is a transition (no PENDING row yet)."""

    job_id: str
    tenant: str
    scheduled_for: str
    """Stored form (jobsched.domain.times.stored)."""
    kind: str = "scheduled"


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's hold on a run: the lease owner, the SQS message carrying it, until when."""

    owner: str
    message: str
    worker: str
    until: datetime


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How one attempt ended: its result (JSON text, bounded) on success, or its error."""

    attempt: int
    started_at: datetime
    finished_at: datetime
    result: str | None = None
    error: tuple[str, str] | None = None
    """(error type, message) of a failed attempt; None for a success."""
    worker: str | None = None
    """The external worker that ran it (worker pools), kept in the attempt's record; None: not kept."""

    @property
    def status(self) -> RunStatus:
        """SUCCEEDED or FAILED."""
        return RunStatus.SUCCEEDED if self.error is None else RunStatus.FAILED

    @property
    def duration_ms(self) -> int:
        """How long the attempt ran, never negative."""
        return max(0, int((self.finished_at - self.started_at).total_seconds() * 1000))


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One run (or an operation's next chunk) to hand to the queue, held back `delay_seconds`."""

    message: RunMessage | OperationMessage | LateWatch
    delay_seconds: int
    group: str | None = None
    """The SQS fair-queue group (MessageGroupId on the standard queue): the run's tenant, so one
    tenant's backlog does not hold up another's deliveries. None: no group (no fairness asked)."""
    lane: str | None = None
    """The worker queue it goes to ("lambda", "ecs": jobsched.domain.compute); None: the sender's own."""
