"""POST /api/jobs/batch: up to 100 jobs, one result per job in order, over the fakes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.api import build_app
from jobsched.services.run import Outcome
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}


def api(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def one_off(seconds: int, **extra: Any) -> dict[str, Any]:
    run_at = (T0 + timedelta(seconds=seconds)).isoformat()
    return {"type": "one_off", "handler": "demo.echo", "run_at": run_at, **extra}


def tenant_jobs(world: World) -> int:
    """The tenant's jobs as its listing shows them: job items, and the packed one-offs of its batches."""
    status, body = call(api(world), "GET", "/api/jobs?limit=100", headers=A)
    assert status == 200, body
    return len(body["items"])


def test_a_batch_answers_one_result_per_job_in_order_and_a_bad_item_sinks_nothing_else(world: World) -> None:
    # Given a batch whose second job has an unparseable cron and whose fourth names no handler
    app = api(world)
    jobs = [
        one_off(30),
        {"type": "recurring", "cron_expr": "61 * * * *", "handler": "demo.echo"},
        one_off(3600, name="later"),
        one_off(60, handler="no.such"),
    ]
    # When it is posted
    status, body = call(app, "POST", "/api/jobs/batch", headers=A, body={"jobs": jobs})
    # Then each job has its own answer, in order: created, or an error naming the item and field
    assert status == 200, body
    first, second, third, fourth = body["items"]
    assert first["status"] == "SCHEDULED" and first["job_id"].startswith("job_")
    assert first["next_run_at"] == "2026-11-30T12:00:30.000+00:00"
    assert second["error"]["code"] == "validation_error"
    assert second["error"]["message"].startswith("jobs[1].cron_expr: "), second
    assert third["status"] == "SCHEDULED"
    assert fourth["error"]["message"] == "jobs[3].handler: 'no.such' is not a registered handler"
    # and only the good ones were written, each whole (readable, with its definition)
    assert tenant_jobs(world) == 2
    status, later = call(app, "GET", f"/api/jobs/{third['job_id']}", headers=A)
    assert status == 200 and later["name"] == "later"


def test_a_retried_batch_creates_nothing_twice_and_a_reused_key_with_another_body_is_a_409_item(
    world: World,
) -> None:
    # Given a batch created with a key per job
    app = api(world)
    jobs = [one_off(30, idempotency_key="r-1"), one_off(3600, idempotency_key="r-2")]
    _, first = call(app, "POST", "/api/jobs/batch", headers=A, body={"jobs": jobs})
    # When the same batch is posted again, and then once more with the second job changed
    assert call(app, "POST", "/api/jobs/batch", headers=A, body={"jobs": jobs}) == (200, first)
    changed = [jobs[0], {**jobs[1], "payload": {"other": True}}]
    _, third = call(app, "POST", "/api/jobs/batch", headers=A, body={"jobs": changed})
    # Then the retry answered the first results and wrote nothing; the changed job is a 409 item
    assert tenant_jobs(world) == 2
    assert third["items"][0] == first["items"][0]
    assert third["items"][1]["error"]["code"] == "idempotency_key_reused"
    assert third["items"][1]["error"]["message"].startswith("jobs[1].idempotency_key: ")


def test_a_batch_of_101_jobs_is_a_400_naming_jobs(world: World) -> None:
    jobs = [one_off(60)] * 101
    status, body = call(api(world), "POST", "/api/jobs/batch", headers=A, body={"jobs": jobs})
    assert status == 400 and body["error"]["message"].startswith("jobs: "), body
    assert tenant_jobs(world) == 0


def test_a_batchs_due_soon_jobs_share_one_hand_over_and_each_runs_once(world: World) -> None:
    # Given 25 one-offs due within the look-ahead, in one batch
    app = api(world)
    jobs = [one_off(30 + i % 5, idempotency_key=f"k{i}") for i in range(25)]
    status, body = call(app, "POST", "/api/jobs/batch", headers=A, body={"jobs": jobs})
    assert status == 200 and all("job_id" in item for item in body["items"])
    # When their second comes and the queue is drained
    world.clock.advance(40)
    outcomes: list[Outcome | str] = []
    while delivered := world.deliver():  # a receive answers up to 10 messages
        outcomes += delivered
    # Then every job ran exactly once, handed over by the request itself
    assert outcomes == [Outcome.SUCCEEDED] * 25
    for item in body["items"]:
        _, job = call(app, "GET", f"/api/jobs/{item['job_id']}", headers=A)
        assert job["status"] == "COMPLETED"
        assert [r["status"] for r in job["recent_executions"]] == ["SUCCEEDED"]
