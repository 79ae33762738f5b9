"""TargetFactory: each spec kind becomes its own adapter (a jobsched.ports.Target)."""

from __future__ import annotations

import sys
from typing import Any

import boto3
import pytest

from jobsched.adapters.targets import (
    OWN_TASK_ARGS,
    AssumedRoles,
    EventBridgePutter,
    HttpCaller,
    LambdaInvoker,
    LocalProcessRunner,
    SnsPublisher,
    SqsSender,
    StepFunctionsStarter,
    TargetFactory,
)
from jobsched.domain.compute import Resources
from jobsched.domain.targets import TargetFailed, parse_target
from jobsched.errors import UnknownHandler
from jobsched.handlers import PythonHandler, registry
from tests.unit.targets.test_specs import GOOD

KINDS: dict[str, type[Any]] = {
    "python": PythonHandler,
    "http": HttpCaller,
    "lambda": LambdaInvoker,
    "sqs": SqsSender,
    "sns": SnsPublisher,
    "eventbridge": EventBridgePutter,
    "stepfunctions": StepFunctionsStarter,
}


@pytest.fixture
def factory() -> TargetFactory:
    sts = boto3.client("sts", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    return TargetFactory(
        handlers=registry, roles=AssumedRoles(sts, region="us-east-1"), signing_secret=lambda tenant: "s"
    )


@pytest.mark.parametrize("data", GOOD, ids=[f"{d['type']}-{i}" for i, d in enumerate(GOOD)])
def test_each_kind_of_spec_becomes_its_own_adapter(factory: TargetFactory, data: dict[str, Any]) -> None:
    adapter = factory.for_spec(parse_target(data), timeout_seconds=60)
    assert type(adapter) is KINDS[data["type"]]


def test_a_python_target_of_an_unregistered_handler_is_refused_by_name(factory: TargetFactory) -> None:
    with pytest.raises(UnknownHandler, match=r"'nope\.missing' is not registered"):
        factory.for_spec(parse_target({"type": "python", "handler": "nope.missing"}))


def test_the_worker_task_without_a_family_fails_with_target_unavailable(factory: TargetFactory) -> None:
    with pytest.raises(TargetFailed) as failed:
        factory.for_worker_task(resources=Resources(cpu=4096, memory_mib=8192))
    assert failed.value.error_type == "TargetUnavailable"


def test_the_worker_task_on_the_local_stack_is_a_process_of_this_python_with_this_environment() -> None:
    local = TargetFactory(handlers=registry, roles=None, signing_secret=lambda t: "s", local_containers=True)
    runner = local.for_worker_task(timeout_seconds=60, resources=Resources(cpu=4096, memory_mib=8192))
    assert isinstance(runner, LocalProcessRunner)
    assert runner.spec.command == [sys.executable, *OWN_TASK_ARGS] and runner._inherit is True
