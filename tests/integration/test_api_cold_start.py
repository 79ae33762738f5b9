"""The API function's cold start builds no CloudWatch Logs client: it is made at the first read of a
run's log lines (GET /api/runs/{id}/logs), which most requests never make."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from jobsched import constants as c
from jobsched.domain.keys import run_id_for
from jobsched.local import events, lambdas
from jobsched.settings import Settings


def test_the_api_cold_start_builds_no_logs_client_until_a_run_s_lines_are_read(
    aws: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the API function configured with the worker's and the containers' log groups, and every
    # boto3 client counted
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(c.WORKER_LOG_GROUP_ENV, "/aws/lambda/jobsched-worker")
    monkeypatch.setenv(c.ECS_LOG_GROUP_ENV, "jobsched-containers")  # container targets' output too
    monkeypatch.setenv(c.TENANT_SOURCE_ENV, "header")
    made: list[str] = []
    real = boto3.client

    def counting(service: str, *args: Any, **kwargs: Any) -> Any:
        made.append(service)
        return real(service, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(boto3, "client", counting)
    # When it cold-starts
    api = lambdas.load("api")
    # Then no logs client was made
    assert "logs" not in made, made
    # When a run's log lines are read
    created = call_api(api, "POST", "/api/jobs", {"type": "one_off", "handler": "demo.echo",
                                                 "run_at": "2030-01-01T00:00:00+00:00"})  # fmt: skip
    assert created["statusCode"] == 201, created
    job_id = json.loads(created["body"])["job_id"]
    run_id = run_id_for(job_id, datetime(2030, 1, 1, tzinfo=UTC))
    answer = call_api(api, "GET", f"/api/runs/{run_id}/logs")
    # Then the client is made then, once (one for both groups)
    assert answer["statusCode"] == 200, answer
    assert made.count("logs") == 1, made


def call_api(api: Any, method: str, path: str, body: Any = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "X-Tenant": "t"}
    out: dict[str, Any] = api.lambda_handler(
        events.api_gateway_event(method, path, headers, data), lambdas.LambdaContext("api")
    )
    return out
