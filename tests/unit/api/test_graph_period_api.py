"""GET /api/jobs/{id}/graph?period=: each node's run status in one chosen period, however old.

A period of a recurring chain is the scheduled_for of its root tick, and every node's run of it is
keyed (node, period): the answer is one read per node, never a scan nor a history query.
"""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.api import build_app
from jobsched.domain import times
from jobsched.domain.records import NewRun
from jobsched.domain.status import RunStatus
from jobsched.services.dag import GRAPH_PERIODS
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}
HOURS = 8  # more periods than the default answer's GRAPH_PERIODS
PLUS_2 = timezone(timedelta(hours=2))


def api(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def create(app: APIGatewayRestResolver, body: dict[str, Any]) -> str:
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    return str(created["job_id"])


def ran(world: World, job_id: str, hour: int, status: RunStatus) -> None:
    """A finished run of `job_id` in the period `hour` hours before T0 (the fake's row, as written)."""
    sf = T0 - timedelta(hours=hour)
    world.runs.put_pending(job_id=job_id, tenant="team-a", scheduled_for=sf, now=sf)
    key = (job_id, times.stored(sf))
    world.runs.rows[key] = world.runs.rows[key].model_copy(update={"status": status, "attempt": 1})


def period(hour: int) -> str:
    return times.iso(T0 - timedelta(hours=hour))


@pytest.fixture
def chain(world: World) -> tuple[APIGatewayRestResolver, str, str]:
    """An hourly root and its dependant, over HOURS periods: the oldest dead-lettered upstream (its
    dependant's run UPSTREAM_FAILED), every later one SUCCEEDED for both, but hour 2 (the root ran,
    the dependant not yet)."""
    app = api(world)
    root = create(
        app, {"type": "recurring", "name": "extract", "cron_expr": "0 * * * *", "handler": "demo.echo"}
    )
    down = create(app, {"type": "dependent", "name": "load", "depends_on": [root], "handler": "demo.echo"})
    ran(world, root, HOURS, RunStatus.DEAD_LETTER)
    world.runs.mark_upstream_failed(
        NewRun(down, "team-a", times.stored(T0 - timedelta(hours=HOURS)), "dependant"),
        reason="upstream was dead-lettered",
        now=T0,
    )
    for hour in range(1, HOURS):
        ran(world, root, hour, RunStatus.SUCCEEDED)
        if hour != 2:
            ran(world, down, hour, RunStatus.SUCCEEDED)
    return app, root, down


def test_without_a_period_the_graph_answers_the_most_recent_periods_as_before(
    chain: tuple[APIGatewayRestResolver, str, str],
) -> None:
    app, root, down = chain
    # When the graph is asked for with no period
    status, graph = call(app, "GET", f"/api/jobs/{down}/graph", headers=A)
    # Then it answers the GRAPH_PERIODS most recent, newest first; the oldest is not among them
    assert status == 200, graph
    assert [p["period"] for p in graph["periods"]] == [period(h) for h in range(1, GRAPH_PERIODS + 1)]
    assert graph["periods"][1]["status"] == {root: "SUCCEEDED"}
    assert period(HOURS) not in {p["period"] for p in graph["periods"]}


def test_a_period_older_than_the_recent_ones_shows_each_nodes_status_then_upstream_failed_included(
    world: World, chain: tuple[APIGatewayRestResolver, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, root, down = chain
    gets: list[tuple[str, str, bool]] = []
    real_get = world.runs.get

    def counted_get(job_id: str, scheduled_for: Any, *, consistent: bool = True) -> Any:
        gets.append((job_id, scheduled_for, consistent))
        return real_get(job_id, scheduled_for, consistent=consistent)

    def no_history(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a chosen period of a recurring chain reads no history")

    monkeypatch.setattr(world.runs, "get", counted_get)
    monkeypatch.setattr(world.runs, "recent", no_history)
    # When the graph is asked for in the oldest period, written with another offset
    asked = (T0 - timedelta(hours=HOURS)).astimezone(PLUS_2).isoformat()
    status, graph = call(app, "GET", f"/api/jobs/{down}/graph?period={quote(asked)}", headers=A)
    # Then that one period is answered: the upstream DEAD_LETTER, its dependant UPSTREAM_FAILED
    assert status == 200, graph
    assert graph["periods"] == [
        {"period": period(HOURS), "status": {root: "DEAD_LETTER", down: "UPSTREAM_FAILED"}}
    ]
    assert {n["job_id"] for n in graph["nodes"]} == {root, down} and len(graph["edges"]) == 1
    # ... with one eventually consistent GetItem per node, keyed (node, period)
    stored = times.stored(T0 - timedelta(hours=HOURS))
    assert sorted(gets) == sorted([(root, stored, False), (down, stored, False)])


def test_a_node_with_no_run_in_the_period_is_absent_and_a_period_without_runs_answers_none(
    chain: tuple[APIGatewayRestResolver, str, str],
) -> None:
    app, root, _down = chain
    # Given hour 2 (written with a Z): the root ran, its dependant has no run yet
    asked = quote(times.stored(T0 - timedelta(hours=2)))
    status, graph = call(app, "GET", f"/api/jobs/{root}/graph?period={asked}", headers=A)
    assert status == 200 and graph["periods"] == [{"period": period(2), "status": {root: "SUCCEEDED"}}]
    # A period with no run at all is still that period, every node absent ("no run")
    never = quote("2020-01-01T00:00:00+02:00")
    status, graph = call(app, "GET", f"/api/jobs/{root}/graph?period={never}", headers=A)
    assert status == 200 and graph["periods"] == [{"period": "2019-12-31T22:00:00.000+00:00", "status": {}}]


@pytest.mark.parametrize(
    "bad",
    ["yesterday", "2026-11-30T10:00:00", "0001-01-01T00:00:00+00:00", "2026-13-01T00:00:00Z", "x" * 65],
)
def test_a_malformed_period_is_a_400_naming_period(
    chain: tuple[APIGatewayRestResolver, str, str], bad: str
) -> None:
    app, _root, down = chain
    status, answer = call(app, "GET", f"/api/jobs/{down}/graph?period={quote(bad)}", headers=A)
    assert status == 400, answer
    assert answer["error"]["code"] == "validation_error" and "period" in answer["error"]["message"]


def test_another_tenants_job_is_a_404_with_or_without_a_period(
    chain: tuple[APIGatewayRestResolver, str, str],
) -> None:
    app, _root, down = chain
    for path in (f"/api/jobs/{down}/graph", f"/api/jobs/{down}/graph?period={quote(period(HOURS))}"):
        status, answer = call(app, "GET", path, headers=B)
        assert status == 404 and answer["error"]["code"] == "not_found", answer


def test_a_one_off_chain_has_the_one_period_once(world: World) -> None:
    # Given a one-off whose run succeeded, and its dependant
    app = api(world)
    up = create(
        app, {"type": "one_off", "handler": "demo.echo", "run_at": (T0 + timedelta(seconds=5)).isoformat()}
    )
    down = create(app, {"type": "dependent", "depends_on": [up], "handler": "demo.echo"})
    world.clock.advance(6)
    world.deliver()
    # When its graph is asked for in "once", and in an instant
    status, graph = call(app, "GET", f"/api/jobs/{down}/graph?period=once", headers=A)
    assert status == 200 and graph["periods"] == [{"period": "once", "status": {up: "SUCCEEDED"}}]
    status, graph = call(app, "GET", f"/api/jobs/{down}/graph?period={quote(period(0))}", headers=A)
    # Then "once" answers its runs, and an instant none (a one-off chain has no such period)
    assert status == 200 and graph["periods"] == [{"period": period(0), "status": {}}]
