"""POST /api/jobs/{id}/backfill with dry_run: 200 with the ticks it would cover (a capped preview and
their count); no run row, message or operation written, no backfill quota taken; the same 400s,
404s and 409s as the real one.

Requests go through the resolver as API Gateway REST proxy events, over the services on the fakes.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.api import build_app
from tests.unit.api.test_limits_api import with_quota
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
HOURLY = {"type": "recurring", "handler": "demo.echo", "cron_expr": "0 * * * *"}


def api(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def hourly(app: APIGatewayRestResolver) -> str:
    status, answer = call(app, "POST", "/api/jobs", headers=A, body=HOURLY)
    assert status == 201, answer
    return str(answer["job_id"])


def backfill(app: APIGatewayRestResolver, job_id: str, hours: float, **extra: Any) -> tuple[int, Any]:
    start = T0 - timedelta(hours=hours)
    body = {"from": start.isoformat(), "to": T0.isoformat(), **extra}
    return call(app, "POST", f"/api/jobs/{job_id}/backfill", headers=A, body=body)


def written(world: World) -> tuple[int, int, int]:
    """(run rows, queued messages, operations): what a dry run must leave as it found."""
    return len(world.runs.rows), len(world.queue.peek()), len(world.jobs.operations)


def test_a_dry_run_answers_the_ticks_and_writes_nothing(world: World) -> None:
    # Given an hourly job
    app = api(world)
    job_id = hourly(app)
    before = written(world)
    # When a 3-hour backfill is previewed
    status, answer = backfill(app, job_id, 3, dry_run=True)
    # Then a 200 names its three ticks, and no run, message or operation was written
    assert status == 200, answer
    assert answer == {
        "job_id": job_id,
        "dry_run": True,
        "ticks": 3,
        "first": "2026-11-30T09:00:00.000+00:00",
        "last": "2026-11-30T11:00:00.000+00:00",
        "preview": [
            "2026-11-30T09:00:00.000+00:00",
            "2026-11-30T10:00:00.000+00:00",
            "2026-11-30T11:00:00.000+00:00",
        ],
        "truncated": False,
    }
    assert written(world) == before
    # And the real one then creates exactly those
    status, done = backfill(app, job_id, 3)
    assert status == 202 and (done["ticks"], done["created"]) == (3, 3), done


def test_a_dry_runs_preview_is_capped_and_counts_every_tick(world: World) -> None:
    app = api(world)
    job_id = hourly(app)
    status, answer = backfill(app, job_id, 24 * 10, dry_run=True)
    assert status == 200, answer
    assert answer["ticks"] == 240 and len(answer["preview"]) == 50 and answer["truncated"] is True
    assert answer["last"] == "2026-11-30T11:00:00.000+00:00"
    assert written(world)[2] == 0


def test_a_dry_run_takes_no_backfill_quota(world: World) -> None:
    # Given team-a may backfill 5 ticks a day
    with_quota(world, backfill_ticks_per_day=5)
    app = api(world)
    job_id = hourly(app)
    # When it previews 4 ticks three times
    for _ in range(3):
        assert backfill(app, job_id, 4, dry_run=True)[0] == 200
    # Then the day's 5 are all still there for the real one
    status, answer = backfill(app, job_id, 5)
    assert status == 202, answer


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize(
    ("case", "field"),
    [("future", "to"), ("too_many", "to"), ("backwards", None), ("one_off", "job_id")],
)
def test_a_dry_run_refuses_what_the_real_one_refuses(
    world: World, dry_run: bool, case: str, field: str | None
) -> None:
    app = api(world)
    job_id = hourly(app)
    body: dict[str, Any] = {"from": (T0 - timedelta(hours=1)).isoformat(), "to": T0.isoformat()}
    if case == "future":
        body["to"] = (T0 + timedelta(hours=1)).isoformat()
    elif case == "too_many":
        _, job = call(app, "POST", "/api/jobs", headers=A, body={**HOURLY, "cron_expr": "* * * * *"})
        job_id = job["job_id"]
        body["from"] = (T0 - timedelta(days=1)).isoformat()
    elif case == "backwards":
        body = {"from": T0.isoformat(), "to": (T0 - timedelta(hours=1)).isoformat()}
    else:
        run_at = (T0 + timedelta(hours=1)).isoformat()
        one_off = {"type": "one_off", "handler": "demo.echo", "run_at": run_at}
        _, job = call(app, "POST", "/api/jobs", headers=A, body=one_off)
        job_id = job["job_id"]
    before = written(world)
    status, answer = call(
        app, "POST", f"/api/jobs/{job_id}/backfill", headers=A, body={**body, "dry_run": dry_run}
    )
    assert status == 400, answer
    if field is not None:
        assert answer["error"]["message"].startswith(f"{field}:") or answer["error"]["message"].startswith(
            "backfill:"
        ), answer
    assert written(world) == before


def test_a_dry_run_of_another_tenants_job_is_a_404(world: World) -> None:
    app = api(world)
    job_id = hourly(app)
    status, _ = call(
        app,
        "POST",
        f"/api/jobs/{job_id}/backfill",
        headers={"X-Tenant": "team-b"},
        body={"from": (T0 - timedelta(hours=1)).isoformat(), "to": T0.isoformat(), "dry_run": True},
    )
    assert status == 404


def test_a_dry_run_of_a_cancelled_job_is_a_409(world: World) -> None:
    app = api(world)
    job_id = hourly(app)
    assert call(app, "DELETE", f"/api/jobs/{job_id}", headers=A)[0] == 200
    assert backfill(app, job_id, 1, dry_run=True)[0] == 409


def test_the_dry_run_answer_is_in_the_openapi_document(world: World) -> None:
    status, document = call(api(world), "GET", "/api/openapi.json", headers=A)
    assert status == 200
    answers = document["paths"]["/api/jobs/{job_id}/backfill"]["post"]["responses"]
    assert answers["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/BackfillPreview"
    }
    assert "dry_run" in document["components"]["schemas"]["BackfillRequest"]["properties"]
