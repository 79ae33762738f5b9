"""GET /api/runs/{run_id}/logs over the fakes: the run's own lines, paged, tenant-scoped."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.adapters.memory import MemoryRunLogs
from jobsched.api import build_app
from jobsched.domain import times
from jobsched.domain.keys import run_id_for
from jobsched.services.runs import LogLinks
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}


def api(world: World, lines: MemoryRunLogs, logs: LogLinks | None = None) -> APIGatewayRestResolver:
    return build_app(
        world.svc.job_service,
        world.svc.failures,
        world.svc.schedule,
        tenant_source="header",
        logs=logs,
        run_logs=lines,
    )


def a_run(app: APIGatewayRestResolver) -> tuple[str, str]:
    run_at = T0 + timedelta(seconds=30)
    body = {"type": "one_off", "handler": "demo.echo", "run_at": run_at.isoformat()}
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    return str(created["job_id"]), run_id_for(str(created["job_id"]), run_at)


def test_a_runs_log_lines_read_back_oldest_first_a_page_at_a_time(world: World) -> None:
    # Given a run that logged three lines, beside a line of another run
    lines = MemoryRunLogs()
    app = api(world, lines)
    _, run_id = a_run(app)
    at = T0 + timedelta(seconds=30)
    for i in range(3):
        lines.append(run_id, "team-a", at + timedelta(seconds=i), f"line {i}")
        lines.append("job_other@x", "team-a", at, "not this run's")
    # When its owner reads them two at a time
    status, first = call(app, "GET", f"/api/runs/{quote(run_id)}/logs?limit=2", headers=A)
    assert status == 200, first
    status, rest = call(
        app, "GET", f"/api/runs/{quote(run_id)}/logs?limit=2&cursor={first['next_cursor']}", headers=A
    )
    # Then the pages hold its lines in order, with their instants, and the last page ends
    assert [(x["at"], x["message"]) for x in first["lines"]] == [
        (times.iso(at), "line 0"),
        (times.iso(at + timedelta(seconds=1)), "line 1"),
    ]
    assert status == 200 and [x["message"] for x in rest["lines"]] == ["line 2"]
    assert rest["next_cursor"] is None
    assert first["console_url"] is None  # no console locally


def test_another_tenants_run_logs_are_not_found(world: World) -> None:
    # Given team-a's run with a line
    lines = MemoryRunLogs()
    app = api(world, lines)
    _, run_id = a_run(app)
    lines.append(run_id, "team-a", T0 + timedelta(seconds=30), "secret")
    # When team-b asks for its logs; Then 404, as for an unknown run
    status, body = call(app, "GET", f"/api/runs/{quote(run_id)}/logs", headers=B)
    assert status == 404 and body["error"]["code"] == "not_found"
    status, _ = call(app, "GET", "/api/runs/nope/logs", headers=A)
    assert status == 404


def test_on_aws_the_answer_links_the_console_filtered_by_the_run_id(world: World) -> None:
    links = LogLinks(log_group="/aws/lambda/jobsched-worker", region="eu-west-1")
    app = api(world, MemoryRunLogs(), logs=links)
    _, run_id = a_run(app)
    status, body = call(app, "GET", f"/api/runs/{quote(run_id)}/logs", headers=A)
    assert status == 200 and body == {"lines": [], "next_cursor": None, "console_url": links.url(run_id)}
