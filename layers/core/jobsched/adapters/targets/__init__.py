"""Targets: one adapter per kind of jobsched.domain.targets spec, each a jobsched.ports.Target.

`TargetFactory.for_spec` is the one place a spec becomes its adapter (the composition root hands
it the tenant's signing secrets, the assumed roles and the address policy).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobsched.adapters.targets.credentials import AssumedRoles
from jobsched.adapters.targets.ecs import EcsPlace, EcsTaskRunner
from jobsched.adapters.targets.eventbridge import EventBridgePutter
from jobsched.adapters.targets.http import HttpCaller, SigningSecret
from jobsched.adapters.targets.lambda_ import LambdaInvoker
from jobsched.adapters.targets.local_process import LocalProcesses, LocalProcessRunner
from jobsched.adapters.targets.sns import SnsPublisher
from jobsched.adapters.targets.sqs import SqsSender
from jobsched.adapters.targets.ssrf import AddressPolicy, Resolver, system_resolve, vet
from jobsched.adapters.targets.stepfunctions import StepFunctionsStarter
from jobsched.domain.compute import Resources, fargate_size
from jobsched.domain.targets import (
    EcsTarget,
    EventBridgeTarget,
    FinalTargetFailure,
    HttpTarget,
    LambdaTarget,
    PythonTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
    TargetFailed,
    TargetSpec,
)
from jobsched.errors import ValidationFailed
from jobsched.handlers import HandlerRegistry
from jobsched.ports import Clock, SystemClock, Target

# What a task of the ECS worker's own task definition runs for one Python run bigger than the worker's
# task (jobsched.ecsworker's --run: the run named by the JOBSCHED_RUN_ID and _ATTEMPT it is given).
OWN_TASK_ARGS = ("-m", "jobsched.ecsworker", "--run")
OWN_TASK_COMMAND = ("python", *OWN_TASK_ARGS)  # the image's python (functions/ecs_worker/Dockerfile)

__all__ = [
    "AddressPolicy",
    "AssumedRoles",
    "EcsPlace",
    "EcsTaskRunner",
    "EventBridgePutter",
    "HttpCaller",
    "LambdaInvoker",
    "LocalProcessRunner",
    "SnsPublisher",
    "SqsSender",
    "StepFunctionsStarter",
    "TargetFactory",
]


@dataclass
class TargetFactory:
    """Builds the adapter of a target spec."""

    handlers: HandlerRegistry
    roles: AssumedRoles | None
    """None where no STS client is wired (the in-memory composition): an AWS target then fails its
    attempt with TargetUnavailable instead of acting with the process's own rights."""
    signing_secret: SigningSecret
    policy: AddressPolicy = field(default_factory=AddressPolicy.aws)
    resolve: Resolver = system_resolve
    clock: Clock = field(default_factory=SystemClock)
    # Container targets: the stack's own ECS client (made at the first container run) and where its
    # tasks run. None: an ecs target's attempt fails with TargetUnavailable.
    ecs: Callable[[], Any] | None = None
    ecs_place: EcsPlace | None = None
    # The local stack: container targets run their command as a local process (no Docker there),
    # whatever `ecs` says (adapters/targets/local_process.py).
    local_containers: bool = False
    _ecs_client: Any = field(default=None, repr=False)
    processes: LocalProcesses = field(default_factory=LocalProcesses, repr=False)
    """The container processes running here (local_containers only): stopped by close()."""

    def for_spec(
        self, spec: TargetSpec, *, timeout_seconds: float | None = None, resources: Resources | None = None
    ) -> Target:
        """The adapter for `spec`; `timeout_seconds` (the job's) bounds a waiting stepfunctions run or
        a container; `resources` is the run's placed size (a container's task is given it)."""
        if isinstance(spec, EcsTarget):
            if self.local_containers:
                return LocalProcessRunner(
                    spec,
                    resources=resources or fargate_size(None),
                    timeout_seconds=timeout_seconds,
                    processes=self.processes,
                    clock=self.clock,
                )
            if self.ecs is None or self.ecs_place is None:
                raise TargetFailed(
                    "ecs targets need an ECS cluster, and none is wired here", error_type="TargetUnavailable"
                )
            if self._ecs_client is None:
                self._ecs_client = self.ecs()
            return EcsTaskRunner(
                spec,
                client=self._ecs_client,
                place=self.ecs_place,
                resources=resources or fargate_size(None),
                timeout_seconds=timeout_seconds,
                clock=self.clock,
            )
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
        roles = self.roles
        if roles is None:
            raise TargetFailed(
                f"{spec.type} targets need AWS credentials, and none are wired here",
                error_type="TargetUnavailable",
            )
        if isinstance(spec, LambdaTarget):
            return LambdaInvoker(spec, roles=roles)
        if isinstance(spec, SqsTarget):
            return SqsSender(spec, roles=roles)
        if isinstance(spec, SnsTarget):
            return SnsPublisher(spec, roles=roles)
        if isinstance(spec, EventBridgeTarget):
            return EventBridgePutter(spec, roles=roles)
        if isinstance(spec, StepFunctionsTarget):
            return StepFunctionsStarter(spec, roles=roles, timeout_seconds=timeout_seconds, clock=self.clock)
        raise TypeError(f"no adapter for {type(spec).__name__}")

    def for_worker_task(self, *, timeout_seconds: float | None = None, resources: Resources) -> Target:
        """The adapter that runs one Python run in a task of the ECS worker's own task definition at
        `resources` (its placed size, bigger than the worker's task): a container run whose command
        is OWN_TASK_COMMAND, so it is started, followed, timed out and noted as a container target's
        task is (EcsTaskRunner), and recorded by its stop event too. On the local stack, the
        command in a process of its own (LocalProcessRunner) with this process's environment."""
        if self.local_containers:
            local = EcsTarget.model_construct(
                type="ecs",
                image=None,
                task_definition_arn="the ECS worker's own task definition",
                command=[sys.executable, *OWN_TASK_ARGS],
                environment={},
            )
            return LocalProcessRunner(
                local,
                resources=resources,
                timeout_seconds=timeout_seconds,
                processes=self.processes,
                clock=self.clock,
                inherit_environment=True,
            )
        if self.ecs is None or self.ecs_place is None or not self.ecs_place.worker_family:
            raise TargetFailed(
                "a Python run bigger than the ECS worker's task needs a task of its own, and no ECS "
                "worker task definition is wired here",
                error_type="TargetUnavailable",
            )
        # Built, not validated: a family (its latest revision), not a caller's ARN with a revision.
        own = EcsTarget.model_construct(
            type="ecs",
            image=None,
            task_definition_arn=self.ecs_place.worker_family,
            command=list(OWN_TASK_COMMAND),
            environment={},
        )
        if self._ecs_client is None:
            self._ecs_client = self.ecs()
        return EcsTaskRunner(
            own,
            client=self._ecs_client,
            place=self.ecs_place,
            resources=resources,
            timeout_seconds=timeout_seconds,
            clock=self.clock,
            worker_task=True,
        )

    def close(self) -> None:
        """Stop what this process's targets started that still runs: the local container processes,
        as the worker stops (on AWS nothing: a Fargate task outlives its worker, and the next attempt
        adopts it)."""
        self.processes.stop_all()

    def check(self, spec: TargetSpec) -> None:
        """ValidationFailed (`target.url`) when an http target's URL is refused under this policy;
        (`target.command`) for a container target with no command where containers run as local
        processes (the image's own entrypoint needs the image, and there is no Docker there).

        One DNS lookup, as a call makes: a name that resolves to a refused address today is a 400;
        a name that does not resolve yet is accepted (it is vetted again at every call, and a
        refused address then is a final failure, AddressRefused).
        """
        if isinstance(spec, EcsTarget) and self.local_containers and not spec.command:
            raise ValidationFailed(
                "target.command: required on the local stack, which runs a container's command as a local "
                "process (there is no Docker to run the image's own entrypoint)",
                field="target.command",
            )
        if not isinstance(spec, HttpTarget):
            return
        try:
            vet(spec.url, self.policy, self.resolve)
        except FinalTargetFailure as exc:
            raise ValidationFailed(f"target.url: {exc}", field="target.url") from None
        except TargetFailed:
            pass
