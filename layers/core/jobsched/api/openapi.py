"""The OpenAPI document: each operation lists the 4xx/503 it can answer with the ErrorResponse schema.

powertools itself would list a 422 HTTPValidationError on every operation (it adds one whenever
validation is on and offers no switch for it, aws-powertools/powertools-lambda-python#4928), but
request validation errors are answered as 400 ErrorResponse (jobsched.api.errors);
`openapi_document` drops those entries.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, content_types

from jobsched import __version__
from jobsched.api.models import ErrorResponse, QuotaErrorResponse

MAX_BODY_BYTES = 64 * 1024

_ERRORS = {
    400: "Bad input (a parameter, header or body field): the message names it; nothing was written",
    404: "No such job or run for this tenant (on create: the job an Idempotency-Key made is gone)",
    409: "Conflicts with the current state (or the Idempotency-Key was used for another request)",
    413: f"The body is larger than {MAX_BODY_BYTES} bytes",
    429: "Over one of the tenant's quotas (operator-set, docs/quotas.md): the body names it and its limit",
    503: "A dependency timed out or throttled: retry (with the same Idempotency-Key, if any)",
}
_ERROR_MODELS: dict[int, type[ErrorResponse | QuotaErrorResponse]] = {429: QuotaErrorResponse}
# powertools' own validation-error schemas: the API never answers with them (see the module doc).
_POWERTOOLS_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError", "ResponseValidationError")


def answers(status: int, description: str, *errors: int) -> dict[int, Any]:
    """A route's `responses=`: its success (schema from the return type) and the errors it answers."""
    out: dict[int, Any] = {status: {"description": description}}
    for code in errors:
        out[code] = {
            "description": _ERRORS[code],
            "content": {content_types.APPLICATION_JSON: {"model": _ERROR_MODELS.get(code, ErrorResponse)}},
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
