"""Container jobs on the local stack (issue 11, items 3, 6, 7): no Docker here, so the ECS worker runs the
target's command as a local process, with a Fargate task's lifecycle; what it prints is in its run's logs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.conftest import Stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TENANT = {"X-Tenant": "containers"}
PRINT_AND_EXIT_3 = ["python3", "-c", "print('hello from the container'); raise SystemExit(3)"]


def test_a_container_that_prints_and_exits_3_is_retried_dead_lettered_with_exit_code_and_its_line_is_logged(
    stack: Stack,
) -> None:
    # Given a container job whose command prints a line and exits 3, two attempts, a 1 s backoff
    body = {
        "type": "one_off",
        "run_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "target": {"type": "ecs", "image": "python:3.12-slim", "command": PRINT_AND_EXIT_3},
        "max_attempts": 2,
        "backoff": {"initial_seconds": 1, "multiplier": 1, "max_seconds": 1, "jitter": False},
    }
    created = stack.post("/api/jobs", body, **TENANT)
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    assert stack.get(f"/api/jobs/{job_id}", **TENANT).json()["runs_on"] == "ecs"
    # When it runs (on the ECS worker, as a local process: no image is pulled)
    job = stack.wait_for(
        job_id,
        lambda j: j["recent_executions"] and j["recent_executions"][0]["status"] == "DEAD_LETTER",
        timeout=60,
        **TENANT,
    )
    # Then both attempts failed with ExitCode, and the run is dead-lettered with it
    run = job["recent_executions"][0]
    assert run["attempt"] == 2 and [a["outcome"] for a in run["attempts"]] == ["FAILED", "FAILED"]
    assert run["error"]["type"] == "ExitCode" and "exit code 3" in run["error"]["message"]
    page = stack.get("/api/dead-letter?limit=10", **TENANT).json()
    [item] = [i for i in page["items"] if i["run_id"] == run["run_id"]]
    assert item["attempts"] == 2 and "exit code 3" in str(item["last_error"])

    # And the line it printed is in its run's logs, once per attempt
    def printed() -> list[str] | None:
        answer = stack.get(f"/api/runs/{run['run_id']}/logs", **TENANT)
        assert answer.status_code == 200, answer.text
        lines: list[dict[str, Any]] = answer.json()["lines"]
        said = [line["message"] for line in lines if line["message"] == "hello from the container"]
        return said if len(said) == 2 else None

    assert poll_until(printed, "the container's line in its run's logs", timeout=10)
    # And another tenant cannot read them
    assert stack.get(f"/api/runs/{run['run_id']}/logs", **{"X-Tenant": "other"}).status_code == 404


def test_a_container_job_with_no_command_is_a_400_naming_target_command_on_the_local_stack(
    stack: Stack,
) -> None:
    # The image's own entrypoint cannot run here (no Docker): the command is required
    body = {
        "type": "one_off",
        "run_at": datetime.now(UTC).isoformat(),
        "target": {"type": "ecs", "image": "busybox"},
    }
    answer = stack.post("/api/jobs", body, **TENANT)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"].startswith("target.command: required on the local stack")
