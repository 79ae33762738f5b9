"""Alerts end to end over HTTP against `jobsched local`: a job's alert policy, the scheduler's own
failed, dead_letter and late alerts, and GET /api/alerts with its tenant-isolation case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0).isoformat()


def alerts_of(stack: Stack, tenant: str, query: str = "") -> dict[str, Any]:
    got = stack.get(f"/api/alerts{query}", **{"X-Tenant": tenant})
    assert got.status_code == 200, got.text
    return dict(got.json())


def test_a_failing_jobs_alerts_are_listed_for_its_tenant_only(stack: Stack) -> None:
    a, b = "alerts-e2e-a", "alerts-e2e-b"
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    # Given tenant A's one-off that fails at once and alerts on failures and dead letters
    created = stack.post(
        "/api/jobs",
        {
            "type": "one_off",
            "handler": "demo.fail",
            "run_at": soon(1),
            "max_attempts": 1,
            "alerts": {"on": ["failed", "dead_letter"]},
        },
        **{"X-Tenant": a},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    assert stack.get(f"/api/jobs/{job_id}", **{"X-Tenant": a}).json()["alerts"] == {
        "on": ["failed", "dead_letter"],
        "late_after_seconds": None,
    }
    # When it runs, fails and is dead-lettered, A's alerts list both, newest first
    query = f"?since={since.isoformat().replace('+', '%2B')}"

    def both() -> dict[str, Any] | None:
        page = alerts_of(stack, a, query)
        return page if len(page["items"]) >= 2 else None

    page = poll_until(both, "tenant A's failed and dead_letter alerts", timeout=30)
    assert [i["kind"] for i in page["items"]] == ["dead_letter", "failed"]
    assert {i["job_id"] for i in page["items"]} == {job_id}
    assert page["items"][0]["at"] >= page["items"][1]["at"]
    # and tenant B sees none of them, and cannot page with A's cursor
    assert alerts_of(stack, b)["items"] == []
    first = alerts_of(stack, a, "?limit=1")
    assert first["next_cursor"]
    refused = stack.get(f"/api/alerts?cursor={first['next_cursor']}", **{"X-Tenant": b})
    assert refused.status_code == 400, refused.text
    # and a bad alert policy is a 400 naming its field
    bad = stack.post(
        "/api/jobs",
        {"type": "one_off", "handler": "demo.echo", "run_at": soon(60), "alerts": {"on": ["late"]}},
        **{"X-Tenant": a},
    )
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("alerts.late_after_seconds")
