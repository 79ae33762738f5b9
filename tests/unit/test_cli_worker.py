"""`jobsched worker` (jobsched.cli.worker) against the real resolver and services on the fakes:
it registers, polls, acknowledges, runs the registry's handler with a RunContext, and reports."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from jobsched.cli.http import Answer
from jobsched.cli.worker import WorkerAgent
from jobsched.domain.keys import run_id_for
from jobsched.handlers import RunContext
from jobsched.ports import Crash
from tests.unit.api.test_tenancy import call
from tests.unit.api.test_workers_api import A, api, pool_job
from tests.unit.services.conftest import T0, World, no_network, world

__all__ = ["no_network", "world"]


def transport(app: Any) -> Any:
    """The agent's API calls on `app`, one at a time (a run's thread and the poll loop share it)."""
    one_at_a_time = threading.Lock()

    def send(method: str, path: str, body: Any) -> Answer:
        with one_at_a_time:
            status, answer = call(app, method, path, headers=A, body=body)
        return Answer(status=status, body=answer, text=json.dumps(answer))

    return send


def interrupted_at(app: Any, when: Any) -> tuple[Any, list[str]]:
    """A transport that raises KeyboardInterrupt (Ctrl-C in the main thread) instead of the first
    call `when(method, path)` picks; and the paths it sent."""
    send, sent = transport(app), []

    def maybe_interrupt(method: str, path: str, body: Any) -> Answer:
        if "^C" not in sent and when(method, path):  # one Ctrl-C
            sent.append("^C")
            raise KeyboardInterrupt
        sent.append(path)
        return send(method, path, body)

    return maybe_interrupt, sent


def gpu_agent(world: World, app: Any) -> WorkerAgent:
    """A 4-vCPU, 1-GPU worker of pool "gpu" in zone a, on the world's handlers, talking to `app`."""
    return WorkerAgent(
        api=transport(app),
        pool="gpu",
        capacity={"cpu": 4096, "memory_mib": 16_384, "gpus": 1},
        labels={"zone": "a"},
        handlers=world.handlers,
        say=lambda _: None,
    )


def test_the_worker_runs_a_placed_run_with_its_context_and_reports_it_finished(world: World) -> None:
    # Given a due worker-pool job whose handler records its context, and a worker process's agent
    seen: list[RunContext] = []

    def train(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        ctx.heartbeat()
        seen.append(ctx)
        return {"epochs": payload["epochs"], "cancelled": ctx.cancelled}

    world.handlers.register("mypkg.train", train)
    app = api(world)
    job_id = pool_job(app, cpu=1024)
    world.clock.advance(31)
    world.deliver()
    agent = gpu_agent(world, app)
    agent.register()
    # When it polls once (running the handler inline)
    assert agent.poll_once(wait_seconds=0, threaded=False) == 1
    # Then the handler ran with the run's context, and the run SUCCEEDED with its result
    [ctx] = seen
    assert ctx.job_id == job_id and ctx.attempt == 1 and ctx.effect_key == ctx.run_id
    status, run = call(app, "GET", f"/api/runs/{ctx.run_id}", headers=A)
    assert (
        status == 200 and run["status"] == "SUCCEEDED" and run["result"] == {"epochs": 3, "cancelled": False}
    )
    assert agent.held == {}
    # And a second poll finds nothing more
    assert agent.poll_once(wait_seconds=0, threaded=False) == 0


def test_a_failing_handler_is_reported_as_the_runs_error(world: World) -> None:
    def boom(payload: dict[str, Any], ctx: RunContext) -> None:
        raise RuntimeError("out of memory")

    world.handlers.register("mypkg.train", boom)
    app = api(world)
    job_id = pool_job(app, cpu=1024)
    world.clock.advance(31)
    world.deliver()
    agent = gpu_agent(world, app)
    agent.register()
    agent.poll_once(wait_seconds=0, threaded=False)
    # Then the run FAILED with the handler's error, and the worker holds nothing
    [run] = world.runs.recent(job_id, limit=1)
    assert run.status == "FAILED" and run.error is not None
    assert (run.error.type, run.error.message) == ("RuntimeError", "out of memory")
    status, page = call(app, "GET", "/api/workers?pool=gpu", headers=A)
    assert status == 200 and page["items"][0]["runs"] == {}


def test_a_worker_declared_dead_stops_taking_work(world: World) -> None:
    app = api(world)
    agent = WorkerAgent(
        api=transport(app), pool="gpu", capacity={"cpu": 1024, "memory_mib": 1024}, say=lambda _: None
    )
    agent.register()
    # When it misses three heartbeats, then polls
    world.clock.advance(31)
    # Then it is told it is dead, takes nothing and stops
    assert agent.poll_once(wait_seconds=0, threaded=False) == 0
    assert agent.stopping.is_set()


def test_a_run_placed_before_its_tick_is_started_on_its_tick(world: World) -> None:
    # Given a run handed to its pool while the worker's clock reads 0.4 s before its tick
    events: list[str] = []
    world.handlers.register("mypkg.train", lambda payload, ctx: events.append("handler"))
    app = api(world)
    pool_job(app, cpu=1024)  # due at T0 + 30 s
    world.clock.advance(31)
    world.deliver()
    agent = gpu_agent(world, app)
    agent.now = lambda: T0 + timedelta(seconds=29.6)
    agent.sleep = lambda seconds: events.append(f"wait {seconds:.1f}")
    agent.register()
    # When it polls and takes the run
    assert agent.poll_once(wait_seconds=0, threaded=False) == 1
    # Then it waits for the tick, and only then starts the handler
    assert events == ["wait 0.4", "handler"]


def test_the_workers_context_keeps_progress_and_checkpoints_and_a_re_placed_attempt_resumes(
    world: World,
) -> None:
    # Given a handler that resumes from its last checkpoint, checkpoints a step, reports its progress,
    # and (on attempt 1 only) dies with its process before it finishes
    seen: list[tuple[int, Any, bool]] = []

    def train(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        start = ctx.last_checkpoint["done"] if ctx.last_checkpoint else 0
        kept = ctx.checkpoint({"done": start + 1})
        ctx.heartbeat(progress={"done": start + 1, "of": 2})
        seen.append((ctx.attempt, ctx.last_checkpoint, kept))
        if ctx.attempt == 1:
            raise Crash("kill -9")
        return {"resumed_from": start}

    world.handlers.register("mypkg.train", train)
    app = api(world)
    job_id = pool_job(app, cpu=1024)
    world.clock.advance(31)
    world.deliver()
    first = gpu_agent(world, app)
    first.register()
    # When the first worker runs it, checkpoints, and dies
    with pytest.raises(Crash):
        first.poll_once(wait_seconds=0, threaded=False)
    # Then the checkpoint and the progress are on the run, as a Lambda worker would keep them
    [row] = world.runs.recent(job_id, limit=1)
    assert (row.status, row.checkpoint, row.progress) == ("RUNNING", {"done": 1}, {"done": 1, "of": 2})
    # When it misses three heartbeats, and a second worker takes the run
    world.clock.advance(31)
    second = gpu_agent(world, app)
    second.register()
    assert second.poll_once(wait_seconds=0, threaded=False) == 1
    # Then attempt 2 resumed from attempt 1's checkpoint, and the run SUCCEEDED
    assert seen == [(1, None, True), (2, {"done": 1}, True)]
    [row] = world.runs.recent(job_id, limit=1)
    assert (row.status, row.attempt, row.checkpoint) == ("SUCCEEDED", 2, {"done": 2})


def test_a_checkpoint_of_a_run_the_worker_no_longer_holds_answers_false(world: World) -> None:
    # Given a run whose handler, on its worker's thread, waits for the test before it checkpoints
    entered, go = threading.Event(), threading.Event()
    kept: list[bool] = []

    def train(payload: dict[str, Any], ctx: RunContext) -> None:
        entered.set()
        assert go.wait(5)
        kept.append(ctx.checkpoint({"done": 1}))

    world.handlers.register("mypkg.train", train)
    app = api(world)
    job_id = pool_job(app, cpu=1024)
    world.clock.advance(31)
    world.deliver()
    first = gpu_agent(world, app)
    first.register()
    assert first.poll_once(wait_seconds=0) == 1
    assert entered.wait(5)
    # When its worker misses three heartbeats, and another worker takes the run over
    world.clock.advance(31)
    thief = WorkerAgent(
        api=transport(app),
        pool="gpu",
        capacity=dict(first.capacity),
        labels={"zone": "a"},
        say=lambda _: None,
    )
    thief.register()
    answer = thief.api("POST", f"/api/workers/{thief.worker_id}/poll", {"wait_seconds": 0})
    [taken] = answer.body["runs"]
    acked = thief.api("POST", f"/api/runs/{taken['run_id']}/ack", {"worker_id": thief.worker_id})
    assert acked.body["applied"]
    go.set()
    first.join_runs(timeout=5)
    # Then the first worker's checkpoint is refused (False: finish quickly), and nothing is kept
    assert kept == [False]
    [row] = world.runs.recent(job_id, limit=1)
    assert (row.status, row.worker, row.checkpoint) == ("LEASED", thief.worker_id, None)


def test_ctrl_c_during_a_run_lets_it_finish_and_report_and_takes_no_more_work(world: World) -> None:
    # Given a running worker process whose handler is mid-run when Ctrl-C comes (at its next poll)
    entered, interrupted, beaten_after_ctrl_c = threading.Event(), threading.Event(), threading.Event()

    def train(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        entered.set()
        assert interrupted.wait(5)
        assert beaten_after_ctrl_c.wait(5)  # still heartbeating while it finishes
        return {"finished_after": "ctrl-c"}

    world.handlers.register("mypkg.train", train)
    app = api(world)
    job_id = pool_job(app, cpu=1024)
    world.clock.advance(31)
    world.deliver()
    polls: list[str] = []

    def second_poll(method: str, path: str) -> bool:
        polls.extend([path] if path.endswith("/poll") else [])
        if len(polls) == 2 and path.endswith("/poll"):
            assert entered.wait(5)
            interrupted.set()
            return True
        return False

    def watching(method: str, path: str, body: Any) -> Answer:
        if interrupted.is_set() and path == f"/api/workers/{agent.worker_id}/heartbeat":
            beaten_after_ctrl_c.set()
        return api_call(method, path, body)

    api_call, sent = interrupted_at(app, second_poll)
    agent = gpu_agent(world, app)
    agent.api, agent.heartbeat_seconds = watching, 0.01
    # When it serves (the real loop) and is interrupted
    agent.serve(wait_seconds=0)
    # Then serve returned only after the run finished and reported: the run SUCCEEDED with its result
    [run] = world.runs.recent(job_id, limit=1)
    assert (run.status, run.attempt, run.worker) == ("SUCCEEDED", 1, agent.worker_id)
    assert agent.stopping.is_set() and agent.drained.is_set() and agent.held == {}
    # And it took no more work after Ctrl-C: heartbeats and the run's own reports followed it, no poll
    after = [p for p in sent[sent.index("^C") + 1 :] if not p.endswith("/heartbeat")]
    assert after == [f"/api/runs/{run.run_id}/finished"]
    # And its pool holds nothing for it any more
    status, page = call(app, "GET", "/api/workers?pool=gpu", headers=A)
    assert status == 200 and page["items"][0]["runs"] == {}


def test_ctrl_c_before_an_ack_hands_the_run_back_to_be_placed_elsewhere(world: World) -> None:
    # Given a worker process that is interrupted as its poll answers a run, before it acknowledges it
    world.handlers.register("mypkg.train", lambda payload, ctx: {"ran_on": "the next worker"})
    app = api(world)
    job_id = pool_job(app, cpu=1024)
    world.clock.advance(31)
    world.deliver()
    api_call, sent = interrupted_at(app, lambda method, path: path.endswith("/ack"))
    quitter = gpu_agent(world, app)
    quitter.api = api_call
    quitter.serve(wait_seconds=0)
    # Then it ran nothing, and the run is still PENDING, not acknowledged by anyone
    assert "^C" in sent and not any(p.endswith(("/started", "/finished")) for p in sent)
    [run] = world.runs.recent(job_id, limit=1)
    assert run.status == "PENDING"
    # When its reservation lapses and another worker (fitting the run more tightly) polls
    world.clock.advance(16)
    other = gpu_agent(world, app)
    other.capacity = {"cpu": 1024, "memory_mib": 1024, "gpus": 1}
    other.register()
    assert other.poll_once(wait_seconds=0, threaded=False) == 1
    # Then the run ran once, on the other worker, as its first attempt
    [run] = world.runs.recent(job_id, limit=1)
    assert (run.status, run.attempt, run.worker) == ("SUCCEEDED", 1, other.worker_id)


def test_a_handler_that_polls_ctx_cancelled_sees_a_cancel_at_the_workers_next_beat(world: World) -> None:
    # Given a run whose handler, mid-run, reads ctx.cancelled (never calling ctx.heartbeat itself)
    entered, beaten = threading.Event(), threading.Event()
    seen: list[bool] = []

    def train(payload: dict[str, Any], ctx: RunContext) -> dict[str, bool]:
        seen.append(ctx.cancelled)
        entered.set()
        assert beaten.wait(5)
        seen.append(ctx.cancelled)
        return {"stopped_early": ctx.cancelled}

    world.handlers.register("mypkg.train", train)
    app = api(world)
    job_id = pool_job(app, cpu=1024)
    world.clock.advance(31)
    world.deliver()
    agent = gpu_agent(world, app)
    agent.register()
    assert agent.poll_once(wait_seconds=0) == 1
    assert entered.wait(5)
    # When the run is cancelled over the API, and the worker's heartbeat thread beats once
    run_id = run_id_for(job_id, T0 + timedelta(seconds=30))
    status, answer = call(app, "POST", f"/api/runs/{run_id}/cancel", headers=A)
    assert status == 202, answer
    agent.beat_once()
    beaten.set()
    agent.join_runs(timeout=5)
    # Then the handler saw the cancel, stopped early, and that is the run's result
    assert seen == [False, True]
    [run] = world.runs.recent(job_id, limit=1)
    assert (run.status, run.result) == ("SUCCEEDED", {"stopped_early": True})
