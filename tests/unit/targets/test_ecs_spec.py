"""The ecs target's spec (container jobs): exactly one of image and task_definition_arn, a command and
environment within RunTask's limits, JOBSCHED_* names kept for the envelope; 400s name the field; a
job with an ecs target is placed on Fargate at its resources' best fit, and runs_on lambda is a 400."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.targets import EcsTarget, parse_target
from jobsched.errors import ValidationFailed

TD = "arn:aws:ecs:us-east-1:123456789012:task-definition/report:7"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "target.image"),
        ({"image": "busybox", "task_definition_arn": TD}, "target.image"),
        ({"image": "busy box"}, "target.image"),
        ({"task_definition_arn": "report:7"}, "target.task_definition_arn"),
        ({"image": "busybox", "environment": {"JOBSCHED_RUN_ID": "x"}}, "target.environment"),
        ({"image": "busybox", "environment": {"1BAD": "x"}}, "target.environment"),
        ({"image": "busybox", "command": "echo hi"}, "target.command"),
        ({"image": "busybox", "command": ["x" * 1000] * 5}, "target.image"),
    ],
)
def test_it_refuses_a_bad_ecs_target_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        parse_target({"type": "ecs", **spec})
    assert refused.value.field == field


def test_it_takes_an_image_or_a_task_definition_with_a_command_and_environment() -> None:
    spec = parse_target(
        {"type": "ecs", "image": "public.ecr.aws/docker/library/busybox:1.36", "command": ["sh"]}
    )
    assert isinstance(spec, EcsTarget) and spec.command == ["sh"]
    spec = parse_target({"type": "ecs", "task_definition_arn": TD, "environment": {"MODE": "full"}})
    assert isinstance(spec, EcsTarget) and spec.environment == {"MODE": "full"}


def request(**fields: Any) -> CreateJobRequest:
    body = {
        "type": "one_off",
        "run_at": "2030-01-01T00:00:00Z",
        "target": {"type": "ecs", "image": "busybox"},
    }
    return CreateJobRequest.model_validate({**body, **fields})


def test_an_ecs_target_with_runs_on_lambda_is_refused_naming_runs_on() -> None:
    with pytest.raises(ValidationError) as refused:
        request(runs_on="lambda")
    assert refused.value.errors()[0]["loc"] == ("runs_on",)


def test_an_ecs_target_beyond_fargates_largest_size_is_refused_naming_resources() -> None:
    with pytest.raises(ValidationError) as refused:
        request(resources={"cpu": 16384, "memory_mib": 122881}, timeout_seconds=10)
    assert "resources" in str(refused.value)
