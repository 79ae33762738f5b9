"""The routes: powertools APIGatewayRestResolver over the job services.

The same resolver serves API Gateway on AWS and the local stack (which turns HTTP requests into
API Gateway REST proxy events). A route takes the caller's tenant from the tenancy middleware
(jobsched.api.tenancy), calls one service, and renders its domain record as a view
(jobsched.api.views); errors are mapped in jobsched.api.errors.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from pydantic import ValidationError as PydanticValidationError

from jobsched import __version__
from jobsched import constants as c
from jobsched.adapters.idempotency import once_per_key
from jobsched.api import errors, views
from jobsched.api.models import (
    AlertPage,
    BackfillPreview,
    BackfillRequest,
    BackfillResult,
    BatchCreated,
    BatchCreateRequest,
    BulkActionRequest,
    BulkActionResult,
    CancelResult,
    CreateJobRequest,
    DeadLetterPage,
    GraphView,
    JobControl,
    JobCountsView,
    JobCreated,
    JobListPage,
    JobStatsView,
    JobView,
    OperationView,
    PatchJobRequest,
    ReplayAccepted,
    RunCancelResult,
    RunDetailView,
    RunLogsView,
    RunPage,
    SigningSecretView,
    TenantHealthView,
)
from jobsched.api.openapi import answers, openapi_document
from jobsched.api.tenancy import tenancy, tenant
from jobsched.api.workers import add_worker_routes
from jobsched.domain.listing import MAX_LIST_PAGE, ListOrder
from jobsched.domain.models import in_time_window
from jobsched.errors import StoreError, ValidationFailed
from jobsched.ports import RunLogs, SigningSecrets, TaskLogs
from jobsched.services.alerts import MAX_PAGE as MAX_ALERT_PAGE
from jobsched.services.alerts import AlertService
from jobsched.services.catalog import Catalog, filter_of
from jobsched.services.failures import MAX_PAGE, FailureService
from jobsched.services.jobs import BatchItem, JobService
from jobsched.services.operations import OperationService
from jobsched.services.runs import MAX_LOG_PAGE, LogLinks, RunService
from jobsched.services.schedule import MAX_HISTORY_PAGE, ScheduleService
from jobsched.services.workers import WorkerPools


def build_app(
    service: JobService,
    failures: FailureService,
    schedule: ScheduleService,
    *,
    idempotency: DynamoDBPersistenceLayer | None = None,
    tenant_source: str = "iam",
    signing_secrets: SigningSecrets | None = None,
    logs: LogLinks | None = None,
    alerts: AlertService | None = None,
    run_logs: RunLogs | None = None,
    task_logs: TaskLogs | None = None,
    pools: WorkerPools | None = None,
) -> APIGatewayRestResolver:
    """The resolver with every route; `tenant_source` is "iam" or "header" (anything else: ValueError).

    `logs`: where a run's log lines are (GET /api/runs/{id}'s logs_url); None: no link.
    `alerts`: the alerts GET /api/alerts lists (None: the failure service's own).
    `run_logs`: where GET /api/runs/{id}/logs reads them; None: no lines to read.
    `task_logs`: where it reads what container targets' tasks printed; None: none to read.
    `pools`: the external worker pools' service (jobsched.api.workers); None: no worker API.
    """
    # A return value that does not fit its response model is our bug: powertools raises it as a
    # ResponseValidationError (a 500) instead of as a request validation error (a 400).
    app = APIGatewayRestResolver(
        enable_validation=True,
        response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR,
        json_body_deserializer=errors.parse_body,
    )
    app.use(middlewares=[tenancy(tenant_source)])
    errors.install(app)
    replay_once = (
        once_per_key(
            lambda request: views.replay_accepted(
                failures.replay(request["subject"], tenant=request["tenant"])
            ).model_dump(),
            store=idempotency,
            name="replay",
        )
        if idempotency is not None
        else None
    )

    # The operator's views: built from the job services' own ports, so every caller of build_app
    # (the Lambda, the local stack, tests) gets them without wiring anything new.
    catalog = Catalog(job_service=service, schedule=schedule)
    operations = OperationService(schedule=schedule)
    run_service = RunService(job_service=service, logs=logs, run_logs=run_logs, task_logs=task_logs)

    @app.get("/api/health", responses=answers(200, "Up"))
    def health() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.post("/api/jobs", responses=answers(201, "Created", 400, 404, 409, 413, 429, 503))
    def create_job(
        body: Annotated[CreateJobRequest, Body()],
        idempotency_key: Annotated[str | None, Header(alias=c.IDEMPOTENCY_HEADER.lower())] = None,
    ) -> Response[JobCreated]:
        created = service.submit(body, tenant=tenant(app), idempotency_key=idempotency_key)
        return Response(
            status_code=201, content_type=content_types.APPLICATION_JSON, body=views.job_created(created)
        )

    @app.post("/api/jobs/batch", responses=answers(200, "One result per job, in order", 400, 413, 503))
    def create_jobs(
        body: Annotated[BatchCreateRequest, Body()],
        idempotency_key: Annotated[str | None, Header(alias=c.IDEMPOTENCY_HEADER.lower())] = None,
    ) -> BatchCreated:
        done = service.submit_batch(
            [batch_item(raw) for raw in body.jobs], tenant=tenant(app), idempotency_key=idempotency_key
        )
        return views.batch_created(done)

    @app.get("/api/jobs", responses=answers(200, "The caller's jobs", 400, 503))
    def list_jobs(
        status: Annotated[str | None, Query(max_length=32)] = None,
        type_: Annotated[str | None, Query(alias="type", max_length=32)] = None,
        name_prefix: Annotated[str | None, Query(max_length=200)] = None,
        target: Annotated[str | None, Query(max_length=32)] = None,
        tag: Annotated[str | None, Query(max_length=330, description="key:value")] = None,
        order: Annotated[
            ListOrder, Query(description="created: newest first; next_run: soonest")
        ] = "created",
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_PAGE)] = 20,
    ) -> JobListPage:
        where = filter_of(status=status, type_=type_, name_prefix=name_prefix, target=target, tag=tag)
        page = catalog.list_jobs(
            tenant=tenant(app), where=where, order=order, cursor=cursor or None, limit=limit
        )
        return views.job_list_page(page)

    @app.get(
        "/api/jobs/counts",
        responses=answers(200, "The caller's jobs per status (bounded: `complete`)", 400, 503),
    )
    def count_jobs(
        type_: Annotated[str | None, Query(alias="type", max_length=32)] = None,
        name_prefix: Annotated[str | None, Query(max_length=200)] = None,
        target: Annotated[str | None, Query(max_length=32)] = None,
        tag: Annotated[str | None, Query(max_length=330, description="key:value")] = None,
    ) -> JobCountsView:
        # The listing's filters but its status: the counts are what the status filter chooses from.
        where = filter_of(status=None, type_=type_, name_prefix=name_prefix, target=target, tag=tag)
        return views.job_counts(catalog.count_jobs(tenant=tenant(app), where=where))

    @app.post(
        "/api/jobs/actions",
        responses={
            **answers(200, "Done inline (at most 20 jobs): one result per job", 400, 503),
            202: {"description": "Accepted: carried out outside the request (GET /api/operations/{id})"},
        },
    )
    def bulk_action(body: Annotated[BulkActionRequest, Body()]) -> Response[BulkActionResult]:
        accepted = operations.start_bulk(
            body.action, tenant=tenant(app), job_ids=body.job_ids, where=body.filter
        )
        return Response(
            status_code=200 if accepted.operation is None else 202,
            content_type=content_types.APPLICATION_JSON,
            body=views.bulk_accepted(accepted),
        )

    @app.get(
        "/api/operations/<operation_id>", responses=answers(200, "The operation's progress", 400, 404, 503)
    )
    def get_operation(operation_id: Annotated[str, Path(max_length=64)]) -> OperationView:
        return views.operation_view(operations.get(operation_id, tenant=tenant(app)))

    @app.get("/api/stats", responses=answers(200, "The caller's due backlog and recent runs", 400, 503))
    def tenant_stats() -> TenantHealthView:
        return views.tenant_health(run_service.tenant_health(tenant=tenant(app)))

    @app.get("/api/jobs/<job_id>/stats", responses=answers(200, "The job's run statistics", 400, 404, 503))
    def job_stats(
        job_id: Annotated[str, Path(max_length=64)], since: Annotated[datetime | None, Query()] = None
    ) -> JobStatsView:
        if since is not None:
            _check_instant("since", since)
        return views.job_stats(run_service.stats(job_id, tenant=tenant(app), since=since))

    @app.get("/api/runs/<run_id>", responses=answers(200, "The run and its attempts", 400, 404, 503))
    def get_run(run_id: Annotated[str, Path(max_length=96)]) -> RunDetailView:
        return views.run_detail(run_service.get(run_id, tenant=tenant(app)))

    @app.get("/api/runs/<run_id>/logs", responses=answers(200, "The run's log lines", 400, 404, 503))
    def run_log_lines(
        run_id: Annotated[str, Path(max_length=96)],
        # CloudWatch's own token, wrapped with the source it belongs to (services.runs)
        cursor: Annotated[str | None, Query(max_length=4096)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LOG_PAGE)] = 100,
    ) -> RunLogsView:
        page = run_service.log_lines(run_id, tenant=tenant(app), cursor=cursor or None, limit=limit)
        return views.run_logs(page)

    @app.post(
        "/api/runs/<run_id>/cancel",
        responses={
            **answers(200, "Cancelled: it never starts", 400, 404, 409, 503),
            202: {"description": "Running: asked to stop (ctx.cancelled)"},
        },
    )
    def cancel_run(run_id: Annotated[str, Path(max_length=96)]) -> Response[RunCancelResult]:
        cancelled = run_service.cancel(run_id, tenant=tenant(app))
        return Response(
            status_code=202 if cancelled.stopping else 200,
            content_type=content_types.APPLICATION_JSON,
            body=views.run_cancel_result(cancelled),
        )

    @app.get("/api/jobs/<job_id>", responses=answers(200, "The job and its recent runs", 400, 404, 503))
    def get_job(job_id: Annotated[str, Path(max_length=64)]) -> JobView:
        return views.job_view(service.get(job_id, tenant=tenant(app)))

    @app.delete("/api/jobs/<job_id>", responses=answers(200, "Cancelled", 400, 404, 409, 503))
    def cancel_job(job_id: Annotated[str, Path(max_length=64)]) -> CancelResult:
        return views.cancel_result(service.cancel(job_id, tenant=tenant(app)))

    @app.get("/api/jobs/<job_id>/graph", responses=answers(200, "The DAG around the job", 400, 404, 503))
    def job_graph(
        job_id: Annotated[str, Path(max_length=64)],
        period: Annotated[str | None, Query(max_length=64)] = None,
    ) -> GraphView:
        return views.graph_view(service.graph(job_id, tenant=tenant(app), period=period or None))

    @app.post("/api/jobs/<job_id>/pause", responses=answers(200, "Paused", 400, 404, 409, 503))
    def pause_job(job_id: Annotated[str, Path(max_length=64)]) -> JobControl:
        return views.job_control(schedule.pause(job_id, tenant=tenant(app)))

    @app.post("/api/jobs/<job_id>/resume", responses=answers(200, "Resumed", 400, 404, 409, 503))
    def resume_job(job_id: Annotated[str, Path(max_length=64)]) -> JobControl:
        return views.job_control(schedule.resume(job_id, tenant=tenant(app)))

    # The seeds name it run-now; /run came first. One handler, two routes.
    @app.post("/api/jobs/<job_id>/run-now", responses=answers(202, "Manual run queued", 400, 404, 409, 503))
    @app.post("/api/jobs/<job_id>/run", responses=answers(202, "Manual run queued", 400, 404, 409, 503))
    def run_job(job_id: Annotated[str, Path(max_length=64)]) -> Response[JobControl]:
        control = views.job_control(schedule.run_now(job_id, tenant=tenant(app)))
        return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=control)

    @app.patch("/api/jobs/<job_id>", responses=answers(200, "The edited job", 400, 404, 409, 413, 429, 503))
    def edit_job(
        job_id: Annotated[str, Path(max_length=64)], body: Annotated[PatchJobRequest, Body()]
    ) -> JobView:
        schedule.edit(job_id, body, tenant=tenant(app))
        return views.job_view(service.get(job_id, tenant=tenant(app)))

    @app.post(
        "/api/jobs/<job_id>/backfill",
        responses={
            **answers(202, "Backfill queued", 400, 404, 409, 413, 429, 503),
            200: {
                "description": "dry_run: the ticks it would cover; nothing written, no quota taken",
                "content": {content_types.APPLICATION_JSON: {"model": BackfillPreview}},
            },
        },
    )
    def backfill_job(
        job_id: Annotated[str, Path(max_length=64)], body: Annotated[BackfillRequest, Body()]
    ) -> Response[BackfillResult | BackfillPreview]:
        if body.dry_run:
            job, ticks = schedule.preview_backfill(job_id, body, tenant=tenant(app))
            preview = views.backfill_preview(job.job_id, ticks)
            return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=preview)
        result = views.backfill_result(operations.start_backfill(job_id, body, tenant=tenant(app)))
        return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=result)

    @app.get("/api/jobs/<job_id>/runs", responses=answers(200, "Run history, newest first", 400, 404, 503))
    def job_runs(
        job_id: Annotated[str, Path(max_length=64)],
        limit: Annotated[int, Query(ge=1, le=MAX_HISTORY_PAGE)] = 20,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
        status: Annotated[str | None, Query(max_length=32)] = None,
        kind: Annotated[str | None, Query(max_length=32)] = None,
        from_: Annotated[datetime | None, Query(alias="from")] = None,
        to: Annotated[datetime | None, Query()] = None,
    ) -> RunPage:
        for name, value in (("from", from_), ("to", to)):
            if value is not None:
                _check_instant(name, value)
        page = schedule.history(
            job_id,
            tenant=tenant(app),
            start=from_,
            end=to,
            status=status or None,
            kind=kind or None,
            cursor=cursor or None,
            limit=limit,
        )
        return views.run_page(page)

    @app.get("/api/dead-letter", responses=answers(200, "Dead-lettered runs, newest first", 400, 503))
    def dead_letters(
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
        job_id: Annotated[str | None, Query(max_length=64)] = None,
    ) -> DeadLetterPage:
        page = failures.list_dead_letters(
            tenant=tenant(app), cursor=cursor or None, limit=limit, job_id=job_id or None
        )
        return views.dead_letter_page(page)

    @app.get("/api/alerts", responses=answers(200, "The caller's alerts, newest first", 400, 503))
    def list_alerts(
        since: Annotated[datetime | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_ALERT_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
    ) -> AlertPage:
        if since is not None:
            _check_instant("since", since)
        source = alerts or failures.alerts
        if source is None:
            raise StoreError("no alert store is configured")
        return views.alert_page(
            source.recent(tenant=tenant(app), since=since, cursor=cursor or None, limit=limit)
        )

    @app.post(
        "/api/dead-letter/<run_id>/replay", responses=answers(202, "Replay started", 400, 404, 409, 503)
    )
    def replay(
        run_id: Annotated[str, Path(max_length=96)],
        idempotency_key: Annotated[
            str | None, Header(alias=c.IDEMPOTENCY_HEADER.lower(), max_length=128)
        ] = None,
    ) -> Response[ReplayAccepted]:
        if idempotency_key and replay_once is not None:
            accepted = ReplayAccepted.model_validate(
                replay_once(request={"tenant": tenant(app), "key": idempotency_key, "subject": run_id})
            )
        else:
            accepted = views.replay_accepted(failures.replay(run_id, tenant=tenant(app)))
        return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=accepted)

    def secrets() -> SigningSecrets:
        if signing_secrets is None:
            raise StoreError("no signing-secret store is configured (JOBSCHED_SIGNING_SECRETS_TABLE)")
        return signing_secrets

    @app.get("/api/signing-secret", responses=answers(200, "The caller's signing secret", 400, 503))
    def get_signing_secret() -> SigningSecretView:
        return views.signing_secret(secrets().get(tenant(app)))

    @app.post("/api/signing-secret/rotate", responses=answers(200, "The new signing secret", 400, 503))
    def rotate_signing_secret() -> SigningSecretView:
        return views.signing_secret(secrets().rotate(tenant(app)))

    if pools is not None:
        add_worker_routes(app, pools, sleep=time.sleep, monotonic=time.monotonic)

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi() -> Response[str]:
        document = json.dumps(openapi_document(app), indent=2)
        return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=document)

    return app


def _check_instant(name: str, value: datetime) -> None:
    """A query instant carries its offset and lies in the time window; else a 400 naming it."""
    if value.tzinfo is None:
        raise ValidationFailed(f"{name}: must carry a UTC offset", field=name)
    try:
        in_time_window(value)
    except ValueError as exc:
        raise ValidationFailed(f"{name}: {exc}", field=name) from None


__all__ = ["build_app"]


def batch_item(raw: dict[str, Any]) -> BatchItem:
    """One job of a batch as the service takes it: (request, idempotency_key), or the error naming
    its field (the same validation as POST /api/jobs; views.batch_created names the item)."""
    fields = dict(raw)
    key = fields.pop("idempotency_key", None)
    if key is not None and not isinstance(key, str):
        return ValidationFailed("idempotency_key: must be a string", field="idempotency_key")
    try:
        return CreateJobRequest.model_validate(fields), key
    except PydanticValidationError as exc:
        return ValidationFailed(errors.describe(list(exc.errors())), field="body")
