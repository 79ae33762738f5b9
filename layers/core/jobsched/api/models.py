"""The API's wire format: every response body, and the error body every 4xx/5xx carries.

Request bodies are the domain's commands (jobsched.domain.commands: the services take them as
input), re-exported here so the routes name every model of the wire from one module. The class
names are the OpenAPI document's component names: renaming one changes the document clients see.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jobsched.domain.alerts import AlertPolicy
from jobsched.domain.commands import BackfillRequest, CreateJobRequest, PatchJobRequest
from jobsched.domain.compute import Resources, RunsOn
from jobsched.domain.limits import Concurrency
from jobsched.domain.listing import MAX_LIST_PAGE, JobFilter
from jobsched.domain.models import Backoff, RunError
from jobsched.domain.targets import TargetSpec


class ErrorDetail(BaseModel):
    """What went wrong."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        description="validation_error, payload_too_large, not_found, conflict, idempotency_key_reused, "
        "in_progress, unavailable, internal_error"
    )
    message: str = Field(description="for bad input, names the field and the problem")


class ErrorResponse(BaseModel):
    """The body of every error answer."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail


class QuotaErrorResponse(BaseModel):
    """The body of a 429: the error, and the quota it is over with its limit (jobsched.domain.limits)."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail
    quota: str
    limit: int


class JobCreated(BaseModel):
    """The 201 answer to POST /api/jobs (also what an idempotent repeat answers)."""

    job_id: str
    status: str
    next_run_at: str | None


class BatchCreateRequest(BaseModel):
    """Body of POST /api/jobs/batch: up to 100 jobs, each a POST /api/jobs body plus an optional
    `idempotency_key` (its Idempotency-Key: a retried batch creates nothing twice). Items are
    validated one by one (jobsched.api.routes), so one bad item does not sink the others."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[dict[str, Any]] = Field(min_length=1, max_length=100)


class BatchCreated(BaseModel):
    """The answer to POST /api/jobs/batch: one item per job, in request order."""

    items: list[JobCreated | ErrorResponse]


class AttemptView(BaseModel):
    """One attempt of a run as the API shows it."""

    attempt: int
    worker: str | None
    started_at: str | None
    finished_at: str | None
    outcome: str
    error: RunError | None = None


class ExecutionView(BaseModel):
    """A run as GET /api/jobs/{id} shows it."""

    run_id: str
    scheduled_for: str
    attempt: int
    status: str
    started_at: str | None
    finished_at: str | None
    duration_ms: int | None = None
    lateness_ms: int | None = None
    error: RunError | None = None
    result: Any = None
    attempts: list[AttemptView] = Field(default_factory=list)


class JobView(BaseModel):
    """The answer to GET /api/jobs/{id}."""

    job_id: str
    type: str
    status: str
    handler: str | None = Field(description="a python target's handler (the shorthand); else null")
    target: TargetSpec
    payload: dict[str, Any]
    name: str | None
    run_at: str | None
    cron_expr: str | None
    timezone: str
    max_attempts: int
    backoff: Backoff
    timeout_seconds: int | None
    non_retryable_errors: list[str]
    idempotent: bool
    overlap_policy: str
    catchup: str
    max_catchup: int
    starting_deadline_seconds: int | None
    jitter_seconds: int
    start_at: str | None
    end_at: str | None
    max_runs: int | None
    priority: str = "normal"
    paused_at: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    dependants: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    alerts: AlertPolicy | None = None
    concurrency: Concurrency | None = None
    runs_on: RunsOn = Field(description="where runs execute, as resolved (jobsched.domain.compute)")
    resources: Resources = Field(description="what each run gets: the Lambda worker's, or a Fargate size")
    next_run_at: str | None
    next_runs: list[str] = Field(
        default_factory=list,
        description="the next 5 ticks (UTC), next_run_at first, in the job's timezone; [] for a "
        "one-off, a dependent, a paused or a finished job",
    )
    created_at: str
    updated_at: str
    recent_executions: list[ExecutionView]


class CancelResult(BaseModel):
    """The answer to DELETE /api/jobs/{id}."""

    job_id: str
    status: str


class DeadLetterItem(BaseModel):
    """One dead-lettered run in GET /api/dead-letter."""

    job_id: str
    run_id: str
    scheduled_for: str
    dead_at: str
    attempts: int
    last_error: str


class DeadLetterPage(BaseModel):
    """A page of the dead-letter list, newest first; next_cursor is null on the last page."""

    items: list[DeadLetterItem]
    next_cursor: str | None


class AlertItem(BaseModel):
    """One alert in GET /api/alerts."""

    alert_id: str
    kind: str
    job_id: str
    run_id: str
    scheduled_for: str
    at: str
    detail: str


class AlertPage(BaseModel):
    """A page of the caller's alerts, newest first; next_cursor is null on the last page."""

    items: list[AlertItem]
    next_cursor: str | None


class ReplayAccepted(BaseModel):
    """The answer to POST /api/dead-letter/{run_id}/replay."""

    run_id: str
    job_id: str
    status: str


class SigningSecretView(BaseModel):
    """The caller's HTTP signing secret (GET /api/signing-secret, POST /api/signing-secret/rotate).

    A receiver checks X-Jobsched-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>.
    """

    secret: str = Field(description="the HMAC-SHA256 key, as its UTF-8 bytes: 64 lowercase hex digits")
    created_at: str


class BackfillResult(BaseModel):
    """What a backfill did: runs created now, ticks that already had a run, and their spread."""

    job_id: str
    ticks: int
    created: int
    existing: int
    first: str | None
    last: str | None
    spread_seconds: int
    operation_id: str = Field(description="GET /api/operations/{id}: the backfill's progress")
    status: str = Field(
        description="SUCCEEDED: done inline (at most 200 ticks); RUNNING: carried out outside the request"
    )
    done: int = Field(description="ticks done so far (created + existing)")


class BackfillPreview(BaseModel):
    """The 200 answer to a backfill with dry_run: what it would cover; nothing was written."""

    job_id: str
    dry_run: bool = True
    ticks: int = Field(description="how many ticks [from, to) holds (each gets a run unless it has one)")
    first: str | None
    last: str | None
    preview: list[str] = Field(description="the first ticks, oldest first, at most 50 (UTC)")
    truncated: bool = Field(description="true when `preview` shows fewer than `ticks`")


class RunView(BaseModel):
    """One run in GET /api/jobs/{id}/runs."""

    run_id: str
    scheduled_for: str
    kind: str
    status: str
    reason: str | None = None
    attempts: int
    started_at: str | None
    finished_at: str | None
    lateness_ms: int | None
    duration_ms: int | None
    error: RunError | None = None
    progress: Any = None
    """The handler's last ctx.heartbeat(progress) (null: none)."""
    progress_at: str | None = None


class RunPage(BaseModel):
    """A page of run history, newest first; next_cursor is null on the last page."""

    items: list[RunView]
    next_cursor: str | None


class JobControl(BaseModel):
    """The answer to pause, resume and run-now."""

    job_id: str
    status: str
    next_run_at: str | None = None
    run_id: str | None = None


class GraphNode(BaseModel):
    """A job in GET /api/jobs/{id}/graph."""

    job_id: str
    name: str | None
    type: str
    status: str


class GraphEdge(BaseModel):
    """upstream -> dependant."""

    upstream: str
    dependant: str


class GraphPeriod(BaseModel):
    """One period of the DAG and each node's run status in it (absent: no run yet)."""

    period: str
    status: dict[str, str]


class GraphView(BaseModel):
    """The DAG around a job: nodes, edges, and each node's run status in its most recent periods
    (or, with ?period=, in that one period alone)."""

    job_id: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    periods: list[GraphPeriod]
    truncated: bool = False
    """The graph reached MAX_GRAPH_NODES jobs: some node shown has an edge to a job left out."""


class LastRunView(BaseModel):
    """A job's newest run, as the listing shows it."""

    run_id: str
    scheduled_for: str
    status: str
    finished_at: str | None


class ScheduleView(BaseModel):
    """When a job fires: its cron schedule, its one time, or its upstreams."""

    cron_expr: str | None = None
    timezone: str | None = None
    run_at: str | None = None
    depends_on: list[str] = Field(default_factory=list)


class JobListItem(BaseModel):
    """One job in GET /api/jobs."""

    job_id: str
    name: str | None
    type: str
    status: str
    target: str
    schedule: ScheduleView
    next_run_at: str | None
    tags: dict[str, str]
    last_run: LastRunView | None
    created_at: str


class JobListPage(BaseModel):
    """A page of the caller's jobs; next_cursor is null on the last page."""

    items: list[JobListItem]
    next_cursor: str | None
    items_read: int = Field(description="index items read for this page (the caller's partition only)")


class JobCountsView(BaseModel):
    """The caller's jobs per status (GET /api/jobs/counts), over its whole listing partition up to a
    bound: past it, `complete` is false and each count is a lower bound (show it as "N+")."""

    counts: dict[str, int] = Field(description="every job status, with its number of jobs (0 included)")
    complete: bool = Field(description="false: the count stopped at `bound` index items; each is at least")
    bound: int = Field(description="index items one count reads at most (MAX_COUNT_READ)")
    items_read: int = Field(description="index items read (the caller's partition only)")


class BulkActionRequest(BaseModel):
    """Body of POST /api/jobs/actions: an action, and the jobs by id or by the listing's filter."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["pause", "resume", "cancel", "run_now"]
    job_ids: list[str] | None = Field(default=None, min_length=1, max_length=MAX_LIST_PAGE)
    filter: JobFilter | None = None

    @model_validator(mode="after")
    def _one_selection(self) -> BulkActionRequest:
        if (self.job_ids is None) == (self.filter is None):
            raise ValueError("name the jobs with exactly one of job_ids and filter")
        return self


class BulkItemResult(BaseModel):
    """What the action did to one job: its new status, or the error it met."""

    job_id: str
    ok: bool
    status: str | None = None
    run_id: str | None = None
    error: ErrorDetail | None = None


class BulkActionResult(BaseModel):
    """The answer to POST /api/jobs/actions: one result per job, in the order asked."""

    action: str
    items: list[BulkItemResult]
    succeeded: int
    failed: int
    operation_id: str | None = Field(
        default=None, description="more than 20 jobs: accepted (202), GET /api/operations/{id}"
    )
    status: str = Field(default="SUCCEEDED", description="SUCCEEDED (done inline, 200) or RUNNING (202)")
    total: int = Field(default=0, description="jobs the action covers")


class OperationView(BaseModel):
    """The answer to GET /api/operations/{id}: long work carried out outside the request."""

    operation_id: str
    kind: str = Field(description="backfill | bulk_action")
    status: str = Field(description="RUNNING | SUCCEEDED | FAILED")
    job_id: str | None = None
    action: str | None = None
    total: int
    done: int
    created: int
    existing: int
    failed: int
    error: str | None = None
    items: list[BulkItemResult] = Field(default_factory=list, description="bulk_action: per-job results")
    created_at: str
    updated_at: str


class RunDetailView(BaseModel):
    """The answer to GET /api/runs/{run_id}."""

    run_id: str
    job_id: str
    scheduled_for: str
    kind: str
    status: str
    reason: str | None = None
    attempt: int
    started_at: str | None
    finished_at: str | None
    lateness_ms: int | None
    duration_ms: int | None
    result: Any = None
    error: RunError | None = None
    attempts: list[AttemptView]
    cancel_requested_at: str | None = None
    progress: Any = Field(default=None, description="the handler's last ctx.heartbeat(progress); null: none")
    progress_at: str | None = None
    checkpoint: Any = Field(
        default=None, description="the run's last ctx.checkpoint() state: its next attempt resumes from it"
    )
    checkpoint_at: str | None = None
    ecs_tasks: list[str] = Field(
        default_factory=list,
        description="a container job's Fargate tasks (ARNs), one per attempt, in the order they started",
    )
    logs_url: str | None = Field(
        description="the worker's CloudWatch log group filtered by the run id; null on the local stack"
    )


class RunCancelResult(BaseModel):
    """POST /api/runs/{run_id}/cancel: CANCELLED (200), or still running and asked to stop (202)."""

    run_id: str
    status: str


class RunLogLine(BaseModel):
    """One line a run logged."""

    at: str
    message: str


class RunLogsView(BaseModel):
    """GET /api/runs/{run_id}/logs: the run's lines, oldest first."""

    lines: list[RunLogLine]
    next_cursor: str | None = Field(description="null: no more lines now (a running run may log more)")
    console_url: str | None = Field(
        description="the CloudWatch console's view of the worker log group filtered by the run id; "
        "null on the local stack"
    )


class PercentilesView(BaseModel):
    """Nearest-rank percentiles in milliseconds (null: no run to measure)."""

    p50: int | None
    p95: int | None
    p99: int | None
    max: int | None


class JobStatsView(BaseModel):
    """The answer to GET /api/jobs/{id}/stats."""

    job_id: str
    since: str | None
    runs: int
    by_status: dict[str, int]
    lateness_ms: PercentilesView
    duration_ms: PercentilesView
    success_rate: float | None
    truncated: bool = Field(
        description="more runs than max_runs since `since`: the newest max_runs are counted"
    )
    oldest_counted: str | None
    max_runs: int


class TenantHealthView(BaseModel):
    """The answer to GET /api/stats: the caller's due backlog and a sample of its recent runs."""

    at: str
    backlog: int = Field(description="SCHEDULED jobs whose next tick is due and not yet handed over")
    oldest_due: str | None = Field(description="the oldest such tick (null: no backlog)")
    truncated: bool = Field(description="the backlog read stopped at its bound: the count is a floor")
    sampled_jobs: int = Field(description="jobs sampled: the newest and the soonest due, 20 of each")
    runs: int = Field(description="runs measured: the newest 20 of each sampled job")
    by_status: dict[str, int]
    lateness_ms: PercentilesView
    duration_ms: PercentilesView


__all__ = [
    "AlertItem",
    "AlertPage",
    "AttemptView",
    "BackfillPreview",
    "BackfillRequest",
    "BackfillResult",
    "BulkActionRequest",
    "BulkActionResult",
    "BulkItemResult",
    "CancelResult",
    "CreateJobRequest",
    "DeadLetterItem",
    "DeadLetterPage",
    "ErrorDetail",
    "ErrorResponse",
    "ExecutionView",
    "GraphEdge",
    "GraphNode",
    "GraphPeriod",
    "GraphView",
    "JobControl",
    "JobCreated",
    "JobListItem",
    "JobListPage",
    "JobStatsView",
    "JobView",
    "LastRunView",
    "OperationView",
    "PatchJobRequest",
    "PercentilesView",
    "QuotaErrorResponse",
    "ReplayAccepted",
    "RunCancelResult",
    "RunDetailView",
    "RunPage",
    "RunView",
    "ScheduleView",
    "TenantHealthView",
]
