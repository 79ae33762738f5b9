"""TargetFactory: each spec kind becomes its own adapter (a jobsched.ports.Target)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from jobsched.adapters.targets import (
    AssumedRoles,
    EventBridgePutter,
    HttpCaller,
    LambdaInvoker,
    SnsPublisher,
    SqsSender,
    StepFunctionsStarter,
    TargetFactory,
)
from jobsched.domain.targets import parse_target
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
