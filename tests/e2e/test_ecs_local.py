"""The local stack keeps AWS's limits (issue 11, item 7): ECS-placed runs go to the ECS worker's own
process; a Lambda-placed run past the Lambda worker's timeout is killed, as Lambda would, and redelivered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Stack, start_stack, stop_stack

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def sleep_job(seconds: float, **fields: Any) -> dict[str, Any]:
    run_at = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    payload = {"seconds": seconds}
    return {"type": "one_off", "handler": "demo.sleep", "run_at": run_at, "payload": payload, **fields}


def test_a_75_s_sleep_with_a_600_s_timeout_runs_on_ecs_and_succeeds_once_on_attempt_1(stack: Stack) -> None:
    # Given a 75 s demo.sleep with timeout_seconds 600: beyond the Lambda worker's 50 s
    created = stack.post("/api/jobs", sleep_job(75, timeout_seconds=600))
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    # Then it resolves to ECS
    job = stack.get(f"/api/jobs/{job_id}").json()
    assert (job["runs_on"], job["resources"]) == ("ecs", {"cpu": 256, "memory_mib": 512, "gpus": 0})
    # And the ECS worker's process runs it to success, once, on attempt 1 (no kill, no redelivery)
    done = stack.wait_for(
        job_id, lambda j: j["recent_executions"] and j["recent_executions"][0]["status"] == "SUCCEEDED", 150
    )
    [run] = done["recent_executions"]
    assert run["attempt"] == 1
    assert [a["outcome"] for a in run["attempts"]] in ([], ["SUCCEEDED"])


def test_the_same_job_pinned_to_lambda_is_a_400_naming_runs_on(stack: Stack) -> None:
    answer = stack.post("/api/jobs", sleep_job(75, timeout_seconds=600, runs_on="lambda"))
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("runs_on: the Lambda worker gives at most 50 s")


def test_a_lambda_placed_run_past_the_lambda_timeout_is_killed_and_redelivered() -> None:
    # Given a local stack whose Lambda worker times out after 3 s (6 s lease: the heartbeat beats at 2 s)
    short = start_stack(JOBSCHED_LOCAL_LAMBDA_TIMEOUT_SECONDS="3", JOBSCHED_LEASE_SECONDS="6")
    try:
        # When a Lambda-placed (no timeout of its own) 5 s sleep runs
        created = short.post("/api/jobs", sleep_job(5))
        job_id = created.json()["job_id"]
        assert short.get(f"/api/jobs/{job_id}").json()["runs_on"] == "lambda"
        # Then its first attempt is killed at 3 s and its message redelivered: a second attempt takes
        # the run over once the first one's lease lapsed
        job = short.wait_for(
            job_id, lambda j: j["recent_executions"] and j["recent_executions"][0]["attempt"] >= 2, 60
        )
        assert job["recent_executions"][0]["status"] != "SUCCEEDED"
    finally:
        stop_stack(short)
    output = short.process.stdout.read() if short.process.stdout else ""
    assert "timed out after 3 s (the Lambda worker's timeout)" in output
