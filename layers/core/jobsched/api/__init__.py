"""The REST API: routes (jobsched.api.routes), wire models (models), views of the services' domain
records (views), tenancy as one middleware (tenancy), error mapping (errors), the OpenAPI document
(openapi).

The names the API Lambda (functions/api/handler.py), the local stack, the bench and the tests use
are re-exported here.
"""

from __future__ import annotations

from jobsched.api.errors import guard_body
from jobsched.api.openapi import MAX_BODY_BYTES, answers, openapi_document
from jobsched.api.routes import build_app

__all__ = ["MAX_BODY_BYTES", "answers", "build_app", "guard_body", "openapi_document"]
