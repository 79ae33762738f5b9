"""Packed one-offs (jobsched.domain.packs) through the API, over the fakes: a batch's one-offs share one
item, each runs once from its definition, and anything but its run copies it out to an item of its own
first, after which every promise of an ordinary job holds (cancel, 409 mid-run, edits, listing)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.domain.models import RunMessage
from jobsched.domain.packs import parse_packed
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.handlers import RunContext
from jobsched.ports import Crash
from jobsched.services.run import Delivery, Outcome
from tests.unit.api.test_batch_api import api, one_off
from tests.unit.api.test_limits_api import with_quota
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}


def post_batch(
    app: APIGatewayRestResolver, jobs: list[dict[str, Any]], **headers: str
) -> list[dict[str, Any]]:
    status, body = call(app, "POST", "/api/jobs/batch", headers={**A, **headers}, body={"jobs": jobs})
    assert status == 200, body
    return list(body["items"])


def drain(world: World) -> list[Outcome | str]:
    outcomes: list[Outcome | str] = []
    while delivered := world.deliver():
        outcomes += delivered
    return outcomes


def listed(app: APIGatewayRestResolver, query: str = "") -> dict[str, str]:
    """job_id -> status, every page of the listing followed."""
    seen: dict[str, str] = {}
    cursor = None
    while True:
        path = f"/api/jobs?limit=3{query}" + (f"&cursor={cursor}" if cursor else "")
        status, body = call(app, "GET", path, headers=A)
        assert status == 200, body
        for item in body["items"]:
            assert item["job_id"] not in seen, "a job listed twice"
            seen[item["job_id"]] = item["status"]
        cursor = body["next_cursor"]
        if not cursor:
            return seen


def test_a_batchs_plain_one_offs_share_one_item_and_the_others_are_their_own(world: World) -> None:
    # Given a batch of three plain one-offs, a recurring job and a one-off with its own key
    app = api(world)
    jobs = [
        one_off(30),
        {"type": "recurring", "cron_expr": "*/5 * * * *", "handler": "demo.echo"},
        one_off(3600, name="later"),
        one_off(60, idempotency_key="own"),
        one_off(7200, payload={"to": "x"}),
    ]
    # When it is posted
    items = post_batch(app, jobs)
    # Then the plain one-offs are one pack of three, answered in their places
    assert len(world.jobs.packs) == 1
    (pack,) = world.jobs.packs.values()
    assert [parse_packed(items[i]["job_id"]) for i in (0, 2, 4)] == [(pack.pack_id, i) for i in (0, 2, 4)]
    assert items[2]["next_run_at"] == (T0 + timedelta(seconds=3600)).isoformat().replace(
        "+00:00", ".000+00:00"
    )
    # and only the recurring job and the keyed one-off have items of their own
    assert sorted(world.jobs.jobs) == sorted([items[1]["job_id"], items[3]["job_id"]])
    # and the listing shows all five
    assert set(listed(app)) == {item["job_id"] for item in items}


def test_a_packed_one_off_runs_once_from_its_message_and_its_run_row_is_its_status(world: World) -> None:
    # Given two one-offs due within the look-ahead and one due in 5 minutes, packed
    app = api(world)
    calls: list[dict[str, Any]] = []
    world.handler("t.note", lambda payload, ctx: calls.append(payload))
    items = post_batch(
        app,
        [one_off(30, handler="t.note", payload={"n": n}) for n in (1, 2)] + [one_off(300, handler="t.note")],
    )
    # When their seconds come (the late one handed over by a dispatcher pass) and the queue drains
    world.clock.advance(40)
    assert drain(world) == [Outcome.SUCCEEDED] * 2
    world.clock.advance(230)
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(40)
    assert drain(world) == [Outcome.SUCCEEDED]
    # Then each ran once, with its payload, and no job item was ever written
    assert sorted(json.dumps(c) for c in calls) == ['{"n": 1}', '{"n": 2}', "{}"]
    assert world.jobs.jobs == {}
    # and the listing and the runs say COMPLETED / SUCCEEDED
    assert set(listed(app).values()) == {"COMPLETED"}
    assert all(r.status == RunStatus.SUCCEEDED and r.attempt == 1 for r in world.runs.rows.values())
    assert len(world.runs.rows) == len(items)


def test_a_packed_runs_second_message_is_a_duplicate(world: World) -> None:
    # Given a packed one-off whose hand-over happened twice (a create's, then a pass that found its
    # cursor before the create's stamp: the same message twice)
    app = api(world)
    post_batch(app, [one_off(30)])
    (pack,) = world.jobs.packs.values()
    world.svc.dispatcher.hand_over_pack(pack, now=world.clock.now())
    # When both are delivered
    world.clock.advance(40)
    outcomes = drain(world)
    # Then it ran once
    assert sorted(map(str, outcomes)) == sorted([str(Outcome.SUCCEEDED), str(Outcome.DUPLICATE)])


def test_cancelling_a_packed_one_off_copies_it_out_and_its_run_never_starts(world: World) -> None:
    # Given a packed one-off due in 30 s, its message queued
    app = api(world)
    ran: list[str] = []
    world.handler("t.ran", lambda payload, ctx: ran.append(ctx.run_id))
    (item,) = post_batch(app, [one_off(30, handler="t.ran")])
    # When it is cancelled before its second
    status, body = call(app, "DELETE", f"/api/jobs/{item['job_id']}", headers=A)
    assert status == 200 and body["status"] == "CANCELLED", body
    # Then it has an item of its own, CANCELLED, and its run row is flagged and CANCELLED
    assert world.jobs.jobs[item["job_id"]].status == JobStatus.CANCELLED
    (row,) = world.runs.rows.values()
    assert row.materialized and row.status == RunStatus.CANCELLED
    # and its message, delivered at its second, runs nothing
    world.clock.advance(40)
    drain(world)
    assert ran == []
    assert call(app, "GET", f"/api/jobs/{item['job_id']}", headers=A)[1]["status"] == "CANCELLED"


def test_a_cancel_while_a_packed_run_runs_is_a_409_and_the_run_completes_its_job(world: World) -> None:
    # Given a packed one-off whose handler asks to cancel its own job while it runs
    app = api(world)
    answers: list[tuple[int, Any]] = []

    def cancels_itself(payload: dict[str, Any], ctx: RunContext) -> None:
        answers.append(call(app, "DELETE", f"/api/jobs/{ctx.job_id}", headers=A))

    world.handler("t.cancels", cancels_itself)
    (item,) = post_batch(app, [one_off(30, handler="t.cancels")])
    # When it runs
    world.clock.advance(40)
    assert drain(world) == [Outcome.SUCCEEDED]
    # Then the cancel, which copied the job out mid-run, was refused: the run had started
    ((status, body),) = answers
    assert status == 409, body
    # and the run's end settled the copied-out job: COMPLETED, one run
    assert world.jobs.jobs[item["job_id"]].status == JobStatus.COMPLETED
    _, job = call(app, "GET", f"/api/jobs/{item['job_id']}", headers=A)
    assert job["status"] == "COMPLETED" and [r["status"] for r in job["recent_executions"]] == ["SUCCEEDED"]


def test_a_packed_one_off_read_before_its_run_runs_once_on_its_own_item(world: World) -> None:
    # Given a packed one-off due in 5 minutes, read through the API (copied out: due on its own item)
    app = api(world)
    calls: list[str] = []
    world.handler("t.once", lambda payload, ctx: calls.append(ctx.run_id))
    (item,) = post_batch(app, [one_off(300, handler="t.once")])
    status, job = call(app, "GET", f"/api/jobs/{item['job_id']}", headers=A)
    assert status == 200 and job["status"] == "SCHEDULED" and job["next_run_at"] == item["next_run_at"]
    # When passes hand it over (the pack's cursor and the job's own due entry: two messages)
    for _ in range(6):
        world.clock.advance(60)
        world.svc.dispatcher.dispatch_all()
        drain(world)
    # Then it ran once, and its own item says COMPLETED
    assert len(calls) == 1
    assert world.jobs.jobs[item["job_id"]].status == JobStatus.COMPLETED


def test_pausing_a_packed_one_off_holds_its_run_until_it_is_resumed(world: World) -> None:
    # Given a packed one-off due in 60 s, paused before then
    app = api(world)
    calls: list[str] = []
    world.handler("t.paused", lambda payload, ctx: calls.append(ctx.run_id))
    (item,) = post_batch(app, [one_off(60, handler="t.paused")])
    assert call(app, "POST", f"/api/jobs/{item['job_id']}/pause", headers=A)[0] == 200
    # When its second passes
    world.clock.advance(70)
    world.svc.dispatcher.dispatch_all()
    drain(world)
    # Then it did not run; resumed, it runs once
    assert calls == []
    assert call(app, "POST", f"/api/jobs/{item['job_id']}/resume", headers=A)[0] == 200
    for _ in range(3):
        world.svc.dispatcher.dispatch_all()
        world.clock.advance(30)
        drain(world)
    assert len(calls) == 1


def test_a_batch_retried_with_its_key_writes_its_pack_once_and_another_body_is_a_409(world: World) -> None:
    # Given a batch posted with an Idempotency-Key: two one-offs and a recurring job
    app = api(world)
    jobs = [
        one_off(30),
        one_off(600),
        {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"},
    ]
    first = post_batch(app, jobs, **{"Idempotency-Key": "batch-1"})
    # When it is posted again with the same key, and then with another body
    again = post_batch(app, jobs, **{"Idempotency-Key": "batch-1"})
    changed = post_batch(app, [one_off(31), *jobs[1:]], **{"Idempotency-Key": "batch-1"})
    # Then the retry answered the first results and wrote nothing more
    assert again == first
    assert len(world.jobs.packs) == 1 and len(world.jobs.jobs) == 1
    # and the changed batch's packed jobs are 409s, naming the key
    assert changed[0]["error"]["code"] == "idempotency_key_reused"
    assert len(listed(app)) == 3


def test_the_listing_pages_through_a_packs_jobs_filters_them_and_counts_them(world: World) -> None:
    # Given a pack of seven one-offs, three of which have run
    app = api(world)
    items = post_batch(app, [one_off(30 if i < 3 else 3600, name=f"n{i}") for i in range(7)])
    world.clock.advance(40)
    assert drain(world) == [Outcome.SUCCEEDED] * 3
    # When it is listed three at a time, whole and by status
    everything = listed(app)
    done = listed(app, "&status=COMPLETED")
    named = listed(app, "&name_prefix=n6")
    # Then every job is listed once, each filter keeps its own
    assert set(everything) == {i["job_id"] for i in items}
    assert set(done) == {i["job_id"] for i in items[:3]}
    assert set(named) == {items[6]["job_id"]}
    # and the counts count them by status
    status, counts = call(app, "GET", "/api/jobs/counts", headers=A)
    assert status == 200, counts
    assert counts["counts"]["COMPLETED"] == 3 and counts["counts"]["SCHEDULED"] == 4


def test_max_jobs_counts_a_packs_jobs(world: World) -> None:
    # Given a tenant allowed five live jobs
    with_quota(world, max_jobs=5)
    app = api(world)
    # When it posts a batch of seven one-offs
    items = post_batch(app, [one_off(3600 + i) for i in range(7)])
    # Then five are created and two are refused for the quota
    assert ["job_id" in i for i in items] == [True] * 5 + [False] * 2
    assert items[5]["error"]["code"] == "quota_exceeded"
    # and a later create is refused too: the pack's jobs count as live
    status, _ = call(app, "POST", "/api/jobs", headers=A, body=one_off(90))
    assert status == 429


def test_a_failed_packed_run_goes_to_the_workflow_with_its_definition(world: World) -> None:
    # Given a packed one-off whose handler fails
    app = api(world)

    def fails(payload: dict[str, Any], ctx: RunContext) -> None:
        raise RuntimeError("boom")

    world.handler("t.fails", fails)
    (item,) = post_batch(app, [one_off(30, handler="t.fails")])
    # When it runs
    world.clock.advance(40)
    assert drain(world) == [Outcome.FAILED]
    # Then its row is FAILED and the failure workflow's retry message carries the definition
    (row,) = world.runs.rows.values()
    assert row.status == RunStatus.FAILED and row.attempt == 1
    (payload,) = world.machines.started.values()
    retry = json.loads(payload["message"])
    assert retry["job_id"] == item["job_id"] and retry["packed"]["target"]["handler"] == "t.fails"
    assert payload["job_run"] is True  # FailJob conditions on the job item: nothing for a packed job
    # and the job still says SCHEDULED (a retry is coming) without an item of its own
    assert world.jobs.jobs == {}
    assert listed(app) == {item["job_id"]: "SCHEDULED"}


def test_a_packed_one_off_paused_after_its_second_runs_and_completes(world: World) -> None:
    # Given a packed one-off due at 12:00:30, its message queued, paused at 12:00:30.5 (copied out:
    # its item has its tick pending, so the pause is taken; a tick due before a pause still runs)
    app = api(world)
    (item,) = post_batch(app, [one_off(30)])
    world.clock.set(T0 + timedelta(seconds=30.5))
    assert call(app, "POST", f"/api/jobs/{item['job_id']}/pause", headers=A)[0] == 200
    # When its message is delivered
    assert drain(world) == [Outcome.SUCCEEDED]
    # Then the job is COMPLETED (before: PAUSED, then SCHEDULED for good after a resume: tests/sim
    # seed 352), and a resume leaves it so
    assert world.jobs.jobs[item["job_id"]].status == JobStatus.COMPLETED
    call(app, "POST", f"/api/jobs/{item['job_id']}/resume", headers=A)
    assert world.jobs.jobs[item["job_id"]].status == JobStatus.COMPLETED


def test_the_reconciler_dead_letters_a_packed_poison_message_from_its_definition(world: World) -> None:
    # Given a packed one-off whose worker died holding its run (its start written, no record)
    app = api(world)
    post_batch(app, [one_off(30)])
    world.clock.advance(40)
    (message,) = world.queue.receive()

    def dies(point: str) -> None:
        if point == "run.after_lease":
            raise Crash(point)

    world.svc.worker.crash = dies
    with pytest.raises(Crash):
        world.svc.worker.process(Delivery(message.message_id, message.receipt_handle, message.body))
    # When SQS gives up on its message and the reconciler gets it
    outcome = world.svc.failures.reconcile(RunMessage.model_validate_json(message.body))
    # Then the run is failed and handed to the workflow, from the message's definition alone: the job
    # was not copied out (the reconciler reads no job and writes none)
    assert outcome == "dead_lettered"
    (row,) = world.runs.rows.values()
    assert row.status == RunStatus.FAILED and not row.materialized
    assert world.jobs.jobs == {}
    assert [p["retryable"] for p in world.machines.started.values()] == [False]


def test_another_tenants_read_of_a_packed_job_is_a_404_and_copies_nothing_out(world: World) -> None:
    # Given team-a's packed one-off
    app = api(world)
    (item,) = post_batch(app, [one_off(300)])
    job_id = item["job_id"]
    # When team-b reads it, edits it, cancels it, replays a run of it, and names it as an upstream
    other = {"X-Tenant": "team-b"}
    answers = [
        call(app, "GET", f"/api/jobs/{job_id}", headers=other)[0],
        call(app, "POST", f"/api/jobs/{job_id}/pause", headers=other)[0],
        call(app, "DELETE", f"/api/jobs/{job_id}", headers=other)[0],
        call(app, "POST", f"/api/dead-letter/{job_id}-1/replay", headers=other)[0],
    ]
    dependant = {"type": "dependent", "handler": "demo.echo", "depends_on": [job_id]}
    status, body = call(app, "POST", "/api/jobs", headers=other, body=dependant)
    # Then each is a 404 (the upstream a 400 naming it), and the job was not copied out
    assert answers == [404] * 4
    assert status == 400 and "depends_on" in body["error"]["message"]
    assert world.jobs.jobs == {} and world.runs.rows == {}
    # while its own tenant reads it
    assert call(app, "GET", f"/api/jobs/{job_id}", headers=A)[0] == 200


def test_the_tenants_stats_count_packed_jobs_in_its_backlog_and_sample(world: World) -> None:
    # Given a pack of three one-offs due in 4 to 6 minutes, one of which has run, and no pass since
    app = api(world)
    post_batch(app, [one_off(30), one_off(240), one_off(360)])
    world.clock.advance(40)
    assert drain(world) == [Outcome.SUCCEEDED]
    # When the dispatcher stays away past their seconds, and the tenant asks for its stats
    world.clock.set(T0 + timedelta(minutes=7))
    status, stats = call(app, "GET", "/api/stats", headers=A)
    # Then the two not handed over are its backlog, due since the first of them
    assert status == 200, stats
    assert stats["backlog"] == 2
    assert stats["oldest_due"] == (T0 + timedelta(seconds=240)).isoformat(timespec="milliseconds")
    # and its sample holds the packed jobs and the run that ran
    assert stats["sampled_jobs"] == 3 and stats["by_status"] == {"SUCCEEDED": 1}


def test_a_batch_retried_with_its_key_at_the_quota_its_pack_filled_answers_as_the_first_time(
    world: World,
) -> None:
    # Given a tenant allowed five live jobs, and a batch of five one-offs that filled it, with a key
    with_quota(world, max_jobs=5)
    app = api(world)
    jobs = [one_off(3600 + i) for i in range(5)]
    first = post_batch(app, jobs, **{"Idempotency-Key": "fill"})
    assert all("job_id" in i for i in first)
    # When the client retries it (its answer was lost)
    again = post_batch(app, jobs, **{"Idempotency-Key": "fill"})
    # Then it answers the first answers, not 429s: the pack is the key's, its jobs are not new
    assert again == first


def test_a_batch_retried_with_its_key_keeps_the_answers_the_quota_gave_its_first_try(world: World) -> None:
    # Given a tenant allowed two live jobs, and a batch of three one-offs with a key: two created, one 429
    with_quota(world, max_jobs=2)
    app = api(world)
    jobs = [one_off(3600 + i) for i in range(3)]
    first = post_batch(app, jobs, **{"Idempotency-Key": "two"})
    assert ["job_id" in i for i in first] == [True, True, False]
    # When the client retries it
    again = post_batch(app, jobs, **{"Idempotency-Key": "two"})
    # Then it answers as the first time, one answer per job, in order
    assert [("job_id" in i, i.get("job_id")) for i in again] == [
        ("job_id" in i, i.get("job_id")) for i in first
    ]
    assert again[2]["error"]["code"] == "quota_exceeded"


def test_a_packed_job_whose_run_row_expired_is_gone_not_scheduled_again(world: World) -> None:
    # Given a packed one-off that ran, and whose run row expired with the run history (90 days)
    app = api(world)
    ran: list[str] = []
    world.handler("t.once", lambda payload, ctx: ran.append(ctx.run_id))
    (item,) = post_batch(app, [one_off(30, handler="t.once")])
    world.clock.advance(40)
    assert drain(world) == [Outcome.SUCCEEDED]
    world.runs.rows.clear()  # the runs table's TTL
    world.clock.advance(91 * 24 * 3600)
    # When it is read and listed, and passes run
    status, _ = call(app, "GET", f"/api/jobs/{item['job_id']}", headers=A)
    for _ in range(3):
        world.svc.dispatcher.dispatch_all()
        world.clock.advance(60)
        drain(world)
    # Then it is not found (not copied out SCHEDULED), not listed, and did not run again
    assert status == 404
    assert listed(app) == {}
    assert ran == [ran[0]] and world.jobs.jobs == {}


def test_a_packed_jobs_failure_after_it_was_copied_out_reaches_its_new_dependant(world: World) -> None:
    # Given a packed one-off (one attempt) whose handler, while it runs, gets a dependant created on it
    app = api(world)
    created: list[tuple[int, Any]] = []

    def fails_after_a_dependant(payload: dict[str, Any], ctx: RunContext) -> None:
        dependant = {"type": "dependent", "handler": "demo.echo", "depends_on": [ctx.job_id]}
        created.append(call(app, "POST", "/api/jobs", headers=A, body=dependant))
        raise RuntimeError("boom")

    world.handler("t.fails", fails_after_a_dependant)
    (item,) = post_batch(app, [one_off(30, handler="t.fails", max_attempts=1)])
    # When it runs and fails
    world.clock.advance(40)
    assert drain(world) == [Outcome.FAILED]
    # Then the failure's workflow names the dependant to mark UPSTREAM_FAILED (its item's dependants)
    ((status, body),) = created
    assert status == 201, body
    (payload,) = world.machines.started.values()
    assert [p["job_id"] for p in payload["propagate"]] == [body["job_id"]]
    assert item["job_id"] in world.jobs.jobs


def test_a_copy_out_between_two_pages_makes_no_job_of_the_pack_go_missing(world: World) -> None:
    # Given a pack of six one-offs, listed three at a time: the first page read
    app = api(world)
    items = post_batch(app, [one_off(3600 + i) for i in range(6)])
    status, first = call(app, "GET", "/api/jobs?limit=3", headers=A)
    assert status == 200 and len(first["items"]) == 3
    # When one of the first page's jobs is copied out (read by id) before the next page
    assert call(app, "GET", f"/api/jobs/{first['items'][0]['job_id']}", headers=A)[0] == 200
    seen = {i["job_id"] for i in first["items"]}
    cursor = first["next_cursor"]
    while cursor:
        status, page = call(app, "GET", f"/api/jobs?limit=3&cursor={cursor}", headers=A)
        assert status == 200, page
        seen |= {i["job_id"] for i in page["items"]}
        cursor = page["next_cursor"]
    # Then every job of the pack was listed (before, the skip counted places in the shrunk list)
    assert seen == {i["job_id"] for i in items}


def test_a_cursor_this_api_did_not_issue_is_a_400_naming_it(world: World) -> None:
    import base64

    app = api(world)
    forged = {"tenant": "team-a", "SK": "META", "pack": "x", "skip": "\\u00b2"}
    raw = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
    status, body = call(app, "GET", f"/api/jobs?cursor={raw}", headers=A)
    assert status == 400 and body["error"]["message"].startswith("cursor: "), body
