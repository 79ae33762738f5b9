"""The REST API: powertools APIGatewayRestResolver routes over JobService.

The same resolver serves API Gateway on AWS and the local stack (which turns HTTP requests into
API Gateway REST proxy events). Every error is {"error": {"code", "message"}}; bad input is a 4xx
naming the field, never a 500.

The OpenAPI document (GET /api/openapi.json, `openapi_document`) says the same: each operation lists
the 4xx/503 it can answer with the ErrorResponse schema (the `responses=` of its route). powertools
itself would list a 422 HTTPValidationError on every operation (it adds one whenever validation is
on and offers no switch for it, aws-powertools/powertools-lambda-python#4928), but request validation
errors are answered by `_invalid` as 400 ErrorResponse; `openapi_document` drops those entries.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from botocore.exceptions import BotoCoreError
from pydantic import BaseModel, ConfigDict, Field

from jobsched import __version__
from jobsched import constants as c
from jobsched.adapters.idempotency import once_per_key
from jobsched.domain.models import (
    BackfillRequest,
    BackfillResult,
    CancelResult,
    CreateJobRequest,
    DeadLetterPage,
    GraphView,
    JobControl,
    JobCreated,
    JobView,
    PatchJobRequest,
    ReplayAccepted,
    RunPage,
    in_time_window,
)
from jobsched.errors import JobschedError, PayloadTooLarge, ValidationFailed
from jobsched.services.failures import MAX_PAGE, FailureService
from jobsched.services.jobs import JobService
from jobsched.services.schedule import MAX_HISTORY_PAGE, ScheduleService

logger = Logger(child=True)

MAX_BODY_BYTES = 64 * 1024
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=,-]{0,127}$")


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


_ERRORS = {
    400: "Bad input (a parameter, header or body field): the message names it; nothing was written",
    404: "No such job or run for this tenant (on create: the job an Idempotency-Key made is gone)",
    409: "Conflicts with the current state (or the Idempotency-Key was used for another request)",
    413: f"The body is larger than {MAX_BODY_BYTES} bytes",
    503: "A dependency timed out or throttled: retry (with the same Idempotency-Key, if any)",
}
# powertools' own validation-error schemas: the API never answers with them (see the module doc).
_POWERTOOLS_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError", "ResponseValidationError")


def answers(status: int, description: str, *errors: int) -> dict[int, Any]:
    """A route's `responses=`: its success (schema from the return type) and the errors it answers."""
    out: dict[int, Any] = {status: {"description": description}}
    for code in errors:
        out[code] = {
            "description": _ERRORS[code],
            "content": {content_types.APPLICATION_JSON: {"model": ErrorResponse}},
        }
    return out


def openapi_document(app: APIGatewayRestResolver) -> dict[str, Any]:
    """The OpenAPI document of `app` as GET /api/openapi.json serves it (powertools' own, without
    the validation-error responses the API never gives: see the module doc)."""
    document: dict[str, Any] = json.loads(app.get_openapi_json_schema(title="jobsched", version=__version__))
    refs = {f"#/components/schemas/{name}" for name in _POWERTOOLS_ERROR_SCHEMAS}
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
            for status in list(responses):
                content = responses[status].get("content", {}).get(content_types.APPLICATION_JSON, {})
                if content.get("schema", {}).get("$ref") in refs:
                    del responses[status]
    schemas = document.get("components", {}).get("schemas", {})
    for name in _POWERTOOLS_ERROR_SCHEMAS:
        schemas.pop(name, None)
    return document


def _error(status: int, code: str, message: str) -> Response[Any]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps({"error": {"code": code, "message": message}}),
    )


def _describe(errors: list[Any]) -> str:
    parts = []
    for err in errors:
        # "body", "query", "path" and "header" say where a field is, not which: the message names
        # the field (`limit`, not `query.limit`), once; the validators' own messages do not repeat it.
        loc = [str(p) for p in err.get("loc", ())]
        loc = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
        # pydantic names the union/validator step in loc for model-level errors; keep field names
        field = ".".join(p for p in loc if not p.startswith("function-")) or "body"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            field, msg = "body", "is not valid JSON"
        elif err.get("type") == "missing":
            msg = "is required"
        parts.append(f"{field}: {msg}")
    return "; ".join(parts) or "invalid request"


def tenant_of(app: APIGatewayRestResolver, source: str) -> str:
    """The caller's tenant: the IAM principal on AWS, the X-Tenant header on the local stack."""
    event = app.current_event
    if source == "iam":
        arn = (event.request_context.identity.user_arn or "").strip()
        match = re.match(
            r"^arn:aws[\w-]*:(?:iam|sts)::(\d{12}):(?:assumed-role/([^/]+)|(user|role)/(.+))", arn
        )
        if not match:
            raise ValidationFailed("the request carries no IAM principal", field="Authorization")
        account, assumed, kind, name = match.groups()
        return f"{account}:role/{assumed}" if assumed else f"{account}:{kind}/{name}"
    tenant = (event.headers or {}).get(c.TENANT_HEADER) or next(
        (v for k, v in (event.headers or {}).items() if k.lower() == c.TENANT_HEADER.lower()), None
    )
    tenant = (tenant or c.DEFAULT_TENANT).strip()
    if not _TENANT.match(tenant):
        raise ValidationFailed(
            f"{c.TENANT_HEADER}: must be 1..128 of [A-Za-z0-9._:/@+=,-]", field=c.TENANT_HEADER
        )
    return tenant


def build_app(
    service: JobService,
    failures: FailureService,
    schedule: ScheduleService,
    *,
    idempotency: DynamoDBPersistenceLayer | None = None,
    tenant_source: str = "iam",
) -> APIGatewayRestResolver:
    """The resolver with every route; `tenant_source` is "iam" or "header"."""
    # A return value that does not fit its response model is our bug: powertools raises it as a
    # ResponseValidationError (a 500 below) instead of as a request validation error (a 400).
    app = APIGatewayRestResolver(
        enable_validation=True, response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR
    )
    replay_once = (
        once_per_key(
            lambda request: failures.replay(request["subject"], tenant=request["tenant"]).model_dump(),
            store=idempotency,
            name="replay",
        )
        if idempotency is not None
        else None
    )

    @app.exception_handler(IdempotencyValidationError)  # type: ignore[untyped-decorator]
    def _key_reused(exc: IdempotencyValidationError) -> Response[Any]:
        return _error(409, "idempotency_key_reused", "Idempotency-Key was already used for another run")

    @app.exception_handler(IdempotencyAlreadyInProgressError)  # type: ignore[untyped-decorator]
    def _in_progress(exc: IdempotencyAlreadyInProgressError) -> Response[Any]:
        return _error(409, "in_progress", "a request with this Idempotency-Key is in progress; retry shortly")

    @app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
    def _invalid(exc: RequestValidationError) -> Response[Any]:
        return _error(400, "validation_error", _describe(list(exc.errors())))

    @app.exception_handler(ResponseValidationError)  # type: ignore[untyped-decorator]
    def _bad_response(exc: ResponseValidationError) -> Response[Any]:
        logger.error("a response does not fit its model", extra={"errors": str(exc.errors())[:2000]})
        return _error(500, "internal_error", "internal error; the request may be retried")

    @app.exception_handler(JobschedError)  # type: ignore[untyped-decorator]
    def _domain(exc: JobschedError) -> Response[Any]:
        if exc.status >= 500:
            logger.warning("service error", extra={"code": exc.code, "error": exc.message})
        return _error(exc.status, exc.code, exc.message)

    @app.not_found
    def _no_route(exc: NotFoundError) -> Response[Any]:
        return _error(404, "not_found", f"no route {app.current_event.http_method} {app.current_event.path}")

    @app.exception_handler(BotoCoreError)  # type: ignore[untyped-decorator]
    def _aws_unreachable(exc: BotoCoreError) -> Response[Any]:
        # A timeout may come after the write took effect: retrying with the same Idempotency-Key
        # is safe and answers what the first attempt did.
        logger.warning("AWS call failed", extra={"error": repr(exc)})
        return _error(503, "unavailable", "a dependency timed out; retry with the same Idempotency-Key")

    @app.exception_handler(Exception)  # type: ignore[untyped-decorator]
    def _unexpected(exc: Exception) -> Response[Any]:
        logger.exception("unhandled error")
        return _error(500, "internal_error", "internal error; the request may be retried")

    @app.get("/api/health", responses=answers(200, "Up"))
    def health() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.post("/api/jobs", responses=answers(201, "Created", 400, 404, 409, 413, 503))
    def create_job(
        body: Annotated[CreateJobRequest, Body()],
        idempotency_key: Annotated[str | None, Header(alias=c.IDEMPOTENCY_HEADER.lower())] = None,
    ) -> Response[JobCreated]:
        created = service.submit(body, tenant=tenant_of(app, tenant_source), idempotency_key=idempotency_key)
        return Response(status_code=201, content_type=content_types.APPLICATION_JSON, body=created)

    @app.get("/api/jobs/<job_id>", responses=answers(200, "The job and its recent runs", 400, 404, 503))
    def get_job(job_id: Annotated[str, Path(max_length=64)]) -> JobView:
        return service.get(job_id, tenant=tenant_of(app, tenant_source))

    @app.delete("/api/jobs/<job_id>", responses=answers(200, "Cancelled", 400, 404, 409, 503))
    def cancel_job(job_id: Annotated[str, Path(max_length=64)]) -> CancelResult:
        return service.cancel(job_id, tenant=tenant_of(app, tenant_source))

    @app.get("/api/jobs/<job_id>/graph", responses=answers(200, "The DAG around the job", 400, 404, 503))
    def job_graph(job_id: Annotated[str, Path(max_length=64)]) -> GraphView:
        return service.graph(job_id, tenant=tenant_of(app, tenant_source))

    @app.post("/api/jobs/<job_id>/pause", responses=answers(200, "Paused", 400, 404, 409, 503))
    def pause_job(job_id: Annotated[str, Path(max_length=64)]) -> JobControl:
        return schedule.pause(job_id, tenant=tenant_of(app, tenant_source))

    @app.post("/api/jobs/<job_id>/resume", responses=answers(200, "Resumed", 400, 404, 409, 503))
    def resume_job(job_id: Annotated[str, Path(max_length=64)]) -> JobControl:
        return schedule.resume(job_id, tenant=tenant_of(app, tenant_source))

    @app.post("/api/jobs/<job_id>/run", responses=answers(202, "Manual run queued", 400, 404, 409, 503))
    def run_job(job_id: Annotated[str, Path(max_length=64)]) -> Response[JobControl]:
        control = schedule.run_now(job_id, tenant=tenant_of(app, tenant_source))
        return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=control)

    @app.patch("/api/jobs/<job_id>", responses=answers(200, "The edited job", 400, 404, 409, 413, 503))
    def edit_job(
        job_id: Annotated[str, Path(max_length=64)], body: Annotated[PatchJobRequest, Body()]
    ) -> JobView:
        tenant = tenant_of(app, tenant_source)
        schedule.edit(job_id, body, tenant=tenant)
        return service.get(job_id, tenant=tenant)

    @app.post(
        "/api/jobs/<job_id>/backfill", responses=answers(202, "Backfill queued", 400, 404, 409, 413, 503)
    )
    def backfill_job(
        job_id: Annotated[str, Path(max_length=64)], body: Annotated[BackfillRequest, Body()]
    ) -> Response[BackfillResult]:
        result = schedule.backfill(job_id, body, tenant=tenant_of(app, tenant_source))
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
            if value is None:
                continue
            if value.tzinfo is None:
                raise ValidationFailed(f"{name}: must carry a UTC offset", field=name)
            try:
                in_time_window(value)
            except ValueError as exc:
                raise ValidationFailed(f"{name}: {exc}", field=name) from None
        return schedule.history(
            job_id,
            tenant=tenant_of(app, tenant_source),
            start=from_,
            end=to,
            status=status or None,
            kind=kind or None,
            cursor=cursor or None,
            limit=limit,
        )

    @app.get("/api/dead-letter", responses=answers(200, "Dead-lettered runs, newest first", 400, 503))
    def dead_letters(
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
        job_id: Annotated[str | None, Query(max_length=64)] = None,
    ) -> DeadLetterPage:
        return failures.list_dead_letters(
            tenant=tenant_of(app, tenant_source), cursor=cursor or None, limit=limit, job_id=job_id or None
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
        tenant = tenant_of(app, tenant_source)
        if idempotency_key and replay_once is not None:
            accepted = ReplayAccepted.model_validate(
                replay_once(request={"tenant": tenant, "key": idempotency_key, "subject": run_id})
            )
        else:
            accepted = failures.replay(run_id, tenant=tenant)
        return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=accepted)

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi() -> Response[str]:
        document = json.dumps(openapi_document(app), indent=2)
        return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=document)

    return app


def guard_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """A 413 response for an oversized body, before any parsing; None when the size is fine.

    The API speaks JSON only, so a body is read as JSON whatever Content-Type the client sent
    (curl's default form encoding would otherwise turn a JSON body into form fields).
    """
    headers = event.get("headers") or {}
    for key in [k for k in headers if k.lower() == "content-type"]:
        del headers[key]
    headers["Content-Type"] = content_types.APPLICATION_JSON
    event["headers"] = headers
    if event.get("multiValueHeaders"):
        event["multiValueHeaders"] = {
            k: v for k, v in event["multiValueHeaders"].items() if k.lower() != "content-type"
        } | {"Content-Type": [content_types.APPLICATION_JSON]}
    body = event.get("body") or ""
    if len(body.encode() if isinstance(body, str) else body) > MAX_BODY_BYTES:
        err = PayloadTooLarge(f"body: larger than {MAX_BODY_BYTES} bytes", field="body")
        return {
            "statusCode": err.status,
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"error": {"code": err.code, "message": err.message}}),
            "isBase64Encoded": False,
        }
    return None
