"""Every error as {"error": {"code", "message"}}: bad input is a 4xx naming the field, never a 500.

Also the body guard the handler runs before any parsing (an oversized body is a 413), and the
body parser (a body Python's json cannot read without running out of stack or digits is a 400).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from botocore.exceptions import BotoCoreError

from jobsched.api.openapi import MAX_BODY_BYTES
from jobsched.domain.limits import QuotaExceeded
from jobsched.domain.targets import TARGET_TYPES, target_field
from jobsched.errors import JobschedError, PayloadTooLarge

logger = Logger(child=True)


def error(status: int, code: str, message: str) -> Response[Any]:
    """An error answer."""
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps({"error": {"code": code, "message": message}}),
    )


def describe(errors: list[Any]) -> str:
    """pydantic's validation errors as one message naming each field once."""
    parts = []
    for err in errors:
        # "body", "query", "path" and "header" say where a field is, not which: the message names
        # the field (`limit`, not `query.limit`), once; the validators' own messages do not repeat it.
        loc = [str(p) for p in err.get("loc", ())]
        loc = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
        # pydantic names the union/validator step in loc for model-level errors; keep field names
        field = ".".join(p for p in loc if not p.startswith("function-")) or "body"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if loc and loc[0] == "target":  # a tagged union: `target.url`, not `target.http.url`
            field = target_field(loc[1:], str(err.get("type", "")))
            if err.get("type") in ("union_tag_invalid", "union_tag_not_found"):
                msg = f"must be one of {', '.join(TARGET_TYPES)}"
        if err.get("type") == "json_invalid":
            field, msg = "body", "is not valid JSON"
        elif err.get("type") == "missing":
            msg = "is required"
        parts.append(f"{field}: {msg}")
    return "; ".join(parts) or "invalid request"


def in_item(index: int, message: str) -> str:
    """A message about a field of a batch's job, naming it as `jobs[<index>].<field>`."""
    parts = []
    for part in message.split("; "):
        head, sep, rest = part.partition(": ")
        if head == "body" and sep:
            parts.append(f"jobs[{index}]: {rest}")
        elif sep and " " not in head:
            parts.append(f"jobs[{index}].{part}")
        else:
            parts.append(f"jobs[{index}]: {part}")
    return "; ".join(parts)


def install(app: APIGatewayRestResolver) -> None:
    """Map every exception a route (or a middleware) can raise to its error answer."""

    @app.exception_handler(IdempotencyValidationError)  # type: ignore[untyped-decorator]
    def _key_reused(exc: IdempotencyValidationError) -> Response[Any]:
        return error(409, "idempotency_key_reused", "Idempotency-Key was already used for another run")

    @app.exception_handler(IdempotencyAlreadyInProgressError)  # type: ignore[untyped-decorator]
    def _in_progress(exc: IdempotencyAlreadyInProgressError) -> Response[Any]:
        return error(409, "in_progress", "a request with this Idempotency-Key is in progress; retry shortly")

    @app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
    def _invalid(exc: RequestValidationError) -> Response[Any]:
        return error(400, "validation_error", describe(list(exc.errors())))

    @app.exception_handler(ResponseValidationError)  # type: ignore[untyped-decorator]
    def _bad_response(exc: ResponseValidationError) -> Response[Any]:
        logger.error("a response does not fit its model", extra={"errors": str(exc.errors())[:2000]})
        return error(500, "internal_error", "internal error; the request may be retried")

    @app.exception_handler(QuotaExceeded)  # type: ignore[untyped-decorator]
    def _over_quota(exc: QuotaExceeded) -> Response[Any]:
        # The error as every other, and which quota and its limit, for a client to act on.
        body = {"error": {"code": exc.code, "message": exc.message}, "quota": exc.quota, "limit": exc.limit}
        return Response(status_code=429, content_type=content_types.APPLICATION_JSON, body=json.dumps(body))

    @app.exception_handler(JobschedError)  # type: ignore[untyped-decorator]
    def _domain(exc: JobschedError) -> Response[Any]:
        if exc.status >= 500:
            logger.warning("service error", extra={"code": exc.code, "error": exc.message})
        return error(exc.status, exc.code, exc.message)

    @app.not_found
    def _no_route(exc: NotFoundError) -> Response[Any]:
        return error(404, "not_found", f"no route {app.current_event.http_method} {app.current_event.path}")

    @app.exception_handler(BotoCoreError)  # type: ignore[untyped-decorator]
    def _aws_unreachable(exc: BotoCoreError) -> Response[Any]:
        # A timeout may come after the write took effect: retrying with the same Idempotency-Key
        # is safe and answers what the first attempt did.
        logger.warning("AWS call failed", extra={"error": repr(exc)})
        return error(503, "unavailable", "a dependency timed out; retry with the same Idempotency-Key")

    @app.exception_handler(Exception)  # type: ignore[untyped-decorator]
    def _unexpected(exc: Exception) -> Response[Any]:
        logger.exception("unhandled error")
        return error(500, "internal_error", "internal error; the request may be retried")


def parse_body(text: str | bytes | bytearray) -> Any:
    """The request body as JSON; what json.loads cannot read is a JSONDecodeError (a 400 naming the body).

    json.loads raises RecursionError on deep nesting (a 64 KiB body of "[" nests 65,536 deep) and a
    plain ValueError on an integer of more than 4,300 digits, which powertools would answer as a
    500. NaN and Infinity do parse: the field validators refuse them, naming the field.
    """
    source = text.decode() if isinstance(text, (bytes, bytearray)) else text
    try:
        return json.loads(source)
    except json.JSONDecodeError:
        raise
    except RecursionError as exc:
        raise json.JSONDecodeError("nested too deep", source, 0) from exc
    except ValueError as exc:  # the integer digit limit (sys.get_int_max_str_digits)
        raise json.JSONDecodeError(str(exc), source, 0) from exc


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
