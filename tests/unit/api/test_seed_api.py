"""The seeds' API as written: a one_off with depends_on is a dependent job, and run-now beside run.

Requests go through the resolver as API Gateway REST proxy events, over the services on the fakes.
"""

from __future__ import annotations

from datetime import timedelta

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.api import build_app
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}
ONE_OFF = {"type": "one_off", "handler": "demo.echo", "run_at": (T0 + timedelta(hours=1)).isoformat()}


def api(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def test_a_one_off_with_depends_on_and_no_run_at_is_a_dependent_job(world: World) -> None:
    # Given an upstream job of the tenant
    app = api(world)
    status, upstream = call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)
    assert status == 201, upstream
    # When the tenant posts seed 1's dependent job: a one_off with depends_on and no run_at
    body = {"type": "one_off", "handler": "demo.echo", "depends_on": [upstream["job_id"]]}
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    # Then it is accepted, waits for its upstream (no time of its own), and reads back as dependent
    assert status == 201, created
    assert created["next_run_at"] is None
    status, job = call(app, "GET", f"/api/jobs/{created['job_id']}", headers=A)
    assert status == 200 and job["type"] == "dependent"
    assert job["depends_on"] == [upstream["job_id"]]


def test_a_one_off_with_depends_on_and_a_run_at_is_still_refused_naming_the_field(world: World) -> None:
    # Given an upstream; when a one_off names both a time and upstreams, then it is a 400 (which
    # of the two decides would be a guess)
    app = api(world)
    _, upstream = call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)
    status, answer = call(
        app, "POST", "/api/jobs", headers=A, body={**ONE_OFF, "depends_on": [upstream["job_id"]]}
    )
    assert status == 400, answer
    assert "depends_on" in answer["error"]["message"]


def test_run_now_queues_a_manual_run_like_run_and_is_tenant_scoped(world: World) -> None:
    # Given a tenant's job
    app = api(world)
    _, created = call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)
    job_id = created["job_id"]
    # When another tenant asks for a run-now, then it is a 404 and nothing is queued
    status, _ = call(app, "POST", f"/api/jobs/{job_id}/run-now", headers=B)
    assert status == 404
    assert world.queue.receive() == []
    # When the owner asks, then it is 202 with the manual run's id, and the run is queued
    status, answer = call(app, "POST", f"/api/jobs/{job_id}/run-now", headers=A)
    assert status == 202, answer
    assert answer["run_id"].startswith(job_id)
    world.deliver()
    status, job = call(app, "GET", f"/api/jobs/{job_id}", headers=A)
    assert [r["run_id"] for r in job["recent_executions"] if r["status"] == "SUCCEEDED"] == [answer["run_id"]]
