"""GET /api/alerts: the caller's alerts newest first, `since`, a cursor, never another tenant's."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.api.test_jobs_listing_api import A, B, api, submit
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World


def failing(world: World, headers: dict[str, str], seconds: int) -> str:
    return submit(
        api(world),
        headers,
        type="one_off",
        cron_expr=None,
        handler="demo.fail",
        run_at=(T0 + timedelta(seconds=seconds)).isoformat(),
        alerts={"on": ["failed"]},
    )


def test_the_alerts_list_answers_the_callers_alerts_newest_first_and_never_anothers(world: World) -> None:
    # Given three failing jobs of tenant A and one of tenant B, failing a few seconds apart
    app = api(world)
    mine = [failing(world, A, s) for s in (5, 6, 7)]
    theirs = failing(world, B, 8)
    for second in (5, 6, 7, 8):
        world.clock.set(T0 + timedelta(seconds=second))
        world.deliver()
    # When A lists its alerts two at a time
    status, first = call(app, "GET", "/api/alerts?limit=2", headers=A)
    assert status == 200, first
    _, second = call(app, "GET", f"/api/alerts?limit=2&cursor={first['next_cursor']}", headers=A)
    # Then it sees its three, newest first, each naming its run, kind and time
    items = first["items"] + second["items"]
    assert [i["job_id"] for i in items] == mine[::-1] and {i["kind"] for i in items} == {"failed"}
    assert all(i["run_id"].startswith(i["job_id"]) and i["at"].endswith("+00:00") for i in items)
    assert (
        second.get("next_cursor") is None
        or call(app, "GET", f"/api/alerts?cursor={second['next_cursor']}", headers=A)[1]["items"] == []
    )
    # and B sees only its own
    _, other = call(app, "GET", "/api/alerts", headers=B)
    assert [i["job_id"] for i in other["items"]] == [theirs]
    # and A's cursor is refused to B (it names A's partition)
    status, refused = call(app, "GET", f"/api/alerts?cursor={first['next_cursor']}", headers=B)
    assert status == 400 and refused["error"]["message"].startswith("cursor:")


def test_since_keeps_the_alerts_raised_at_or_after_it(world: World) -> None:
    # Given two alerts of tenant A, raised at T0+5 s and T0+60 s
    app = api(world)
    failing(world, A, 5)
    failing(world, A, 60)
    world.clock.advance(5)
    world.deliver()
    world.clock.advance(55)
    world.deliver()
    # When A asks for those since T0+30 s
    since = (T0 + timedelta(seconds=30)).isoformat().replace("+", "%2B")
    status, page = call(app, "GET", f"/api/alerts?since={since}", headers=A)
    # Then only the later one
    assert status == 200 and len(page["items"]) == 1
    assert page["items"][0]["at"] == "2026-11-30T12:01:00.000+00:00"


def test_a_bad_since_or_limit_is_a_400_naming_it(world: World) -> None:
    app = api(world)
    for query, field in (
        ("since=yesterday", "since"),
        ("since=2026-11-30T12:00:00", "since"),
        ("limit=0", "limit"),
    ):
        status, answer = call(app, "GET", f"/api/alerts?{query}", headers=A)
        assert status == 400 and answer["error"]["message"].startswith(f"{field}:"), (query, answer)
