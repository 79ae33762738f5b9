"""Long API work outside the request: a backfill's ticks and a bulk action's jobs, chunk by chunk.

The API accepts a backfill of more than BACKFILL_CHUNK ticks, or a bulk action on more than
BULK_CHUNK jobs, as an operation (202, its id): it stores the operation at chunk 0 and sends an
OperationMessage for chunk 0 on the execution queue, whose worker does one chunk per message:

    API:    put operation (chunk 0, RUNNING) ─> send message(0) ─> 202 {operation_id}
    worker: message(k): read the operation
              chunk == k       do chunk k (idempotent writes) ─> CAS chunk k -> k+1 (+ progress)
                               ─> send message(k+1) unless that was the last ─> ack message(k)
              chunk == k + 1   message(k+1) may be lost (a crash after the CAS): send it again
              anything else    a stale duplicate: ack, do nothing

Crash points, and why each loses nothing and writes no tick twice:
- after the put, before the send (API): the API answered 5xx; the operation stays RUNNING with no
  message (the caller repeats the request, which creates its own operation). Nothing written.
- during chunk k, or after it and before the CAS ("operation.chunk_done"): message(k) is not
  acknowledged, comes back after its visibility timeout, and chunk k is done again. Its writes
  are conditional: a tick's run row is put only if absent (RunStore.put_pending), so no tick has
  two; a run already written counts as `existing` the second time, and a backfill run still
  PENDING is sent again (a duplicate message, which the worker treats as one). A bulk action's
  pause, resume and cancel are idempotent; its run_now queues one more manual run for each job
  of the chunk done again.
- after the CAS, before the send ("operation.advanced"): message(k) comes back, finds chunk k+1
  and sends message(k+1) again.
- after the send, before the ack: message(k) comes back and finds chunk k+1: a second message(k+1).
  Two messages for one chunk do its writes twice at worst (conditional, as above); only one CAS
  applies, and only its winner sends the next message, so duplicates do not multiply.

Why the execution queue and not a Step Functions map: the queue, its worker and their IAM exist
already (the API and the worker are trusted senders), and a chunk costs three SQS requests
(send, receive, delete), one small worker invocation and one conditional put, about $1.2 per
million chunks plus the writes themselves; a Standard state machine would add about 4 state
transitions per chunk ($100 per million chunks) and a Lambda task moto cannot run. The rate
limit of backfill runs carries over: message(k+1) is held back until chunk k's runs have started
(BACKFILL_RATE_PER_SECOND), so a long backfill spreads as one done at once did.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from jobsched import telemetry
from jobsched.domain import times
from jobsched.domain.commands import BackfillRequest
from jobsched.domain.listing import MAX_LIST_PAGE, JobFilter
from jobsched.domain.operations import BACKFILL_CHUNK, BULK_CHUNK, Operation, OperationMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import JobStatus
from jobsched.errors import JobschedError, NotFound
from jobsched.ports import CrashPoints, JobStore, Metrics, NoMetrics, no_crash
from jobsched.services.catalog import BulkAction, BulkItem, Catalog
from jobsched.services.schedule import BACKFILL_RATE_PER_SECOND, ScheduleService


class ChunkOutcome(StrEnum):
    """What one OperationMessage did."""

    ADVANCED = "operation_advanced"
    RESENT = "operation_resent"  # the next chunk's message, again (a crash after the CAS)
    RACED = "operation_raced"  # another delivery of the same chunk recorded it first
    STALE = "operation_stale"  # a duplicate of a chunk done long ago, or a finished operation
    ABANDONED = "operation_abandoned"  # its chunk's message reached the DLQ: the operation FAILED


@dataclass(frozen=True, slots=True)
class BulkAccepted:
    """A bulk action: done inline (`items`) or accepted as an operation (`operation`)."""

    action: BulkAction
    items: list[BulkItem]
    operation: Operation | None = None


@dataclass
class OperationService:
    """Start, advance and read operations."""

    schedule: ScheduleService
    crash: CrashPoints = no_crash
    backfill_chunk: int = BACKFILL_CHUNK
    bulk_chunk: int = BULK_CHUNK
    # Operations_<outcome> per chunk message (jobsched.telemetry): EMF on AWS.
    metrics: Metrics = field(default_factory=NoMetrics)

    @property
    def jobs(self) -> JobStore:
        return self.schedule.jobs

    @property
    def catalog(self) -> Catalog:
        return Catalog(job_service=self.schedule.job_service, schedule=self.schedule)

    # -- accept ---------------------------------------------------------------------------------------
    def start_backfill(self, job_id: str, request: BackfillRequest, *, tenant: str) -> Operation:
        """Backfill [from, to): inline if it holds at most backfill_chunk ticks, else as an operation."""
        job, ticks = self.schedule.plan_backfill(job_id, request, tenant=tenant)
        now = self.schedule.clock.now()
        operation = Operation(
            operation_id=_new_id(),
            tenant=tenant,
            kind="backfill",
            job_id=job.job_id,
            request={
                "from": times.stored(times.truncate_ms(request.from_)),
                "to": times.stored(times.truncate_ms(request.to)),
                "first": times.stored(ticks[0]) if ticks else None,
                "last": times.stored(ticks[-1]) if ticks else None,
            },
            total=len(ticks),
            created_at=now,
            updated_at=now,
        )
        if len(ticks) <= self.backfill_chunk:
            created, existing, sent = self.schedule.backfill_ticks(job, ticks)
            done = _progressed(
                operation, now=now, done=len(ticks), created=created, existing=existing, sent=sent
            )
            self.jobs.put_operation(done)
            return done
        return self._accept(operation)

    def start_bulk(
        self, action: BulkAction, *, tenant: str, job_ids: list[str] | None, where: JobFilter | None
    ) -> BulkAccepted:
        """Apply `action` to the jobs: inline if at most bulk_chunk, else as an operation."""
        catalog = self.catalog
        ids = list(dict.fromkeys(job_ids if job_ids is not None else catalog.matching(tenant, where)))
        if len(ids) <= self.bulk_chunk:
            return BulkAccepted(
                action=action, items=catalog.act(action, tenant=tenant, job_ids=ids, where=None)
            )
        if len(ids) > MAX_LIST_PAGE:  # act() says it for the inline case
            catalog.act(action, tenant=tenant, job_ids=ids, where=None)
        now = self.schedule.clock.now()
        operation = Operation(
            operation_id=_new_id(),
            tenant=tenant,
            kind="bulk_action",
            request={"action": action, "job_ids": ids},
            total=len(ids),
            created_at=now,
            updated_at=now,
        )
        return BulkAccepted(action=action, items=[], operation=self._accept(operation))

    def _accept(self, operation: Operation) -> Operation:
        self.jobs.put_operation(operation)
        self.crash("operation.accepted")
        self.schedule.queue.send(
            [Outgoing(OperationMessage(operation_id=operation.operation_id, chunk=0), 0)]
        )
        return operation

    # -- read -----------------------------------------------------------------------------------------
    def get(self, operation_id: str, *, tenant: str) -> Operation:
        """The tenant's operation; another tenant's is not found."""
        operation = self.jobs.get_operation(operation_id) if operation_id.startswith("op_") else None
        if operation is None or operation.tenant != tenant:
            raise NotFound(f"operation '{operation_id}' not found", field="operation_id")
        return operation

    # -- advance (the worker) -------------------------------------------------------------------------
    def advance(self, message: OperationMessage) -> ChunkOutcome:
        """Do the message's chunk once (see the module docstring); raise to leave the message queued."""
        return self._counted(self._advance(message))

    def _advance(self, message: OperationMessage) -> ChunkOutcome:
        operation = self.jobs.get_operation(message.operation_id)
        if operation is None or operation.status != "RUNNING":
            return ChunkOutcome.STALE
        if message.chunk == operation.chunk - 1:
            self._send_next(operation, delay=0)
            return ChunkOutcome.RESENT
        if message.chunk != operation.chunk:
            return ChunkOutcome.STALE
        advanced, delay = self._do_chunk(operation)
        self.crash("operation.chunk_done")
        if not self.jobs.advance_operation(advanced, expected_chunk=operation.chunk):
            return ChunkOutcome.RACED
        self.crash("operation.advanced")
        if advanced.status == "RUNNING":
            self._send_next(advanced, delay=delay)
        return ChunkOutcome.ADVANCED

    def abandon(self, message: OperationMessage) -> ChunkOutcome:
        """The queue gave up on a chunk's message (its redrive DLQ): the operation ends FAILED, saying so.

        A chunk that fails every delivery (a job it cannot act on is a result, not a failure, so this
        is a fault of the stores) would otherwise leave its operation RUNNING for ever.
        """
        return self._counted(self._abandon(message))

    def _abandon(self, message: OperationMessage) -> ChunkOutcome:
        operation = self.jobs.get_operation(message.operation_id)
        if operation is None or operation.status != "RUNNING" or operation.chunk != message.chunk:
            return ChunkOutcome.STALE
        failed = operation.model_copy(
            update={
                "status": "FAILED",
                "error": f"chunk {message.chunk} failed on every delivery; the rest was not done",
                "failed": operation.failed + operation.total - operation.done,
                "updated_at": self.schedule.clock.now(),
            }
        )
        if not self.jobs.advance_operation(failed, expected_chunk=operation.chunk):
            return ChunkOutcome.RACED
        return ChunkOutcome.ABANDONED

    def _counted(self, outcome: ChunkOutcome) -> ChunkOutcome:
        self.metrics.emit(telemetry.operations(outcome.value), 1, telemetry.COUNT)
        return outcome

    def _send_next(self, operation: Operation, *, delay: int) -> None:
        message = OperationMessage(operation_id=operation.operation_id, chunk=operation.chunk)
        self.schedule.queue.send([Outgoing(message, delay)])

    def _do_chunk(self, operation: Operation) -> tuple[Operation, int]:
        """Chunk `operation.chunk`'s work: the operation advanced past it, and the next one's delay."""
        now = self.schedule.clock.now()
        if operation.kind == "backfill":
            return self._backfill_chunk(operation, now=now)
        return self._bulk_chunk(operation, now=now), 0

    def _backfill_chunk(self, operation: Operation, *, now: datetime) -> tuple[Operation, int]:
        job = self.jobs.get_job(operation.job_id or "")
        if job is None or job.status == JobStatus.CANCELLED:
            # Nothing more to backfill: the rest of the ticks are left, and the operation says so.
            left = operation.total - operation.done
            return _progressed(operation, now=now, done=left, failed=left, error="the job was cancelled"), 0
        start = times.parse_stored(operation.request["from"])
        end = times.parse_stored(operation.request["to"])
        size = self.backfill_chunk
        ticks = self.schedule.backfill_range(job, start, end)[
            operation.chunk * size : (operation.chunk + 1) * size
        ]
        created, existing, sent = self.schedule.backfill_ticks(job, ticks)
        advanced = _progressed(
            operation, now=now, done=len(ticks), created=created, existing=existing, sent=sent
        )
        return advanced, math.ceil(sent / BACKFILL_RATE_PER_SECOND)

    def _bulk_chunk(self, operation: Operation, *, now: datetime) -> Operation:
        size = self.bulk_chunk
        ids: list[str] = operation.request["job_ids"][operation.chunk * size : (operation.chunk + 1) * size]
        items = self.catalog.act(
            operation.request["action"], tenant=operation.tenant, job_ids=ids, where=None
        )
        results = [_result(item) for item in items]
        failed = sum(1 for r in results if not r["ok"])
        return _progressed(operation, now=now, done=len(ids), failed=failed, results=results)


def _new_id() -> str:
    return f"op_{uuid.uuid4().hex}"


def _progressed(
    operation: Operation,
    *,
    now: datetime,
    done: int,
    created: int = 0,
    existing: int = 0,
    failed: int = 0,
    sent: int = 0,
    results: list[dict[str, Any]] | None = None,
    error: str | None = None,
) -> Operation:
    """The operation one chunk further: counts added, SUCCEEDED (or FAILED) once every item is done."""
    total_done = min(operation.total, operation.done + done)
    finished = total_done >= operation.total
    status = "RUNNING" if not finished else ("FAILED" if error else "SUCCEEDED")
    return operation.model_copy(
        update={
            "chunk": operation.chunk + 1,
            "done": total_done,
            "created": operation.created + created,
            "existing": operation.existing + existing,
            "failed": operation.failed + failed,
            "sent": operation.sent + sent,
            "results": [*operation.results, *(results or [])],
            "status": status,
            "error": error or operation.error,
            "updated_at": now,
        }
    )


def _result(item: BulkItem) -> dict[str, Any]:
    """A bulk item as the operation stores it (api/views.py reads it back)."""
    error: JobschedError | None = item.error
    return {
        "job_id": item.job_id,
        "ok": error is None,
        "status": item.control.status.value if item.control else None,
        "run_id": item.control.run_id if item.control else None,
        "error": {"code": error.code, "message": error.message} if error else None,
    }
