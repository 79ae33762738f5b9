"""`jobsched worker` (jobsched.cli.worker) against the real resolver and services on the fakes:
it registers, polls, acknowledges, runs the registry's handler with a RunContext, and reports."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from jobsched.cli.http import Answer
from jobsched.cli.worker import WorkerAgent
from jobsched.handlers import RunContext
from tests.unit.api.test_tenancy import call
from tests.unit.api.test_workers_api import A, api, pool_job
from tests.unit.services.conftest import T0, World, no_network, world

__all__ = ["no_network", "world"]


def transport(app: Any) -> Any:
    def send(method: str, path: str, body: Any) -> Answer:
        status, answer = call(app, method, path, headers=A, body=body)
        return Answer(status=status, body=answer, text=json.dumps(answer))

    return send


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
