"""The eventbridge target: PutEvents of one event whose Detail is the envelope, as the tenant's role.

PutEvents answers 200 even when it drops the entry: FailedEntryCount > 0 is the failure, with the
entry's ErrorCode as the error type. EventBridge has no deduplication id; a rule's target
deduplicates on detail.effect_key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobsched.adapters.targets._aws import message_of, target_call
from jobsched.adapters.targets.credentials import AssumedRoles
from jobsched.domain.targets import EventBridgeTarget, TargetFailed
from jobsched.handlers import RunContext


class EventBridgePutter:
    """jobsched.ports.Target for an eventbridge target spec."""

    def __init__(self, spec: EventBridgeTarget, *, roles: AssumedRoles) -> None:
        self.spec = spec
        self._roles = roles

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Put the event; the result names it."""
        spec = self.spec
        client = self._roles.client("events", spec.role_arn, str(envelope["tenant"]))
        entry = {
            "EventBusName": spec.event_bus_name,
            "Source": spec.source,
            "DetailType": spec.detail_type,
            "Detail": message_of(envelope),
        }
        with target_call(f"EventBridge {spec.event_bus_name}"):
            answer = client.put_events(Entries=[entry])
        entries = answer.get("Entries") or [{}]
        if answer.get("FailedEntryCount", 0) > 0 or "EventId" not in entries[0]:
            code = str(entries[0].get("ErrorCode") or "PutEventsFailed")
            message = str(entries[0].get("ErrorMessage") or "the event was not accepted")
            raise TargetFailed(f"EventBridge {spec.event_bus_name}: {code}: {message}", error_type=code)
        return {"event_id": entries[0]["EventId"]}
