"""The worker API (jobsched.api.workers) over the real services on the fakes: a worker-pool job
submitted over the API, handed off by the worker Lambda's run, placed by best fit, and reported on
by the worker that holds it; tenant-scoped throughout."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.adapters.memory import MemoryWorkerStore
from jobsched.api import build_app
from jobsched.pools import connect, pools_over
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}


def api(world: World) -> APIGatewayRestResolver:
    pools = connect(world.svc, pools_over(world.svc, MemoryWorkerStore()))
    return build_app(
        world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header", pools=pools
    )


def register(app: APIGatewayRestResolver, cpu: int, *, headers: dict[str, str] = A) -> str:
    body = {"pool": "gpu", "capacity": {"cpu": cpu, "memory_mib": 16_384, "gpus": 1}, "labels": {"zone": "a"}}
    status, worker = call(app, "POST", "/api/workers", headers=headers, body=body)
    assert status == 201, worker
    return str(worker["worker_id"])


def pool_job(app: APIGatewayRestResolver, *, cpu: int) -> str:
    body = {
        "type": "one_off",
        "run_at": (T0 + timedelta(seconds=30)).isoformat(),
        "target": {"type": "worker", "pool": "gpu", "handler": "mypkg.train", "labels": {"zone": "a"}},
        "resources": {"cpu": cpu, "memory_mib": 1024, "gpus": 1},
        "payload": {"epochs": 3},
    }
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    return str(created["job_id"])


def poll(app: APIGatewayRestResolver, worker_id: str) -> list[dict[str, Any]]:
    status, answer = call(app, "POST", f"/api/workers/{worker_id}/poll", headers=A, body={"wait_seconds": 0})
    assert status == 200, answer
    return list(answer["runs"])


def report(
    app: APIGatewayRestResolver, run_id: str, what: str, worker_id: str, **extra: Any
) -> dict[str, Any]:
    status, answer = call(
        app, "POST", f"/api/runs/{run_id}/{what}", headers=A, body={"worker_id": worker_id, **extra}
    )
    assert status == 200, answer
    return dict(answer)


def test_a_worker_pool_run_goes_from_the_api_to_the_tightest_worker_and_finishes_once(world: World) -> None:
    # Given two workers of 8 and 2 vCPUs and a due worker-pool job that needs 2
    app = api(world)
    job_id = pool_job(app, cpu=2048)
    world.clock.advance(31)
    assert world.deliver() == ["handed_off"]
    big, small = register(app, 8192), register(app, 2048)
    # When both poll
    assert poll(app, big) == []
    [run] = poll(app, small)
    # Then the small worker got it, with its handler, payload and effect key
    assert (run["job_id"], run["handler"], run["payload"], run["attempt"]) == (
        job_id,
        "mypkg.train",
        {"epochs": 3},
        1,
    )
    assert run["effect_key"] == run["run_id"]
    # When it acks, starts and finishes, and sends finished again
    assert report(app, run["run_id"], "ack", small)["status"] == "LEASED"
    assert report(app, run["run_id"], "started", small)["status"] == "RUNNING"
    assert report(app, run["run_id"], "heartbeat", small)["applied"]
    done = report(app, run["run_id"], "finished", small, result={"loss": 0.1})
    again = report(app, run["run_id"], "finished", small, error={"type": "Boom", "message": "late"})
    # Then the run SUCCEEDED once under that worker, and the duplicate changed nothing
    assert (done["applied"], done["status"], done["worker"]) == (True, "SUCCEEDED", small)
    assert (again["applied"], again["status"], again["attempt"]) == (False, "SUCCEEDED", 1)
    status, got = call(app, "GET", f"/api/runs/{run['run_id']}", headers=A)
    assert status == 200 and got["status"] == "SUCCEEDED" and got["result"] == {"loss": 0.1}
    # And the one-off's job is COMPLETED, as for a run of the worker function
    status, job = call(app, "GET", f"/api/jobs/{job_id}", headers=A)
    assert status == 200 and job["status"] == "COMPLETED", job


def _running(world: World, app: APIGatewayRestResolver, **patch: Any) -> tuple[str, str]:
    """A due worker-pool run (its job PATCHed with `patch`), acknowledged and started by the one
    worker: (its run id, the worker)."""
    job_id = pool_job(app, cpu=2048)
    if patch:
        status, answer = call(app, "PATCH", f"/api/jobs/{job_id}", headers=A, body=patch)
        assert status == 200, answer
    world.clock.advance(31)
    assert world.deliver() == ["handed_off"]
    worker = register(app, 2048)
    [run] = poll(app, worker)
    report(app, run["run_id"], "ack", worker)
    report(app, run["run_id"], "started", worker)
    return str(run["run_id"]), worker


def test_a_failed_attempt_on_a_worker_is_handed_to_the_failure_workflow_once(world: World) -> None:
    # Given a worker-pool run running on its worker (max_attempts 3 by default)
    app = api(world)
    run_id, worker = _running(world, app)
    # When the worker reports it failed, then reports it again (a retry of its report)
    failed = report(app, run_id, "finished", worker, error={"type": "Boom", "message": "no GPU"})
    report(app, run_id, "finished", worker, error={"type": "Boom", "message": "no GPU"})
    # Then the attempt is FAILED and handed to the failure workflow once, to be retried
    assert (failed["applied"], failed["status"], failed["attempt"]) == (True, "FAILED", 1)
    [handed] = world.machines.started.values()
    assert (handed["attempt"], handed["max_attempts"], handed["retryable"]) == (1, 3, True)


def test_a_failed_attempt_with_a_non_retryable_error_is_handed_over_to_be_dead_lettered(world: World) -> None:
    app = api(world)
    run_id, worker = _running(world, app, non_retryable_errors=["Fatal"])
    report(app, run_id, "finished", worker, error={"type": "Fatal", "message": "bad input"})
    [handed] = world.machines.started.values()
    assert handed["retryable"] is False


def test_the_listing_shows_capacity_free_and_status_and_another_tenants_worker_is_404(world: World) -> None:
    app = api(world)
    mine = register(app, 4096)
    theirs = register(app, 4096, headers=B)
    status, page = call(app, "GET", "/api/workers?pool=gpu", headers=A)
    assert status == 200
    [item] = page["items"]
    assert (item["worker_id"], item["status"], item["free"]["cpu"], item["labels"]) == (
        mine,
        "ALIVE",
        4096,
        {"zone": "a"},
    )
    for path in (f"/api/workers/{theirs}/poll", f"/api/workers/{theirs}/heartbeat"):
        status, answer = call(
            app, "POST", path, headers=A, body={"runs": {}} if path.endswith("beat") else {"wait_seconds": 0}
        )
        assert status == 404, (path, answer)


def test_a_heartbeat_of_runs_it_does_not_hold_answers_them_refused(world: World) -> None:
    app = api(world)
    worker = register(app, 4096)
    status, answer = call(
        app, "POST", f"/api/workers/{worker}/heartbeat", headers=A, body={"runs": {"j-1": "RUNNING"}}
    )
    assert status == 200 and answer["refused_runs"] == ["j-1"] and answer["worker"]["status"] == "ALIVE"


def test_a_registration_with_a_bad_capacity_is_a_400(world: World) -> None:
    app = api(world)
    status, answer = call(
        app, "POST", "/api/workers", headers=A, body={"pool": "gpu", "capacity": {"cpu": -1}}
    )
    assert status == 400, answer


def test_a_checkpoint_recorded_by_attempt_1_reaches_attempt_2_through_the_poll(world: World) -> None:
    # Given a worker-pool run running on worker A, which checkpoints and reports its progress
    app = api(world)
    run_id, first = _running(world, app)
    beat = report(app, run_id, "heartbeat", first, progress={"done": 2, "of": 5}, checkpoint={"done": 2})
    assert beat["applied"] and beat["status"] == "RUNNING"
    # When A stops heartbeating (three intervals), and worker B registers and polls
    world.clock.advance(31)
    second = register(app, 2048)
    [again] = poll(app, second)
    # Then B gets attempt 2 of the same run, with attempt 1's checkpoint to resume from
    assert (again["run_id"], again["attempt"], again["last_checkpoint"]) == (run_id, 2, {"done": 2})


def test_a_run_heartbeats_progress_and_checkpoint_are_visible_on_the_run(world: World) -> None:
    # Given a worker-pool run running on its worker
    app = api(world)
    run_id, worker = _running(world, app)
    # When the worker reports a progress, then a checkpoint alone, then a heartbeat with neither
    report(app, run_id, "heartbeat", worker, progress=0.25)
    report(app, run_id, "heartbeat", worker, checkpoint={"step": 7})
    report(app, run_id, "heartbeat", worker)
    # Then GET /api/runs/{id} shows both, each left as it was by the reports that did not carry it
    status, run = call(app, "GET", f"/api/runs/{run_id}", headers=A)
    assert status == 200, run
    assert (run["progress"], run["checkpoint"]) == (0.25, {"step": 7})
    assert run["progress_at"] is not None and run["checkpoint_at"] is not None


def test_a_run_heartbeat_from_a_worker_that_does_not_hold_the_run_changes_nothing(world: World) -> None:
    # Given a run running on its worker, with a checkpoint, and a second worker of the pool
    app = api(world)
    run_id, holder = _running(world, app)
    report(app, run_id, "heartbeat", holder, progress=1, checkpoint={"step": 1})
    other = register(app, 2048)
    # When the other worker reports a progress and a checkpoint for it
    answer = report(app, run_id, "heartbeat", other, progress=99, checkpoint={"step": 99})
    # Then nothing is applied, and the run keeps its holder's progress and checkpoint
    assert (answer["applied"], answer["status"], answer["worker"]) == (False, "RUNNING", holder)
    status, run = call(app, "GET", f"/api/runs/{run_id}", headers=A)
    assert status == 200 and (run["progress"], run["checkpoint"]) == (1, {"step": 1})


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"progress": "x" * 2000}, "progress"),
        ({"checkpoint": {"blob": "x" * (33 * 1024)}}, "checkpoint"),
        ({"checkpoint": {"step": 1}, "extra": 1}, "extra"),
        ({"progress": 1}, "worker_id"),
    ],
)
def test_a_bad_run_heartbeat_is_a_400_naming_the_field_and_keeps_nothing(
    world: World, body: dict[str, Any], named: str
) -> None:
    app = api(world)
    run_id, worker = _running(world, app)
    sent = {"worker_id": worker, **body} if named != "worker_id" else body
    status, answer = call(app, "POST", f"/api/runs/{run_id}/heartbeat", headers=A, body=sent)
    assert status == 400, answer
    assert answer["error"]["message"].startswith(f"{named}:"), answer
    row = call(app, "GET", f"/api/runs/{run_id}", headers=A)[1]
    assert (row["progress"], row["checkpoint"]) == (None, None)


def test_runs_that_fit_no_worker_wait_in_the_pools_queue_visible_oldest_first(world: World) -> None:
    # Given a 2-vCPU worker, and two due runs that need 8 vCPUs and one that fits
    app = api(world)
    big_first, big_second = pool_job(app, cpu=8192), pool_job(app, cpu=8192)
    fits = pool_job(app, cpu=1024)
    world.clock.advance(31)
    assert world.deliver() == ["handed_off"] * 3
    worker = register(app, 2048)
    # When the worker polls (a sweep places what fits)
    [placed] = poll(app, worker)
    assert placed["job_id"] == fits
    # Then the queue lists the two that fit no worker, oldest first, with what they need and since when
    status, page = call(app, "GET", "/api/workers/queue?pool=gpu", headers=A)
    assert status == 200, page
    assert [item["job_id"] for item in page["items"]] == [big_first, big_second]
    [first, _] = page["items"]
    assert first["resources"]["cpu"] == 8192 and first["labels"] == {"zone": "a"}
    assert datetime.fromisoformat(first["scheduled_for"]) == T0 + timedelta(seconds=30)
    assert datetime.fromisoformat(first["waiting_since"]) == T0 + timedelta(seconds=30)
    assert page["next_cursor"] is None
    # And it pages: one at a time, the cursor continuing after the last one
    status, one = call(app, "GET", "/api/workers/queue?pool=gpu&limit=1", headers=A)
    assert status == 200 and [i["job_id"] for i in one["items"]] == [big_first] and one["next_cursor"]
    status, two = call(
        app, "GET", f"/api/workers/queue?pool=gpu&limit=1&cursor={one['next_cursor']}", headers=A
    )
    assert status == 200 and [i["job_id"] for i in two["items"]] == [big_second]
    # And another tenant's queue of the same pool name is empty, and this cursor is not theirs
    status, theirs = call(app, "GET", "/api/workers/queue?pool=gpu", headers=B)
    assert status == 200 and theirs == {"items": [], "next_cursor": None}
    status, refused = call(app, "GET", f"/api/workers/queue?pool=gpu&cursor={one['next_cursor']}", headers=B)
    assert status == 400 and refused["error"]["message"].startswith("cursor:"), refused


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("", "pool"),
        ("?pool=no%20spaces", "pool"),
        ("?pool=gpu&limit=0", "limit"),
        ("?pool=gpu&limit=101", "limit"),
        ("?pool=gpu&cursor=not-a-cursor", "cursor"),
    ],
)
def test_a_bad_queue_query_is_a_400_naming_the_field(world: World, query: str, named: str) -> None:
    app = api(world)
    status, answer = call(app, "GET", f"/api/workers/queue{query}", headers=A)
    assert status == 400, answer
    assert answer["error"]["message"].startswith(f"{named}:"), answer
