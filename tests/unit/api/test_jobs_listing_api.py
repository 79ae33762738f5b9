"""GET /api/jobs (filters, order, cursor, tags) and POST /api/jobs/actions, over the fakes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.api import build_app
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}


def api(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def submit(app: APIGatewayRestResolver, headers: dict[str, str] = A, **fields: Any) -> str:
    body = {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo", **fields}
    status, created = call(app, "POST", "/api/jobs", headers=headers, body=body)
    assert status == 201, created
    return str(created["job_id"])


def ids(answer: dict[str, Any]) -> list[str]:
    return [item["job_id"] for item in answer["items"]]


def test_the_listing_shows_the_callers_jobs_newest_first_with_schedule_tags_and_last_run(
    world: World,
) -> None:
    # Given two jobs of tenant A (the first one ran once) and one of tenant B
    app = api(world)
    first = submit(
        app, type="one_off", cron_expr=None, run_at=(T0 + timedelta(seconds=10)).isoformat(), name="first"
    )
    world.clock.advance(11)
    world.deliver()
    second = submit(app, name="second", tags={"env": "prod", "team": "data"})
    submit(app, B, name="theirs")
    # When A lists its jobs
    status, page = call(app, "GET", "/api/jobs", headers=A)
    # Then it sees its own two, newest first, each with its schedule, tags and newest run
    assert status == 200, page
    assert ids(page) == [second, first] and page["next_cursor"] is None
    by_id = {item["job_id"]: item for item in page["items"]}
    assert by_id[second]["schedule"]["cron_expr"] == "0 * * * *"
    assert by_id[second]["tags"] == {"env": "prod", "team": "data"}
    assert by_id[second]["next_run_at"] == "2026-11-30T13:00:00.000+00:00"
    assert by_id[second]["last_run"] is None and by_id[second]["target"] == "python"
    last = by_id[first]["last_run"]
    assert (last["status"], last["scheduled_for"]) == ("SUCCEEDED", "2026-11-30T12:00:10.000+00:00")
    assert last["run_id"].startswith(first) and last["finished_at"] is not None
    assert page["items_read"] == 2


def test_filters_order_and_the_cursor(world: World) -> None:
    app = api(world)
    nightly = submit(app, name="nightly-report", cron_expr="0 2 * * *", tags={"env": "prod"})
    world.clock.advance(1)
    hourly = submit(app, name="hourly-sync", tags={"env": "dev"})
    world.clock.advance(1)
    paused = submit(app, name="nightly-backup", cron_expr="30 * * * *")
    assert call(app, "POST", f"/api/jobs/{paused}/pause", headers=A)[0] == 200

    def listing(query: str) -> list[str]:
        status, page = call(app, "GET", f"/api/jobs?{query}", headers=A)
        assert status == 200, page
        return ids(page)

    assert listing("name_prefix=nightly") == [paused, nightly]
    assert listing("tag=env:prod") == [nightly]
    assert listing("status=PAUSED") == [paused]
    assert listing("type=recurring&target=python") == [paused, hourly, nightly]
    assert listing("target=http") == []
    assert listing("order=next_run") == [hourly, nightly]  # the paused job has no pending tick
    # Pages of one, followed by their cursors, list every job once
    seen, cursor = [], ""
    while True:
        _, page = call(app, "GET", f"/api/jobs?limit=1{cursor}", headers=A)
        seen += ids(page)
        if page["next_cursor"] is None:
            break
        cursor = f"&cursor={page['next_cursor']}"
    assert seen == [paused, hourly, nightly]


def test_bad_listing_parameters_are_a_400_naming_the_parameter(world: World) -> None:
    app = api(world)
    for query, name in (
        ("status=RUNNING", "status"),
        ("type=weekly", "type"),
        ("tag=novalue", "tag"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("order=oldest", "order"),
        ("cursor=bm90LWEtY3Vyc29y", "cursor"),
    ):
        status, answer = call(app, "GET", f"/api/jobs?{query}", headers=A)
        assert status == 400 and answer["error"]["message"].startswith(name), (query, answer)


def test_a_cursor_of_another_tenant_is_refused(world: World) -> None:
    app = api(world)
    submit(app)
    submit(app)
    _, page = call(app, "GET", "/api/jobs?limit=1", headers=A)
    status, answer = call(app, "GET", f"/api/jobs?cursor={page['next_cursor']}", headers=B)
    assert status == 400 and answer["error"]["message"].startswith("cursor"), answer


def test_tags_are_set_at_create_replaced_by_patch_and_limited(world: World) -> None:
    app = api(world)
    job_id = submit(app, tags={"env": "dev"})
    status, job = call(app, "PATCH", f"/api/jobs/{job_id}", headers=A, body={"tags": {"env": "prod"}})
    assert status == 200 and job["tags"] == {"env": "prod"}, job
    assert ids(call(app, "GET", "/api/jobs?tag=env:prod", headers=A)[1]) == [job_id]
    for bad in ({"a:b": "x"}, {"k": "x" * 257}, {f"k{i}": "v" for i in range(21)}):
        status, answer = call(
            app,
            "POST",
            "/api/jobs",
            headers=A,
            body={"type": "recurring", "cron_expr": "* * * * *", "handler": "demo.echo", "tags": bad},
        )
        assert status == 400 and "tags" in answer["error"]["message"], answer
    assert call(app, "PATCH", f"/api/jobs/{job_id}", headers=A, body={"tags": None})[0] == 400


def test_a_bulk_action_answers_one_result_per_job_and_another_tenants_job_is_not_found(world: World) -> None:
    # Given two jobs of A and one of B
    app = api(world)
    mine = [submit(app), submit(app)]
    theirs = submit(app, B)
    # When A pauses all three by id
    status, answer = call(
        app, "POST", "/api/jobs/actions", headers=A, body={"action": "pause", "job_ids": [*mine, theirs]}
    )
    # Then its own are PAUSED, B's is a not_found result (and stays SCHEDULED)
    assert status == 200, answer
    assert [(i["job_id"], i["ok"], i["status"]) for i in answer["items"]] == [
        (mine[0], True, "PAUSED"),
        (mine[1], True, "PAUSED"),
        (theirs, False, None),
    ]
    assert answer["items"][2]["error"]["code"] == "not_found"
    assert (answer["succeeded"], answer["failed"]) == (2, 1)
    assert call(app, "GET", f"/api/jobs/{theirs}", headers=B)[1]["status"] == "SCHEDULED"
    # When A resumes by filter, then both come back
    status, answer = call(
        app, "POST", "/api/jobs/actions", headers=A, body={"action": "resume", "filter": {"status": "PAUSED"}}
    )
    assert status == 200 and answer["succeeded"] == 2, answer
    # And run_now answers each queued run's id; cancel cancels
    status, answer = call(
        app, "POST", "/api/jobs/actions", headers=A, body={"action": "run_now", "job_ids": mine}
    )
    assert all(i["run_id"].startswith(i["job_id"]) for i in answer["items"]), answer
    status, answer = call(
        app, "POST", "/api/jobs/actions", headers=A, body={"action": "cancel", "job_ids": mine}
    )
    assert [i["status"] for i in answer["items"]] == ["CANCELLED", "CANCELLED"], answer


def test_a_bulk_action_over_100_jobs_is_a_400(world: World) -> None:
    app = api(world)
    many = [f"job_{i:026d}" for i in range(101)]
    status, answer = call(
        app, "POST", "/api/jobs/actions", headers=A, body={"action": "pause", "job_ids": many}
    )
    assert status == 400 and answer["error"]["message"].startswith("job_ids"), answer
    for _ in range(101):
        submit(app)
    status, answer = call(app, "POST", "/api/jobs/actions", headers=A, body={"action": "pause", "filter": {}})
    assert status == 400 and answer["error"]["message"].startswith("filter"), answer
    status, answer = call(app, "POST", "/api/jobs/actions", headers=A, body={"action": "pause"})
    assert status == 400, answer
    status, answer = call(
        app, "POST", "/api/jobs/actions", headers=A, body={"action": "explode", "job_ids": many[:1]}
    )
    assert status == 400 and answer["error"]["message"].startswith("action"), answer


# -- GET /api/jobs/counts: the counts per status the console's Jobs page shows ---------------------
def test_counts_per_status_cover_all_the_callers_jobs_not_one_page_and_no_other_tenants(
    world: World,
) -> None:
    # Given 25 jobs of tenant A (more than a 20-job page), 3 of them paused, and 2 jobs of tenant B
    app = api(world)
    mine = [submit(app, name=f"job-{i:02d}") for i in range(25)]
    for job_id in mine[:3]:
        assert call(app, "POST", f"/api/jobs/{job_id}/pause", headers=A)[0] == 200
    submit(app, B, name="theirs")
    submit(app, B, name="theirs-too")
    # When A asks for its counts
    status, answer = call(app, "GET", "/api/jobs/counts", headers=A)
    # Then every status is answered, over all 25 jobs and none of B's, and the count is complete
    assert status == 200, answer
    assert answer["counts"] == {"SCHEDULED": 22, "COMPLETED": 0, "FAILED": 0, "CANCELLED": 0, "PAUSED": 3}
    assert answer["complete"] is True and answer["bound"] == 10_000 and answer["items_read"] == 25
    assert call(app, "GET", "/api/jobs/counts", headers=B)[1]["counts"]["SCHEDULED"] == 2


def test_counts_per_status_take_the_listings_filters(world: World) -> None:
    app = api(world)
    submit(app, name="nightly-a", tags={"env": "prod"})
    submit(app, name="nightly-b")
    submit(app, type="one_off", cron_expr=None, run_at=(T0 + timedelta(hours=1)).isoformat(), name="once")
    for query, scheduled in (("name_prefix=nightly", 2), ("tag=env:prod", 1), ("type=one_off", 1)):
        status, answer = call(app, "GET", f"/api/jobs/counts?{query}", headers=A)
        assert status == 200 and answer["counts"]["SCHEDULED"] == scheduled, (query, answer)
    for query, name in (("type=weekly", "type"), ("tag=novalue", "tag")):
        status, answer = call(app, "GET", f"/api/jobs/counts?{query}", headers=A)
        assert status == 400 and answer["error"]["message"].startswith(name), (query, answer)


def test_counts_per_status_are_in_the_openapi_document(world: World) -> None:
    status, document = call(api(world), "GET", "/api/openapi.json", headers=A)
    assert status == 200 and "get" in document["paths"]["/api/jobs/counts"]
    assert {"counts", "complete", "bound", "items_read"} <= set(
        document["components"]["schemas"]["JobCountsView"]["properties"]
    )
