"""Long-job helpers (issue 11 item 5), on the in-memory fakes: ctx.heartbeat(progress) shows on the
run, ctx.checkpoint(state) is kept with it, and the attempt after a lost worker resumes from it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.api import build_app
from jobsched.domain import times
from jobsched.handlers import MAX_CHECKPOINT_BYTES, MAX_PROGRESS_BYTES, RunContext
from jobsched.ports import Crash
from jobsched.services.run import Outcome
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}


def one_off(world: World, handler: str, **fields: Any) -> str:
    app = api(world)
    run_at = (T0 + timedelta(seconds=5)).isoformat()
    body = {"type": "one_off", "handler": handler, "run_at": run_at, **fields}
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    return str(created["job_id"])


def api(world: World) -> Any:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def test_a_heartbeat_with_progress_shows_on_the_run_while_it_runs_and_in_its_history(world: World) -> None:
    # Given a handler that reports its progress, and reads its own run back mid-run
    app = api(world)
    seen: dict[str, Any] = {}

    def reporting(payload: dict[str, Any], ctx: RunContext) -> str:
        world.clock.advance(2)
        ctx.heartbeat(progress={"done": 3, "of": 10})
        seen["mid_run"] = call(app, "GET", f"/api/runs/{ctx.run_id}", headers=A)[1]
        world.clock.advance(2)
        ctx.heartbeat(progress=0.7)
        return "done"

    world.handler("t.reporting", reporting)
    job_id = one_off(world, "t.reporting")
    world.clock.advance(5)
    # When it runs
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then mid-run, GET /api/runs/{id} showed it RUNNING with its progress and when it came
    mid = seen["mid_run"]
    assert (mid["status"], mid["progress"]) == ("RUNNING", {"done": 3, "of": 10}), mid
    assert mid["progress_at"] == times.iso(T0 + timedelta(seconds=7))
    # And after it, the run and its job's history show the last progress
    [row] = world.runs.recent(job_id, limit=1)
    run = call(app, "GET", f"/api/runs/{row.run_id}", headers=A)[1]
    assert (run["status"], run["progress"], run["checkpoint"]) == ("SUCCEEDED", 0.7, None), run
    history = call(app, "GET", f"/api/jobs/{job_id}/runs", headers=A)[1]
    assert [(r["run_id"], r["progress"]) for r in history["items"]] == [(row.run_id, 0.7)]


def test_a_checkpointed_run_whose_worker_dies_resumes_from_its_checkpoint_on_the_next_attempt(
    world: World,
) -> None:
    # Given a run of five steps that checkpoints after each, and whose first worker dies after step 3
    starts: list[tuple[int, Any]] = []

    def stepping(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        starts.append((ctx.attempt, ctx.last_checkpoint))
        done = ctx.last_checkpoint["done"] if ctx.last_checkpoint else 0
        for step in range(done, 5):
            world.clock.advance(10)
            assert ctx.checkpoint({"done": step + 1})
            if ctx.attempt == 1 and step + 1 == 3:
                raise Crash("the worker's process dies")
        return {"resumed_from": done}

    world.handler("t.stepping", stepping)
    job_id = one_off(world, "t.stepping")
    world.clock.advance(5)
    with pytest.raises(Crash):
        world.deliver()
    # When its message surfaces again, once the dead worker's leases have lapsed
    world.clock.advance(world.svc.settings.lease_seconds + 1)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then attempt 2 started from the checkpoint attempt 1 kept last, and did only the steps left
    assert starts == [(1, None), (2, {"done": 3})]
    [run] = world.runs.recent(job_id, limit=1)
    assert (run.status.value, run.attempt, run.result) == ("SUCCEEDED", 2, {"resumed_from": 3})
    assert run.checkpoint == {"done": 5}


@pytest.mark.parametrize(
    ("call_helper", "error_type"),
    [
        (lambda ctx: ctx.checkpoint("x" * MAX_CHECKPOINT_BYTES), "CheckpointTooLarge"),
        (lambda ctx: ctx.checkpoint({"not": {1, 2}}), "CheckpointTooLarge"),
        (lambda ctx: ctx.heartbeat(progress="x" * MAX_PROGRESS_BYTES), "ProgressTooLarge"),
    ],
    ids=["checkpoint-too-big", "checkpoint-not-json", "progress-too-big"],
)
def test_a_checkpoint_or_progress_over_its_cap_fails_the_attempt_naming_it_and_keeps_nothing(
    world: World, call_helper: Any, error_type: str
) -> None:
    # Given a handler whose checkpoint (or progress) is too big, or not JSON
    world.handler("t.big", lambda payload, ctx: call_helper(ctx))
    job_id = one_off(world, "t.big", max_attempts=1)
    world.clock.advance(5)
    # When it runs
    assert world.deliver() == [Outcome.FAILED]
    # Then the attempt failed with the helper's error, and nothing was kept on the run
    [run] = world.runs.recent(job_id, limit=1)
    assert run.error is not None and run.error.type == error_type, run.error
    assert (run.checkpoint, run.progress) == (None, None)


def test_a_run_that_calls_no_helper_writes_no_progress_or_checkpoint(world: World) -> None:
    # Given a run of a handler that never calls ctx.heartbeat(progress) or ctx.checkpoint
    writes: list[str] = []
    save = world.runs.save_progress
    world.runs.save_progress = lambda *a, **kw: writes.append("save") or save(*a, **kw)  # type: ignore[method-assign]
    one_off(world, "demo.echo")
    world.clock.advance(5)
    # When it runs
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then no progress or checkpoint write happened
    assert writes == []


def test_a_task_noted_by_a_run_is_kept_on_its_row_once_even_on_the_fast_path(world: World) -> None:
    # Given a target that notes the task it runs twice (as an adopter notes what its dead worker did),
    # on a run whose row is not leased yet (a one-off without overlap: the fast path)
    task = "arn:aws:ecs:us-east-1:123456789012:task/jobsched/0123456789abcdef0123456789abcdef"

    def noting(payload: dict[str, Any], ctx: RunContext) -> str:
        ctx.note_task(task)
        ctx.note_task(task)
        return "done"

    world.handler("t.noting", noting)
    job_id = one_off(world, "t.noting")
    world.clock.advance(5)
    # When it runs
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then its row keeps the task once, after its end
    [row] = world.runs.recent(job_id, limit=1)
    assert row.ecs_tasks == [task]
