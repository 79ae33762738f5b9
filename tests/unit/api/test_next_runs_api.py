"""GET /api/jobs/{id}'s next_runs: the next 5 ticks in the job's timezone, as UTC ISO-8601, from the job
record alone; [] for a job that does not fire on a schedule any more (or ever).

Requests go through the resolver as API Gateway REST proxy events, over the services on the fakes.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.api import build_app
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}


def api(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def created(app: APIGatewayRestResolver, body: dict[str, Any]) -> str:
    status, answer = call(app, "POST", "/api/jobs", headers=A, body={"handler": "demo.echo", **body})
    assert status == 201, answer
    return str(answer["job_id"])


def job(app: APIGatewayRestResolver, job_id: str) -> dict[str, Any]:
    status, answer = call(app, "GET", f"/api/jobs/{job_id}", headers=A)
    assert status == 200, answer
    return dict(answer)


def test_it_lists_the_next_five_ticks_next_run_at_first(world: World) -> None:
    # Given an hourly job created at 12:00Z
    app = api(world)
    job_id = created(app, {"type": "recurring", "cron_expr": "0 * * * *"})
    # When it is read
    answer = job(app, job_id)
    # Then next_runs are the five hours after T0, the first being next_run_at
    assert answer["next_runs"] == [
        "2026-11-30T13:00:00.000+00:00",
        "2026-11-30T14:00:00.000+00:00",
        "2026-11-30T15:00:00.000+00:00",
        "2026-11-30T16:00:00.000+00:00",
        "2026-11-30T17:00:00.000+00:00",
    ]
    assert answer["next_runs"][0] == answer["next_run_at"]


def test_it_follows_the_jobs_timezone_across_a_spring_forward(world: World) -> None:
    # Given a job at 09:00 New York wall time that starts two days before 2027's DST change (Mar 14)
    app = api(world)
    job_id = created(
        app,
        {
            "type": "recurring",
            "cron_expr": "0 9 * * *",
            "timezone": "America/New_York",
            "start_at": "2027-03-12T00:00:00+00:00",
        },
    )
    # Then the reference timeline: 14:00Z under EST, 13:00Z from the 14th (EDT)
    assert job(app, job_id)["next_runs"] == [
        "2027-03-12T14:00:00.000+00:00",
        "2027-03-13T14:00:00.000+00:00",
        "2027-03-14T13:00:00.000+00:00",
        "2027-03-15T13:00:00.000+00:00",
        "2027-03-16T13:00:00.000+00:00",
    ]


def test_it_fires_an_hour_pinned_time_once_in_a_fall_back_overlap(world: World) -> None:
    # Given 01:30 New York, from the day before 2027's fall-back (Nov 7: 01:30 happens twice)
    app = api(world)
    job_id = created(
        app,
        {
            "type": "recurring",
            "cron_expr": "30 1 * * *",
            "timezone": "America/New_York",
            "start_at": "2027-11-06T00:00:00+00:00",
        },
    )
    # Then the 7th fires once, at its first occurrence (EDT, 05:30Z), then EST (06:30Z)
    assert job(app, job_id)["next_runs"] == [
        "2027-11-06T05:30:00.000+00:00",
        "2027-11-07T05:30:00.000+00:00",
        "2027-11-08T06:30:00.000+00:00",
        "2027-11-09T06:30:00.000+00:00",
        "2027-11-10T06:30:00.000+00:00",
    ]


def test_it_stops_at_end_at(world: World) -> None:
    app = api(world)
    end = (T0 + timedelta(hours=3)).isoformat()
    job_id = created(app, {"type": "recurring", "cron_expr": "0 * * * *", "end_at": end})
    assert job(app, job_id)["next_runs"] == [
        "2026-11-30T13:00:00.000+00:00",
        "2026-11-30T14:00:00.000+00:00",
        "2026-11-30T15:00:00.000+00:00",
    ]


def test_it_stops_after_max_runs(world: World) -> None:
    app = api(world)
    job_id = created(app, {"type": "recurring", "cron_expr": "0 * * * *", "max_runs": 2})
    assert job(app, job_id)["next_runs"] == ["2026-11-30T13:00:00.000+00:00", "2026-11-30T14:00:00.000+00:00"]


@pytest.mark.parametrize("kind", ["one_off", "paused", "cancelled"])
def test_it_is_empty_for_a_one_off_a_paused_or_a_cancelled_job(world: World, kind: str) -> None:
    app = api(world)
    if kind == "one_off":
        job_id = created(app, {"type": "one_off", "run_at": (T0 + timedelta(hours=1)).isoformat()})
    else:
        job_id = created(app, {"type": "recurring", "cron_expr": "0 * * * *"})
        if kind == "paused":
            assert call(app, "POST", f"/api/jobs/{job_id}/pause", headers=A)[0] == 200
        else:
            assert call(app, "DELETE", f"/api/jobs/{job_id}", headers=A)[0] == 200
    assert job(app, job_id)["next_runs"] == []


def test_it_is_empty_for_a_dependent_job(world: World) -> None:
    app = api(world)
    upstream = created(app, {"type": "recurring", "cron_expr": "0 * * * *"})
    job_id = created(app, {"type": "dependent", "depends_on": [upstream]})
    assert job(app, job_id)["next_runs"] == []


def test_it_is_documented_in_the_openapi_document(world: World) -> None:
    status, document = call(api(world), "GET", "/api/openapi.json", headers=A)
    assert status == 200
    prop = document["components"]["schemas"]["JobView"]["properties"]["next_runs"]
    assert prop["type"] == "array" and prop["items"] == {"type": "string"}
