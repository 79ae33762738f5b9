"""The sns target: Publish the envelope to the tenant's topic, as the tenant's role.

Accepted is success. A FIFO topic gets MessageGroupId = the job id (one job's runs in order) and
MessageDeduplicationId = the run's effect key (see _aws.dedup_id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobsched.adapters.targets._aws import dedup_id, message_of, target_call
from jobsched.adapters.targets.credentials import AssumedRoles
from jobsched.domain.targets import SnsTarget
from jobsched.handlers import RunContext


class SnsPublisher:
    """jobsched.ports.Target for an sns target spec."""

    def __init__(self, spec: SnsTarget, *, roles: AssumedRoles) -> None:
        self.spec = spec
        self._roles = roles

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Publish the envelope; the result names the message."""
        spec = self.spec
        client = self._roles.client("sns", spec.role_arn, str(envelope["tenant"]))
        params: dict[str, Any] = {"TopicArn": spec.topic_arn, "Message": message_of(envelope)}
        if spec.fifo:
            params["MessageGroupId"] = str(envelope["job_id"])
            params["MessageDeduplicationId"] = dedup_id(str(envelope["effect_key"]))
        with target_call(f"SNS {spec.topic_arn}"):
            answer = client.publish(**params)
        return {"message_id": answer["MessageId"]}
