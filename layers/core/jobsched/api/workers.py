"""The worker API (external worker pools): its request and response models and its routes.

    POST /api/workers                         register (pool, capacity, labels) -> 201 the worker
    GET  /api/workers?pool=                   the tenant's workers: capacity, free, labels, status
    GET  /api/workers/queue?pool=&limit=&cursor=   the pool's waiting runs (placed nowhere yet)
    POST /api/workers/{id}/heartbeat          free resources and held runs -> the runs refused
    POST /api/workers/{id}/poll               long-poll (wait_seconds <= 20) for runs placed on it
    POST /api/runs/{run_id}/ack|started|heartbeat|finished   (body: worker_id, and the outcome;
                                              heartbeat: the handler's progress and checkpoint)

Every route is tenant-scoped (the tenancy middleware): another tenant's worker is a 404. A run
report answers {"applied", "run_id", "status", "attempt", "worker"}: a duplicate or out-of-order
report is 200 with applied false and the run's state, never an error, so a worker that retries a
report after a lost answer learns where the run stands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobsched.api.openapi import answers
from jobsched.api.tenancy import tenant
from jobsched.domain import times
from jobsched.domain.placement import Resources
from jobsched.domain.workers import MAX_LABELS, MAX_POLL_WAIT_SECONDS, QueuedRun, Worker
from jobsched.handlers import (
    MAX_CHECKPOINT_BYTES,
    MAX_PROGRESS_BYTES,
    CheckpointTooLarge,
    ProgressTooLarge,
    json_within,
)
from jobsched.services.workers import MAX_QUEUE_PAGE, Assignment, Report, WorkerPools

POOL_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
MAX_RESULT_BYTES = 64 * 1024
POLL_STEP_SECONDS = 0.5


class RegisterWorker(BaseModel):
    """Body of POST /api/workers."""

    model_config = ConfigDict(extra="forbid")

    pool: str = Field(pattern=POOL_PATTERN)
    capacity: Resources
    labels: dict[str, str] = Field(default_factory=dict, max_length=MAX_LABELS)


class WorkerHeartbeat(BaseModel):
    """Body of POST /api/workers/{id}/heartbeat."""

    model_config = ConfigDict(extra="forbid")

    free: Resources | None = None
    runs: dict[str, str] = Field(default_factory=dict, max_length=1000)
    """The runs the worker holds and their states (as the worker sees them)."""


class PollRequest(BaseModel):
    """Body of POST /api/workers/{id}/poll."""

    model_config = ConfigDict(extra="forbid")

    wait_seconds: float = Field(default=10, ge=0, le=MAX_POLL_WAIT_SECONDS)


class RunReport(BaseModel):
    """Body of POST /api/runs/{run_id}/ack|started|heartbeat."""

    model_config = ConfigDict(extra="forbid")

    worker_id: str = Field(min_length=1, max_length=64)


class RunHeartbeat(RunReport):
    """Body of POST /api/runs/{run_id}/heartbeat: the handler's ctx.heartbeat(progress) and
    ctx.checkpoint(state) on a remote worker, kept on the run's row as the worker function keeps
    them (same sizes: a 400 naming the field when over, or not JSON)."""

    progress: Any = None
    """JSON of at most MAX_PROGRESS_BYTES (compact); null or absent: the last one is left as is."""
    checkpoint: Any = None
    """JSON of at most MAX_CHECKPOINT_BYTES; absent: none stored (null is stored: ctx.checkpoint(None))."""

    @field_validator("progress")
    @classmethod
    def _progress_fits(cls, value: Any) -> Any:
        if value is not None:
            json_within(value, MAX_PROGRESS_BYTES, ProgressTooLarge, "value")
        return value

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint_fits(cls, value: Any) -> Any:
        json_within(value, MAX_CHECKPOINT_BYTES, CheckpointTooLarge, "value")
        return value

    def texts(self) -> tuple[str | None, str | None]:
        """(progress, checkpoint) as the run row keeps them: compact JSON, None for left as is."""
        progress = (
            None
            if self.progress is None
            else json_within(self.progress, MAX_PROGRESS_BYTES, ProgressTooLarge, "progress")
        )
        checkpoint = (
            None
            if "checkpoint" not in self.model_fields_set
            else json_within(self.checkpoint, MAX_CHECKPOINT_BYTES, CheckpointTooLarge, "checkpoint")
        )
        return progress, checkpoint


class ReportError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=200)
    message: str = Field(default="", max_length=4096)


class FinishedReport(RunReport):
    """Body of POST /api/runs/{run_id}/finished: a result (success) or an error (failure)."""

    result: Any = None
    error: ReportError | None = None


class WorkerView(BaseModel):
    worker_id: str
    pool: str
    status: str
    capacity: Resources
    free: Resources
    used: Resources
    """What the runs placed on it take (reserved or confirmed): never more than its capacity."""
    reported_free: Resources | None
    labels: dict[str, str]
    last_heartbeat: str
    registered_at: str
    runs: dict[str, str]
    """The runs placed on it: "reserved" (not acknowledged yet) or "confirmed"."""


class WorkerPage(BaseModel):
    items: list[WorkerView]


class WaitingRunView(BaseModel):
    run_id: str
    job_id: str
    scheduled_for: str
    resources: Resources
    labels: dict[str, str]
    waiting_since: str
    """Its place in the queue: its run's tick, or when its run row was made if later. A run queued
    again (a lapsed reservation, a dead worker's, a retry) keeps its first place, oldest first."""


class QueuePageView(BaseModel):
    items: list[WaitingRunView]
    """The pool's runs placed on no worker yet, oldest first."""
    next_cursor: str | None


class HeartbeatAnswer(BaseModel):
    worker: WorkerView
    refused_runs: list[str]
    """Reported runs it no longer holds: stop them (a dead worker's, or placed elsewhere since)."""


class AssignmentView(BaseModel):
    run_id: str
    job_id: str
    tenant: str
    scheduled_for: str
    handler: str
    payload: dict[str, Any]
    attempt: int
    effect_key: str
    resources: Resources
    last_checkpoint: Any = None
    """The run's last checkpoint (null: none): the handler's ctx.last_checkpoint, to resume from."""


class PollAnswer(BaseModel):
    runs: list[AssignmentView]


class ReportAnswer(BaseModel):
    applied: bool
    run_id: str
    status: str | None
    attempt: int | None
    worker: str | None
    cancel_requested: bool = False


def worker_view(worker: Worker) -> WorkerView:
    return WorkerView(
        worker_id=worker.worker_id,
        pool=worker.pool,
        status=worker.status,
        capacity=worker.capacity,
        free=worker.free(),
        used=worker.used(),
        reported_free=worker.reported_free,
        labels=worker.labels,
        last_heartbeat=times.iso(worker.last_heartbeat),
        registered_at=times.iso(worker.registered_at),
        runs={run_id: hold.state for run_id, hold in worker.holds.items()},
    )


def _assignment(a: Assignment) -> AssignmentView:
    return AssignmentView(
        run_id=a.run_id,
        job_id=a.job_id,
        tenant=a.tenant,
        scheduled_for=times.iso(a.scheduled_for),
        handler=a.handler,
        payload=a.payload,
        attempt=a.attempt,
        effect_key=a.effect_key,
        resources=a.resources,
        last_checkpoint=a.last_checkpoint,
    )


def _waiting(queued: QueuedRun) -> WaitingRunView:
    scheduled_for = times.parse_stored(queued.scheduled_for)
    return WaitingRunView(
        run_id=queued.run_id,
        job_id=queued.job_id,
        scheduled_for=times.iso(scheduled_for),
        resources=queued.resources,
        labels=dict(queued.labels),
        waiting_since=times.iso(max(queued.enqueued_at, scheduled_for)),
    )


def _report(run_id: str, report: Report) -> ReportAnswer:
    row = report.run
    return ReportAnswer(
        applied=report.applied,
        run_id=run_id,
        status=row.status.value if row else None,
        attempt=row.attempt if row else None,
        worker=row.worker if row else None,
        cancel_requested=bool(row and row.cancel_requested_at),
    )


def add_worker_routes(
    app: APIGatewayRestResolver,
    pools: WorkerPools,
    *,
    sleep: Callable[[float], None],
    monotonic: Callable[[], float],
) -> None:
    """The worker API on `app`. `sleep`/`monotonic` bound the long-poll (time.sleep/time.monotonic
    on AWS and locally; a test gives wait_seconds 0)."""

    @app.post("/api/workers", responses=answers(201, "Registered", 400, 503))
    def register_worker(body: Annotated[RegisterWorker, Body()]) -> Response[WorkerView]:
        worker = pools.register(
            tenant=tenant(app), pool=body.pool, capacity=body.capacity, labels=body.labels
        )
        return Response(
            status_code=HTTPStatus.CREATED,
            content_type=content_types.APPLICATION_JSON,
            body=worker_view(worker),
        )

    @app.get("/api/workers", responses=answers(200, "The caller's workers", 400, 503))
    def list_workers(pool: Annotated[str | None, Query(pattern=POOL_PATTERN)] = None) -> WorkerPage:
        return WorkerPage(items=[worker_view(w) for w in pools.listing(tenant=tenant(app), pool=pool)])

    @app.get(
        "/api/workers/queue",
        responses=answers(200, "The pool's waiting runs, oldest first", 400, 503),
    )
    def pool_queue(
        pool: Annotated[str, Query(pattern=POOL_PATTERN)],
        limit: Annotated[int, Query(ge=1, le=MAX_QUEUE_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
    ) -> QueuePageView:
        page = pools.queue(tenant=tenant(app), pool=pool, cursor=cursor or None, limit=limit)
        return QueuePageView(items=[_waiting(q) for q in page.items], next_cursor=page.next_cursor)

    @app.post("/api/workers/<worker_id>/heartbeat", responses=answers(200, "Recorded", 400, 404, 503))
    def worker_heartbeat(
        worker_id: Annotated[str, Path(max_length=64)], body: Annotated[WorkerHeartbeat, Body()]
    ) -> HeartbeatAnswer:
        worker, refused = pools.heartbeat(
            tenant=tenant(app), worker_id=worker_id, free=body.free, runs=body.runs
        )
        return HeartbeatAnswer(worker=worker_view(worker), refused_runs=refused)

    @app.post(
        "/api/workers/<worker_id>/poll", responses=answers(200, "Runs placed on it", 400, 404, 409, 503)
    )
    def worker_poll(
        worker_id: Annotated[str, Path(max_length=64)], body: Annotated[PollRequest, Body()]
    ) -> PollAnswer:
        who = tenant(app)
        deadline = monotonic() + body.wait_seconds
        while True:  # bounded: wait_seconds <= MAX_POLL_WAIT_SECONDS
            found = pools.poll(tenant=who, worker_id=worker_id)
            if found or monotonic() >= deadline:
                return PollAnswer(runs=[_assignment(a) for a in found])
            sleep(min(POLL_STEP_SECONDS, max(0.0, deadline - monotonic())))

    @app.post("/api/runs/<run_id>/ack", responses=answers(200, "The run's state", 400, 404, 503))
    def run_ack(
        run_id: Annotated[str, Path(max_length=96)], body: Annotated[RunReport, Body()]
    ) -> ReportAnswer:
        return _report(run_id, pools.ack(tenant=tenant(app), worker_id=body.worker_id, run_id=run_id))

    @app.post("/api/runs/<run_id>/started", responses=answers(200, "The run's state", 400, 404, 503))
    def run_started(
        run_id: Annotated[str, Path(max_length=96)], body: Annotated[RunReport, Body()]
    ) -> ReportAnswer:
        return _report(run_id, pools.started(tenant=tenant(app), worker_id=body.worker_id, run_id=run_id))

    @app.post("/api/runs/<run_id>/heartbeat", responses=answers(200, "The run's state", 400, 404, 503))
    def run_heartbeat(
        run_id: Annotated[str, Path(max_length=96)], body: Annotated[RunHeartbeat, Body()]
    ) -> ReportAnswer:
        progress, checkpoint = body.texts()
        report = pools.beat(
            tenant=tenant(app),
            worker_id=body.worker_id,
            run_id=run_id,
            progress=progress,
            checkpoint=checkpoint,
        )
        return _report(run_id, report)

    @app.post("/api/runs/<run_id>/finished", responses=answers(200, "The run's state", 400, 404, 503))
    def run_finished(
        run_id: Annotated[str, Path(max_length=96)], body: Annotated[FinishedReport, Body()]
    ) -> ReportAnswer:
        error = (body.error.type, body.error.message) if body.error else None
        result = None if error else json.dumps(body.result, separators=(",", ":"))[:MAX_RESULT_BYTES]
        report = pools.finished(
            tenant=tenant(app), worker_id=body.worker_id, run_id=run_id, result=result, error=error
        )
        return _report(run_id, report)
