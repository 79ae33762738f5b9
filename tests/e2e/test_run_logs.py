"""GET /api/runs/{run_id}/logs end to end on `jobsched local`: what a handler logs is read back by run,
through the same CloudWatch Logs adapter as on AWS (the local stack ships the lines to its embedded AWS)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def talking() -> Iterator[Stack]:
    running = start_stack(JOBSCHED_TICK_SECONDS="60", JOBSCHED_HANDLER_MODULES="tests.e2e.loghandlers")
    try:
        yield running
    finally:
        stop_stack(running)


def test_a_line_a_handler_logs_is_in_its_runs_logs_and_another_tenant_gets_404(talking: Stack) -> None:
    a, b = {"X-Tenant": "logs-a"}, {"X-Tenant": "logs-b"}
    run_at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0).isoformat()
    created = talking.post(
        "/api/jobs",
        {"type": "one_off", "handler": "test.says", "run_at": run_at, "payload": {"line": "hello from run"}},
        **a,
    )
    assert created.status_code == 201, created.text
    job = talking.wait_for(
        created.json()["job_id"],
        lambda j: any(r["status"] == "SUCCEEDED" for r in j["recent_executions"]),
        **a,
    )
    run_id = job["recent_executions"][0]["run_id"]

    def logs() -> dict[str, Any] | None:
        got = talking.get(f"/api/runs/{run_id}/logs", **a)
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body if body["lines"] else None

    body = poll_until(logs, "the run's log line", timeout=10)
    assert [line["message"] for line in body["lines"]] == ["hello from run"]
    assert body["console_url"] is None and body["next_cursor"] is None
    assert datetime.fromisoformat(body["lines"][0]["at"]) >= datetime.fromisoformat(run_at) - timedelta(
        seconds=2
    )
    other = talking.get(f"/api/runs/{run_id}/logs", **b)
    assert other.status_code == 404, other.text
