"""Targets: one adapter per kind of jobsched.domain.targets spec, each a jobsched.ports.Target.

`TargetFactory.for_spec` is the one place a spec becomes its adapter (the composition root hands
it the tenant's signing secrets, the assumed roles and the address policy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobsched.adapters.targets.credentials import AssumedRoles
from jobsched.adapters.targets.eventbridge import EventBridgePutter
from jobsched.adapters.targets.http import HttpCaller, SigningSecret
from jobsched.adapters.targets.lambda_ import LambdaInvoker
from jobsched.adapters.targets.sns import SnsPublisher
from jobsched.adapters.targets.sqs import SqsSender
from jobsched.adapters.targets.ssrf import AddressPolicy, Resolver, system_resolve
from jobsched.adapters.targets.stepfunctions import StepFunctionsStarter
from jobsched.domain.targets import (
    EventBridgeTarget,
    HttpTarget,
    LambdaTarget,
    PythonTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
    TargetSpec,
)
from jobsched.handlers import HandlerRegistry
from jobsched.ports import Clock, SystemClock, Target

__all__ = [
    "AddressPolicy",
    "AssumedRoles",
    "EventBridgePutter",
    "HttpCaller",
    "LambdaInvoker",
    "SnsPublisher",
    "SqsSender",
    "StepFunctionsStarter",
    "TargetFactory",
]


@dataclass
class TargetFactory:
    """Builds the adapter of a target spec."""

    handlers: HandlerRegistry
    roles: AssumedRoles
    signing_secret: SigningSecret
    policy: AddressPolicy = field(default_factory=AddressPolicy.aws)
    resolve: Resolver = system_resolve
    clock: Clock = field(default_factory=SystemClock)

    def for_spec(self, spec: TargetSpec, *, timeout_seconds: float | None = None) -> Target:
        """The adapter for `spec`; `timeout_seconds` (the job's) bounds a waiting stepfunctions run."""
        if isinstance(spec, PythonTarget):
            return self.handlers.target(spec.handler)
        if isinstance(spec, HttpTarget):
            return HttpCaller(
                spec,
                signing_secret=self.signing_secret,
                policy=self.policy,
                resolve=self.resolve,
                clock=self.clock,
            )
        if isinstance(spec, LambdaTarget):
            return LambdaInvoker(spec, roles=self.roles)
        if isinstance(spec, SqsTarget):
            return SqsSender(spec, roles=self.roles)
        if isinstance(spec, SnsTarget):
            return SnsPublisher(spec, roles=self.roles)
        if isinstance(spec, EventBridgeTarget):
            return EventBridgePutter(spec, roles=self.roles)
        if isinstance(spec, StepFunctionsTarget):
            return StepFunctionsStarter(
                spec, roles=self.roles, timeout_seconds=timeout_seconds, clock=self.clock
            )
        raise TypeError(f"no adapter for {type(spec).__name__}")
