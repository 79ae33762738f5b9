"""The one place an AWS error is read: every adapter call runs inside `aws_call`.

A ClientError or BotoCoreError never leaves the adapters. What it means is decided here, by its
error code (never by its message):

- a refused condition, a cancelled transaction or a name already taken is `Refused`, which the
  adapter that made the call turns into its documented answer (False, None, the row as it stood,
  a Conflict): it is an outcome, not a fault, and never reaches a service;
- a throttle or a server fault is `TransientStoreError` (retry later), as is an unreachable
  endpoint or a timeout (`StoreUnreachable`: the write may have taken effect);
- anything else (a bug or a misconfiguration: a missing table, a malformed expression) is
  `StoreError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from jobsched.errors import StoreError, StoreUnreachable, TransientStoreError

# Throttles and server faults: retryable, and never a caller's fault.
TRANSIENT = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
    }
)
# Answers to a conditional request: the adapter that asked decides what they mean.
REFUSALS = frozenset(
    {
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
        "ExecutionAlreadyExists",
    }
)


class Refused(Exception):
    """AWS refused a conditional request; `response` holds what it answered (the item, the reasons)."""

    def __init__(self, code: str, response: Mapping[str, Any]) -> None:
        super().__init__(code)
        self.code = code
        self.response = response

    @property
    def item(self) -> dict[str, Any] | None:
        """The item as it stood (when the call asked for ReturnValuesOnConditionCheckFailure)."""
        item = self.response.get("Item")
        return dict(item) if item else None

    @property
    def reasons(self) -> list[dict[str, Any]]:
        """A cancelled transaction's reasons, one per item, in the order of the items."""
        return list(self.response.get("CancellationReasons", []))


@contextmanager
def aws_call(service: str) -> Iterator[None]:
    """Run one AWS call; translate what it raises (see the module docstring)."""
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in REFUSALS:
            raise Refused(code, exc.response) from exc
        if code in TRANSIENT:
            raise TransientStoreError(f"{service} is unavailable: {code}", aws_code=code) from exc
        raise StoreError(f"{service} refused the call: {code}", aws_code=code, detail=str(exc)) from exc
    except BotoCoreError as exc:
        raise StoreUnreachable(f"{service} is unreachable: {exc}") from exc
