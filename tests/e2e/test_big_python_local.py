"""A Python run bigger than the ECS worker's task on the local stack (issue 11): the ECS worker runs it
in a process of its own (`python -m jobsched.ecsworker --run`, through the local container runner, as
a Fargate task of its own on AWS); the run succeeds once, with the handler's own result and its lines
in its run's logs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

LINE = "hello from a task of its own"


@pytest.fixture(scope="module")
def says_stack() -> Iterator[Stack]:
    running = start_stack(JOBSCHED_TICK_SECONDS="60", JOBSCHED_HANDLER_MODULES="tests.e2e.loghandlers")
    try:
        yield running
    finally:
        stop_stack(running)


def test_a_4_vcpu_python_run_runs_in_a_process_of_its_own_and_succeeds_once_with_its_logs(
    says_stack: Stack,
) -> None:
    stack = says_stack
    # Given a Python job asking for 4 vCPU and 8 GiB: bigger than the ECS worker's task (1 vCPU, 2 GiB)
    body = {
        "type": "one_off",
        "handler": "test.says",
        "run_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "payload": {"line": LINE},
        "timeout_seconds": 120,
        "resources": {"cpu": 4096, "memory_mib": 8192},
    }
    created = stack.post("/api/jobs", body)
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    job = stack.get(f"/api/jobs/{job_id}").json()
    assert (job["runs_on"], job["resources"]["cpu"], job["resources"]["memory_mib"]) == ("ecs", 4096, 8192)
    # When it runs, then it succeeds once, on attempt 1, with the handler's own result
    done = stack.wait_for(
        job_id,
        lambda j: j["recent_executions"] and j["recent_executions"][0]["status"] == "SUCCEEDED",
        timeout=60,
    )
    [run] = done["recent_executions"]
    assert run["attempt"] == 1 and [a["outcome"] for a in run["attempts"]] in ([], ["SUCCEEDED"])
    detail = stack.get(f"/api/runs/{run['run_id']}").json()
    assert detail["result"] == "said"  # recorded by the process that ran it, not from its exit code

    # And its run's logs hold the separate process's start and the handler's line, once
    def logged() -> list[str] | None:
        answer = stack.get(f"/api/runs/{run['run_id']}/logs")
        assert answer.status_code == 200, answer.text
        lines: list[dict[str, Any]] = answer.json()["lines"]
        messages = [str(line["message"]) for line in lines]
        said = [m for m in messages if LINE in m]
        started = [m for m in messages if "runs as a local process" in m]
        return messages if len(said) == 1 and len(started) == 1 else None

    assert poll_until(logged, "the task's lines in its run's logs", timeout=10)
