"""Domain records -> the API's views: every timestamp as ISO-8601 with its UTC offset, every status
as its name. The one place the wire format is built from what the services answer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from jobsched.api import errors
from jobsched.api.models import (
    AlertItem,
    AlertPage,
    AttemptView,
    BackfillPreview,
    BackfillResult,
    BatchCreated,
    BulkActionResult,
    BulkItemResult,
    CancelResult,
    DeadLetterItem,
    DeadLetterPage,
    ErrorDetail,
    ErrorResponse,
    ExecutionView,
    GraphEdge,
    GraphNode,
    GraphPeriod,
    GraphView,
    JobControl,
    JobCountsView,
    JobCreated,
    JobListItem,
    JobListPage,
    JobStatsView,
    JobView,
    LastRunView,
    OperationView,
    PercentilesView,
    ReplayAccepted,
    RunCancelResult,
    RunDetailView,
    RunLogLine,
    RunLogsView,
    RunPage,
    RunView,
    ScheduleView,
    SigningSecretView,
    TenantHealthView,
)
from jobsched.domain import results, times
from jobsched.domain.firing import next_fires
from jobsched.domain.listing import MAX_COUNT_READ, StatusCounts, target_type_of
from jobsched.domain.models import Execution
from jobsched.domain.operations import Operation
from jobsched.domain.secrets import SecretRecord
from jobsched.domain.status import JobStatus
from jobsched.errors import JobschedError
from jobsched.services.alerts import AlertPage as AlertResults
from jobsched.services.catalog import BulkItem, ListedPage
from jobsched.services.operations import BulkAccepted
from jobsched.services.runs import (
    STATS_MAX_RUNS,
    JobStats,
    Percentiles,
    RunCancel,
    RunDetail,
    RunLogsPage,
    TenantHealth,
)
from jobsched.services.schedule import BACKFILL_RATE_PER_SECOND

# GET /api/jobs/{id}'s next_runs: computed from the job itself, no store read.
NEXT_RUNS = 5


def _iso(moment: datetime | None) -> str | None:
    return times.iso(moment) if moment else None


def job_created(submitted: results.Submitted) -> JobCreated:
    """The 201 body of POST /api/jobs."""
    return JobCreated(
        job_id=submitted.job_id, status=submitted.status.value, next_run_at=_iso(submitted.next_run_at)
    )


def batch_created(answers: Sequence[results.Submitted | JobschedError]) -> BatchCreated:
    """The body of POST /api/jobs/batch: each job's 201 body, or its error naming `jobs[i].<field>`."""
    items: list[JobCreated | ErrorResponse] = []
    for i, answer in enumerate(answers):
        if isinstance(answer, results.Submitted):
            items.append(job_created(answer))
            continue
        message, field = answer.message, answer.field
        if field == "Idempotency-Key":  # a header for one job; a field of the item here
            field, message = "idempotency_key", message.replace("Idempotency-Key", "idempotency_key")
        if field and field != "body" and not message.startswith(f"{field}:"):
            message = f"{field}: {message}"
        items.append(ErrorResponse(error=ErrorDetail(code=answer.code, message=errors.in_item(i, message))))
    return BatchCreated(items=items)


def execution_view(run: Execution) -> ExecutionView:
    """One of GET /api/jobs/{id}'s recent_executions."""
    return ExecutionView(
        run_id=run.run_id,
        scheduled_for=times.iso(run.scheduled_for),
        attempt=run.attempt,
        status=run.status.value,
        started_at=_iso(run.started_at),
        finished_at=_iso(run.finished_at),
        duration_ms=run.duration_ms,
        lateness_ms=run.lateness_ms(),
        error=run.error,
        result=run.result,
        attempts=[
            AttemptView(
                attempt=a.attempt,
                worker=a.worker,
                started_at=_iso(a.started_at),
                finished_at=_iso(a.finished_at),
                outcome=a.outcome,
                error=a.error,
            )
            for a in run.attempts
        ],
    )


def job_view(detail: results.JobDetail) -> JobView:
    """The body of GET /api/jobs/{id} (and of PATCH)."""
    job = detail.job
    placement = job.placement()
    return JobView(
        job_id=job.job_id,
        type=job.type,
        status=job.status.value,
        handler=job.handler,
        target=job.target,
        payload=job.payload,
        name=job.name,
        run_at=_iso(job.run_at),
        cron_expr=job.cron_expr,
        timezone=job.timezone,
        max_attempts=job.retry.max_attempts,
        backoff=job.retry.backoff,
        timeout_seconds=job.retry.timeout_seconds,
        non_retryable_errors=list(job.retry.non_retryable),
        idempotent=job.idempotent,
        overlap_policy=job.policy.overlap_policy,
        catchup=job.policy.catchup,
        max_catchup=job.policy.max_catchup,
        starting_deadline_seconds=job.policy.starting_deadline_seconds,
        jitter_seconds=job.policy.jitter_seconds,
        start_at=_iso(job.policy.start_at),
        end_at=_iso(job.policy.end_at),
        max_runs=job.policy.max_runs,
        priority=job.policy.priority,
        paused_at=_iso(job.paused_at),
        depends_on=list(job.depends_on),
        dependants=list(job.dependants),
        tags=dict(job.tags),
        alerts=job.alerts,
        concurrency=job.concurrency,
        runs_on=placement.runs_on,
        resources=placement.resources,
        next_run_at=_iso(detail.next_run_at),
        next_runs=[times.iso(t) for t in next_fires(job, first=detail.next_run_at, count=NEXT_RUNS)],
        created_at=times.iso(job.created_at),
        updated_at=times.iso(job.updated_at),
        recent_executions=[execution_view(r) for r in detail.runs],
    )


def cancel_result(control: results.Control) -> CancelResult:
    """The body of DELETE /api/jobs/{id}."""
    return CancelResult(job_id=control.job_id, status=control.status.value)


def job_control(control: results.Control) -> JobControl:
    """The body of pause, resume and run-now."""
    return JobControl(
        job_id=control.job_id,
        status=control.status.value,
        next_run_at=_iso(control.next_run_at),
        run_id=control.run_id,
    )


def backfill_result(operation: Operation) -> BackfillResult:
    """The 202 body of POST /api/jobs/{id}/backfill: done inline, or its operation's progress."""
    request = operation.request
    spread = operation.sent if operation.status != "RUNNING" else operation.total
    return BackfillResult(
        job_id=operation.job_id or "",
        ticks=operation.total,
        created=operation.created,
        existing=operation.existing,
        first=_iso(times.parse_stored(request["first"]) if request.get("first") else None),
        last=_iso(times.parse_stored(request["last"]) if request.get("last") else None),
        spread_seconds=math.ceil(spread / BACKFILL_RATE_PER_SECOND),
        operation_id=operation.operation_id,
        status=operation.status,
        done=operation.done,
    )


# A dry run's preview shows this many ticks at most; `ticks` counts them all.
PREVIEW_TICKS = 50


def backfill_preview(job_id: str, ticks: Sequence[datetime]) -> BackfillPreview:
    """The 200 body of POST /api/jobs/{id}/backfill with dry_run: the ticks it would cover."""
    return BackfillPreview(
        job_id=job_id,
        ticks=len(ticks),
        first=_iso(ticks[0]) if ticks else None,
        last=_iso(ticks[-1]) if ticks else None,
        preview=[times.iso(t) for t in ticks[:PREVIEW_TICKS]],
        truncated=len(ticks) > PREVIEW_TICKS,
    )


def operation_view(operation: Operation) -> OperationView:
    """The body of GET /api/operations/{id}."""
    return OperationView(
        operation_id=operation.operation_id,
        kind=operation.kind,
        status=operation.status,
        job_id=operation.job_id,
        action=operation.request.get("action"),
        total=operation.total,
        done=operation.done,
        created=operation.created,
        existing=operation.existing,
        failed=operation.failed,
        error=operation.error,
        items=[BulkItemResult.model_validate(r) for r in operation.results],
        created_at=times.iso(operation.created_at),
        updated_at=times.iso(operation.updated_at),
    )


def bulk_accepted(accepted: BulkAccepted) -> BulkActionResult:
    """The body of POST /api/jobs/actions: the results (inline), or the accepted operation."""
    if accepted.operation is None:
        result = bulk_result(accepted.action, accepted.items)
        return result.model_copy(update={"total": len(result.items)})
    operation = accepted.operation
    return BulkActionResult(
        action=accepted.action,
        items=[],
        succeeded=0,
        failed=0,
        operation_id=operation.operation_id,
        status=operation.status,
        total=operation.total,
    )


def run_page(page: results.RunPage) -> RunPage:
    """The body of GET /api/jobs/{id}/runs."""
    return RunPage(
        items=[
            RunView(
                run_id=r.run_id,
                scheduled_for=times.iso(r.scheduled_for),
                kind=r.kind,
                status=r.status.value,
                reason=r.reason,
                attempts=r.attempt,
                started_at=_iso(r.started_at),
                finished_at=_iso(r.finished_at),
                lateness_ms=r.lateness_ms(),
                duration_ms=r.duration_ms,
                error=r.error,
                progress=r.progress,
                progress_at=_iso(r.progress_at),
            )
            for r in page.items
        ],
        next_cursor=page.next_cursor,
    )


def alert_page(page: AlertResults) -> AlertPage:
    """The body of GET /api/alerts."""
    return AlertPage(
        items=[
            AlertItem(
                alert_id=a.alert_id,
                kind=a.kind,
                job_id=a.job_id,
                run_id=a.run_id,
                scheduled_for=times.iso(a.scheduled_for),
                at=times.iso(a.at),
                detail=a.detail,
            )
            for a in page.items
        ],
        next_cursor=page.next_cursor,
    )


def dead_letter_page(page: results.DeadLetterPage) -> DeadLetterPage:
    """The body of GET /api/dead-letter."""
    return DeadLetterPage(
        items=[
            DeadLetterItem(
                job_id=r.job_id,
                run_id=r.run_id,
                scheduled_for=times.iso(r.scheduled_for),
                dead_at=times.iso(r.dead_at),
                attempts=r.attempt,
                last_error=f"{_or_unknown(r.error_type)}: {r.error_message or ''}".strip(),
            )
            for r in page.items
        ],
        next_cursor=page.next_cursor,
    )


def replay_accepted(replay: results.Replay) -> ReplayAccepted:
    """The 202 body of POST /api/dead-letter/{run_id}/replay."""
    return ReplayAccepted(run_id=replay.run_id, job_id=replay.job_id, status=replay.status.value)


def signing_secret(record: SecretRecord) -> SigningSecretView:
    """The body of GET /api/signing-secret and POST /api/signing-secret/rotate."""
    return SigningSecretView(secret=record.secret, created_at=times.iso(record.created_at))


def graph_view(graph: results.Graph) -> GraphView:
    """The body of GET /api/jobs/{id}/graph."""
    return GraphView(
        job_id=graph.job_id,
        nodes=[
            GraphNode(job_id=n.job_id, name=n.name, type=n.type, status=n.status.value) for n in graph.nodes
        ],
        edges=[GraphEdge(upstream=u, dependant=d) for u, d in graph.edges],
        periods=[
            GraphPeriod(period=p.period, status={k: v.value for k, v in p.status.items()})
            for p in graph.periods
        ],
        truncated=graph.truncated,
    )


def _or_unknown(error_type: str | None) -> str:
    return "Unknown" if error_type is None else error_type


def job_counts(counted: StatusCounts) -> JobCountsView:
    """The body of GET /api/jobs/counts: every status, in the state machine's order, 0 included."""
    return JobCountsView(
        counts={s.value: counted.counts.get(s.value, 0) for s in JobStatus},
        complete=counted.complete,
        bound=MAX_COUNT_READ,
        items_read=counted.items_read,
    )


def job_list_page(page: ListedPage) -> JobListPage:
    """The body of GET /api/jobs."""
    items = []
    for listed in page.items:
        job, last = listed.job, listed.last_run
        items.append(
            JobListItem(
                job_id=job.job_id,
                name=job.name,
                type=job.type,
                status=job.status.value,
                target=target_type_of(job),
                schedule=ScheduleView(
                    cron_expr=job.cron_expr,
                    timezone=job.timezone if job.cron_expr else None,
                    run_at=_iso(job.run_at),
                    depends_on=list(job.depends_on),
                ),
                next_run_at=_iso(listed.next_run_at),
                tags=dict(job.tags),
                last_run=LastRunView(
                    run_id=last.run_id,
                    scheduled_for=times.iso(last.scheduled_for),
                    status=last.status.value,
                    finished_at=_iso(last.finished_at),
                )
                if last
                else None,
                created_at=times.iso(job.created_at),
            )
        )
    return JobListPage(items=items, next_cursor=page.next_cursor, items_read=page.items_read)


def bulk_result(action: str, done: list[BulkItem]) -> BulkActionResult:
    """The body of POST /api/jobs/actions."""
    items = [
        BulkItemResult(
            job_id=d.job_id,
            ok=d.error is None,
            status=d.control.status.value if d.control else None,
            run_id=d.control.run_id if d.control else None,
            error=ErrorDetail(code=d.error.code, message=d.error.message) if d.error else None,
        )
        for d in done
    ]
    ok = sum(i.ok for i in items)
    return BulkActionResult(action=action, items=items, succeeded=ok, failed=len(items) - ok)


def run_detail(detail: RunDetail) -> RunDetailView:
    """The body of GET /api/runs/{run_id}."""
    run = detail.run
    shown = execution_view(run)
    return RunDetailView(
        run_id=run.run_id,
        job_id=run.job_id,
        scheduled_for=shown.scheduled_for,
        kind=run.kind,
        status=shown.status,
        reason=run.reason,
        attempt=run.attempt,
        started_at=shown.started_at,
        finished_at=shown.finished_at,
        lateness_ms=shown.lateness_ms,
        duration_ms=shown.duration_ms,
        result=run.result,
        error=run.error,
        attempts=shown.attempts,
        cancel_requested_at=_iso(run.cancel_requested_at),
        progress=run.progress,
        progress_at=_iso(run.progress_at),
        checkpoint=run.checkpoint,
        checkpoint_at=_iso(run.checkpoint_at),
        ecs_tasks=list(run.ecs_tasks),
        logs_url=detail.logs_url,
    )


def run_logs(page: RunLogsPage) -> RunLogsView:
    """The body of GET /api/runs/{run_id}/logs."""
    return RunLogsView(
        lines=[RunLogLine(at=times.iso(line.at), message=line.message) for line in page.lines],
        next_cursor=page.next_cursor,
        console_url=page.console_url,
    )


def run_cancel_result(cancel: RunCancel) -> RunCancelResult:
    """The body of POST /api/runs/{run_id}/cancel."""
    return RunCancelResult(run_id=cancel.run_id, status=cancel.status.value)


def _percentiles(p: Percentiles) -> PercentilesView:
    return PercentilesView(p50=p.p50, p95=p.p95, p99=p.p99, max=p.max)


def tenant_health(health: TenantHealth) -> TenantHealthView:
    """The body of GET /api/stats."""
    return TenantHealthView(
        at=_iso(health.at) or "",
        backlog=health.backlog,
        oldest_due=_iso(health.oldest_due),
        truncated=health.truncated,
        sampled_jobs=health.sampled_jobs,
        runs=health.runs,
        by_status=health.by_status,
        lateness_ms=_percentiles(health.lateness_ms),
        duration_ms=_percentiles(health.duration_ms),
    )


def job_stats(stats: JobStats) -> JobStatsView:
    """The body of GET /api/jobs/{id}/stats."""
    return JobStatsView(
        job_id=stats.job_id,
        since=_iso(stats.since),
        runs=stats.runs,
        by_status=stats.by_status,
        lateness_ms=_percentiles(stats.lateness_ms),
        duration_ms=_percentiles(stats.duration_ms),
        success_rate=stats.success_rate,
        truncated=stats.truncated,
        oldest_counted=_iso(stats.oldest_counted),
        max_runs=STATS_MAX_RUNS,
    )
