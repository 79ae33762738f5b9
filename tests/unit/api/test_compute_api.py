"""resources and runs_on in the API: checked on create and PATCH, answered resolved, stored only if set."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from jobsched import constants as c
from jobsched.adapters.dynamodb.codec import job_to_item
from jobsched.api import build_app
from jobsched.local import events
from jobsched.local.lambdas import LambdaContext
from tests.unit.services.conftest import T0, World

RUN_AT = (T0 + timedelta(hours=1)).isoformat()


def call(
    world: World, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    app = build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")
    event = events.api_gateway_event(
        method,
        path,
        {"Content-Type": "application/json", c.TENANT_HEADER: "t1"},
        json.dumps(body).encode() if body is not None else None,
    )
    answer = app.resolve(event, LambdaContext("jobsched-api"))
    return answer["statusCode"], json.loads(answer["body"])


def sleeper(**fields: Any) -> dict[str, Any]:
    sleep = {"seconds": 75}
    return {"type": "one_off", "handler": "demo.sleep", "run_at": RUN_AT, "payload": sleep, **fields}


def test_a_long_sleep_resolves_to_ecs_and_the_job_shows_it(world: World) -> None:
    # Given a 75 s sleep with a 600 s timeout and no runs_on
    status, created = call(world, "POST", "/api/jobs", sleeper(timeout_seconds=600))
    assert status == 201, created
    # When it is read back
    _, job = call(world, "GET", f"/api/jobs/{created['job_id']}")
    # Then it runs on ECS at Fargate's smallest size
    assert job["runs_on"] == "ecs"
    assert job["resources"] == {"cpu": 256, "memory_mib": 512, "gpus": 0}


def test_a_short_job_resolves_to_the_lambda_worker(world: World) -> None:
    _, created = call(world, "POST", "/api/jobs", sleeper(timeout_seconds=30))
    _, job = call(world, "GET", f"/api/jobs/{created['job_id']}")
    assert (job["runs_on"], job["resources"]["memory_mib"]) == ("lambda", 256)


def test_explicit_lambda_with_a_timeout_lambda_cannot_give_is_a_400_naming_runs_on(world: World) -> None:
    status, body = call(world, "POST", "/api/jobs", sleeper(timeout_seconds=600, runs_on="lambda"))
    assert status == 400, body
    assert body["error"]["message"].startswith("runs_on: the Lambda worker gives at most 50 s"), body
    assert world.jobs.jobs == {}


def test_resources_beyond_fargates_largest_are_a_400_naming_the_field(world: World) -> None:
    status, body = call(world, "POST", "/api/jobs", sleeper(resources={"cpu": 32768, "memory_mib": 1024}))
    assert status == 400 and body["error"]["message"].startswith("resources.cpu:"), body
    status, body = call(world, "POST", "/api/jobs", sleeper(resources={"cpu": 1024, "memory_mib": 200_000}))
    assert status == 400 and body["error"]["message"].startswith("resources.memory_mib:"), body


def test_patch_that_makes_an_explicit_lambda_job_too_long_is_a_400_naming_runs_on(world: World) -> None:
    # Given a job pinned to Lambda
    _, created = call(world, "POST", "/api/jobs", sleeper(timeout_seconds=30, runs_on="lambda"))
    # When its timeout is raised past the Lambda worker's
    status, body = call(world, "PATCH", f"/api/jobs/{created['job_id']}", {"timeout_seconds": 600})
    # Then the edit is refused, naming runs_on
    assert status == 400 and body["error"]["message"].startswith("runs_on:"), body


def test_patch_resources_moves_the_job_to_ecs_and_null_clears_them(world: World) -> None:
    _, created = call(world, "POST", "/api/jobs", sleeper(timeout_seconds=30))
    path = f"/api/jobs/{created['job_id']}"
    status, job = call(world, "PATCH", path, {"resources": {"cpu": 2048, "memory_mib": 5000}})
    assert status == 200, job
    assert (job["runs_on"], job["resources"]) == ("ecs", {"cpu": 2048, "memory_mib": 5120, "gpus": 0})
    _, job = call(world, "PATCH", path, {"resources": None})
    assert job["runs_on"] == "lambda"


def test_placement_is_stored_only_when_asked(world: World) -> None:
    # Given a job that asks nothing and one that asks for resources
    _, plain = call(world, "POST", "/api/jobs", sleeper(timeout_seconds=30))
    _, big = call(world, "POST", "/api/jobs", sleeper(resources={"cpu": 1024, "memory_mib": 2048}))
    plain_item = job_to_item(world.jobs.jobs[plain["job_id"]], shard_count=4)
    big_item = job_to_item(world.jobs.jobs[big["job_id"]], shard_count=4)
    # Then the plain job's item has no placement attribute, the other its request and its lane
    assert "compute" not in plain_item and "lane" not in plain_item
    assert json.loads(big_item["compute"]["S"]) == {"resources": {"cpu": 1024, "memory_mib": 2048}}
    assert big_item["lane"] == {"S": "ecs"}


def test_patch_of_runs_on_lambda_on_a_container_job_is_a_400_naming_runs_on_and_changes_nothing(
    world: World,
) -> None:
    # Given a container job (an ecs target: its own Fargate task)
    container = {"type": "ecs", "image": "public.ecr.aws/docker/library/busybox:1.36", "command": ["true"]}
    job = {"type": "one_off", "target": container, "run_at": RUN_AT}
    status, created = call(world, "POST", "/api/jobs", job)
    assert status == 201, created
    before = world.jobs.jobs[created["job_id"]]
    # When an edit pins it to the Lambda worker
    status, body = call(world, "PATCH", f"/api/jobs/{created['job_id']}", {"runs_on": "lambda"})
    # Then it is refused as at create, naming runs_on, and the job is as it was
    assert status == 400, body
    assert body["error"]["message"].startswith("runs_on: an ecs target runs as its own Fargate task"), body
    assert world.jobs.jobs[created["job_id"]] == before
