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


class FanOutFull(Conflict):
    """An upstream has the most dependants a job may have already (domain.models.MAX_FAN_OUT)."""

    def __init__(self, upstream: str, *, dependants: int, cap: int) -> None:
        super().__init__(
            f"depends_on: job '{upstream}' has {dependants} dependants already, "
            f"the most a job may have ({cap})",
            field="depends_on",
        )


class StoreError(JobschedError):
    """A store, queue or workflow call AWS refused for a reason that is not the caller's input.

    Raised by the adapters in place of botocore's errors (jobsched.adapters.aws); `aws_code` is
    AWS's error code. Its message to an API client stays generic; str() keeps AWS's own words.
    """

    status = 500
    code = "internal_error"

    def __init__(
        self, message: str, *, field: str | None = None, aws_code: str = "", detail: str | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.aws_code = aws_code
        self.detail = detail or message
        if type(self) is StoreError:
            self.message = "internal error; the request may be retried"

    def __str__(self) -> str:
        return self.detail


class TransientStoreError(StoreError):
    """A throttle or a 5xx from AWS: the same call may succeed when retried."""

    status = 503
    code = "unavailable"


class StoreUnreachable(TransientStoreError):
    """AWS did not answer (a connection error or a timeout): a write may have taken effect anyway."""

    def __init__(self, detail: str) -> None:
        super().__init__("a dependency timed out; retry with the same Idempotency-Key", detail=detail)


class UnknownHandler(ValidationFailed):
    """A handler name with no registered callable."""
