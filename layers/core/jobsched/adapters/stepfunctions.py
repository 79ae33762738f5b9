"""Step Functions adapter: starts workflow executions (failure, DAG), at most once per name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import Refused, aws_call
from jobsched.domain.keys import execution_name
from jobsched.errors import StoreError, StoreUnreachable, TransientStoreError

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient


@dataclass
class StateMachines:
    """Step Functions state machines: the failure workflow's and the DAG workflow's executions."""

    client: SFNClient
    failure_workflow_arn: str

    def start_failure(self, name: str, payload: Mapping[str, Any]) -> bool:
        """Start the failure workflow (see start)."""
        return self.start(self.failure_workflow_arn, name, payload)

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> bool:
        """Start an execution of `state_machine_arn` as `name`; False if one of that name already exists.

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


__all__ = ["StateMachines", "execution_name"]
