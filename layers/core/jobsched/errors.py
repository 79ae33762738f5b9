"""Typed domain errors. Adapters raise these (``raise ... from exc``); the API maps them to 4xx."""

from __future__ import annotations


class JobschedError(Exception):
    """Base of every error this library raises on purpose."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ValidationFailed(JobschedError):
    """A request that cannot be accepted; the message names the field and the problem."""

    status = 400
    code = "validation_error"


class PayloadTooLarge(ValidationFailed):
    """A payload over the documented size limit."""

    status = 413
    code = "payload_too_large"


class NotFound(JobschedError):
    """No such job or run for this tenant (another tenant's job is not found either)."""

    status = 404
    code = "not_found"


class Conflict(JobschedError):
    """The request conflicts with the current state (a compare-and-set lost)."""

    status = 409
    code = "conflict"


class IdempotencyConflict(Conflict):
    """The Idempotency-Key was already used with a different request body."""

    code = "idempotency_key_reused"


class TransientStoreError(JobschedError):
    """A throttle or a 5xx from AWS: the same call may succeed when retried."""

    status = 503
    code = "unavailable"


class UnknownHandler(ValidationFailed):
    """A handler name with no registered callable."""
