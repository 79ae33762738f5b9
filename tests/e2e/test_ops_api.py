"""The operator's API end to end over HTTP against `jobsched local`: listing, bulk actions, stats,
runs by id and their cancel, run-now and the seed's dependent one-off, each with its tenancy case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0).isoformat()


def submit(stack: Stack, tenant: str, **body: Any) -> str:
    created = stack.post("/api/jobs", {"handler": "demo.echo", **body}, **{"X-Tenant": tenant})
    assert created.status_code == 201, created.text
    return str(created.json()["job_id"])


def newest_run(stack: Stack, tenant: str, job_id: str, status: str, timeout: float = 30) -> dict[str, Any]:
    job = stack.wait_for(
        job_id,
        lambda j: any(r["status"] == status for r in j["recent_executions"]),
        timeout=timeout,
        **{"X-Tenant": tenant},
    )
    return next(r for r in job["recent_executions"] if r["status"] == status)


def test_a_run_by_id_run_now_and_the_seeds_dependent_one_off_over_http(stack: Stack) -> None:
    a, b = {"X-Tenant": "ops-runs-a"}, {"X-Tenant": "ops-runs-b"}
    job_id = submit(stack, "ops-runs-a", type="one_off", run_at=soon(2), payload={"n": 1})
    run = newest_run(stack, "ops-runs-a", job_id, "SUCCEEDED")
    # GET /api/runs/{id}: the run, its attempts and result; the local stack links no log group
    got = stack.get(f"/api/runs/{run['run_id']}", **a)
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["status"], body["result"], len(body["attempts"])) == ("SUCCEEDED", {"n": 1}, 1)
    assert body["lateness_ms"] is not None and body["logs_url"] is None
    assert stack.get(f"/api/runs/{run['run_id']}", **b).status_code == 404
    # run-now beside run: tenant-scoped, and the manual run succeeds
    recurring = submit(stack, "ops-runs-a", type="recurring", cron_expr="0 0 1 1 *")
    assert stack.post(f"/api/jobs/{recurring}/run-now", None, **b).status_code == 404
    queued = stack.post(f"/api/jobs/{recurring}/run-now", None, **a)
    assert queued.status_code == 202, queued.text
    assert newest_run(stack, "ops-runs-a", recurring, "SUCCEEDED")["run_id"] == queued.json()["run_id"]
    # A one_off with depends_on and no run_at is a dependent job; another tenant cannot name the upstream
    dependant = submit(stack, "ops-runs-a", type="one_off", depends_on=[recurring])
    assert stack.get(f"/api/jobs/{dependant}", **a).json()["type"] == "dependent"
    refused = stack.post(
        "/api/jobs", {"type": "one_off", "handler": "demo.echo", "depends_on": [recurring]}, **b
    )
    assert refused.status_code == 400 and "unknown job" in refused.json()["error"]["message"], refused.text


def test_a_run_cancelled_before_its_time_never_runs_and_a_running_one_is_asked_to_stop(stack: Stack) -> None:
    a, b = {"X-Tenant": "ops-cancel-a"}, {"X-Tenant": "ops-cancel-b"}
    # Not started: cancelled (200), and it never runs; another tenant's cancel is a 404
    job_id = submit(stack, "ops-cancel-a", type="one_off", run_at=soon(4))
    run_id = poll_until(
        lambda: (stack.get(f"/api/jobs/{job_id}", **a).json()["recent_executions"] or [{}])[0].get("run_id"),
        "the one-off's PENDING run",
        timeout=10,
    )
    assert stack.post(f"/api/runs/{run_id}/cancel", None, **b).status_code == 404
    cancelled = stack.post(f"/api/runs/{run_id}/cancel", None, **a)
    assert (cancelled.status_code, cancelled.json()) == (200, {"run_id": run_id, "status": "CANCELLED"})
    # A later one-off of the tenant has run: the cancelled run's message, due first, was delivered
    later = submit(stack, "ops-cancel-a", type="one_off", run_at=soon(6))
    newest_run(stack, "ops-cancel-a", later, "SUCCEEDED")
    assert stack.get(f"/api/runs/{run_id}", **a).json()["status"] == "CANCELLED"
    # Running: 202, and demo.sleep stops early on ctx.cancelled (read by the worker's heartbeat)
    sleeper = submit(
        stack, "ops-cancel-a", type="one_off", run_at=soon(1), handler="demo.sleep", payload={"seconds": 120}
    )
    running = newest_run(stack, "ops-cancel-a", sleeper, "RUNNING", timeout=40)
    asked = stack.post(f"/api/runs/{running['run_id']}/cancel", None, **a)
    assert (asked.status_code, asked.json()["status"]) == (202, "RUNNING"), asked.text
    done = newest_run(stack, "ops-cancel-a", sleeper, "SUCCEEDED", timeout=40)
    assert done["result"]["cancelled"] is True and done["result"]["slept"] < 60
    # Finished: 409
    assert stack.post(f"/api/runs/{running['run_id']}/cancel", None, **a).status_code == 409


def test_the_listing_filters_and_pages_the_callers_jobs_only(stack: Stack) -> None:
    a, b = {"X-Tenant": "ops-list-a"}, {"X-Tenant": "ops-list-b"}
    mine = [
        submit(
            stack,
            "ops-list-a",
            type="recurring",
            cron_expr="0 3 * * *",
            name=f"nightly-{i}",
            tags={"env": "prod" if i % 2 else "dev"},
        )
        for i in range(3)
    ]
    theirs = submit(stack, "ops-list-b", type="recurring", cron_expr="0 3 * * *", name="nightly-x")
    page = stack.get("/api/jobs?name_prefix=nightly", **a).json()
    assert [i["job_id"] for i in page["items"]] == list(reversed(mine))
    assert page["items_read"] == 3  # the tenant's partition only, whatever else is stored
    assert [i["job_id"] for i in stack.get("/api/jobs?tag=env:prod", **a).json()["items"]] == [mine[1]]
    assert [i["job_id"] for i in stack.get("/api/jobs", **b).json()["items"]] == [theirs]
    first = stack.get("/api/jobs?limit=2&order=next_run", **a).json()
    rest = stack.get(f"/api/jobs?limit=2&order=next_run&cursor={first['next_cursor']}", **a).json()
    assert sorted(i["job_id"] for i in first["items"] + rest["items"]) == sorted(mine)
    assert stack.get(f"/api/jobs?cursor={first['next_cursor']}&order=next_run", **b).status_code == 400
    bad = stack.get("/api/jobs?status=SLEEPING", **a)
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("status")


def test_bulk_actions_and_stats_over_http_are_tenant_scoped(stack: Stack) -> None:
    a, b = {"X-Tenant": "ops-bulk-a"}, {"X-Tenant": "ops-bulk-b"}
    mine = [
        submit(stack, "ops-bulk-a", type="recurring", cron_expr="0 4 * * *", tags={"k": "v"})
        for _ in range(2)
    ]
    theirs = submit(stack, "ops-bulk-b", type="recurring", cron_expr="0 4 * * *")
    paused = stack.post("/api/jobs/actions", {"action": "pause", "job_ids": [*mine, theirs]}, **a).json()
    assert [(i["ok"], i["status"]) for i in paused["items"]] == [
        (True, "PAUSED"),
        (True, "PAUSED"),
        (False, None),
    ]
    assert stack.get(f"/api/jobs/{theirs}", **b).json()["status"] == "SCHEDULED"
    resumed = stack.post("/api/jobs/actions", {"action": "resume", "filter": {"tag": "k:v"}}, **a).json()
    assert resumed["succeeded"] == 2, resumed
    over = stack.post(
        "/api/jobs/actions", {"action": "pause", "job_ids": [f"job_{i}" for i in range(101)]}, **a
    )
    assert over.status_code == 400 and over.json()["error"]["message"].startswith("job_ids")
    # run_now through the bulk action, then the stats of the runs it made
    ran = stack.post("/api/jobs/actions", {"action": "run_now", "job_ids": mine[:1]}, **a).json()
    assert ran["succeeded"] == 1, ran
    newest_run(stack, "ops-bulk-a", mine[0], "SUCCEEDED")
    stats = stack.get(f"/api/jobs/{mine[0]}/stats", **a)
    assert stats.status_code == 200, stats.text
    body = stats.json()
    assert body["runs"] == 1 and body["by_status"] == {"SUCCEEDED": 1} and body["success_rate"] == 1.0
    assert body["lateness_ms"]["max"] is not None and body["truncated"] is False
    assert stack.get(f"/api/jobs/{mine[0]}/stats", **b).status_code == 404
