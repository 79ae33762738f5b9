"""Step Functions adapter: starts failure-workflow executions, at most once per name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import Refused, aws_call
from jobsched.errors import StoreError, StoreUnreachable, TransientStoreError

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

# Execution names: 1..80 characters of [A-Za-z0-9-_].
_NAME_MAX = 80


def execution_name(*parts: str) -> str:
    """A valid, deterministic execution name from its parts (the dedup key of a start)."""
    raw = "-".join(parts)
    cleaned = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in raw)
    if len(cleaned) <= _NAME_MAX:
        return cleaned
    import hashlib

    digest = hashlib.sha256(raw.encode()).hexdigest()[:16]
    return f"{cleaned[: _NAME_MAX - 17]}-{digest}"


@dataclass
class Workflows:
    """The failure workflow."""

    client: SFNClient
    failure_workflow_arn: str

    def start_failure(self, name: str, payload: Mapping[str, Any]) -> bool:
        """Start the failure workflow (see start)."""
        return self.start(self.failure_workflow_arn, name, payload)

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> bool:
        """Start the failure workflow as `name`; False if an execution of that name already exists.

        The name is the idempotency key: a worker that crashed after starting it and a redelivery
        that starts it again produce one execution, not two.
        """
        try:
            with aws_call("Step Functions"):
                self.client.start_execution(
                    stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload)
                )
        except Refused as exc:
            if exc.code == "ExecutionAlreadyExists":
                return False
            raise TransientStoreError(f"Step Functions refused the start: {exc.code}") from exc
        except StoreUnreachable:
            raise
        except StoreError as exc:
            raise TransientStoreError(f"Step Functions refused the start: {exc.aws_code}") from exc
        return True
