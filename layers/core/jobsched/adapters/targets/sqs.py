"""The sqs target: SendMessage of the envelope to the tenant's queue, as the tenant's role.

Accepted is success. A FIFO queue gets MessageDeduplicationId = the run's effect key (see
_aws.dedup_id) and MessageGroupId = the spec's, or the job id: a redelivered run within SQS's
5-minute window is dropped by SQS; a standard queue has no dedup id, and the consumer deduplicates
on the envelope's effect_key, as it must for any at-least-once source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobsched.adapters.targets._aws import dedup_id, message_of, target_call
from jobsched.adapters.targets.credentials import AssumedRoles
from jobsched.domain.targets import SqsTarget
from jobsched.handlers import RunContext


class SqsSender:
    """jobsched.ports.Target for an sqs target spec."""

    def __init__(self, spec: SqsTarget, *, roles: AssumedRoles) -> None:
        self.spec = spec
        self._roles = roles

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Send the envelope; the result names the message."""
        spec = self.spec
        client = self._roles.client("sqs", spec.role_arn, str(envelope["tenant"]))
        params: dict[str, Any] = {"QueueUrl": spec.queue_url, "MessageBody": message_of(envelope)}
        if spec.fifo:
            params["MessageGroupId"] = spec.message_group_id or str(envelope["job_id"])
            params["MessageDeduplicationId"] = dedup_id(str(envelope["effect_key"]))
        elif spec.message_group_id is not None:
            params["MessageGroupId"] = spec.message_group_id  # a fair queue's tenant key
        with target_call(f"SQS {spec.queue_url}"):
            answer = client.send_message(**params)
        return {"message_id": answer["MessageId"]}
