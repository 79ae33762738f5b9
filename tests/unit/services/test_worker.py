"""The worker's paths, on the in-memory fakes (services/run.py's module and process() docstrings)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import Conflict
from jobsched.handlers import RunContext
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, NetworkBlocked, World


def one_off(world: World, seconds: float = 5, handler: str = "demo.echo") -> str:
    request = CreateJobRequest(
        type="one_off", handler=handler, payload={"n": 1}, run_at=T0 + timedelta(seconds=seconds)
    )
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def recurring(world: World, handler: str = "demo.echo", **policy: Any) -> str:
    request = CreateJobRequest(type="recurring", handler=handler, cron_expr="* * * * *", **policy)
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def run_of(world: World, job_id: str, seconds: float) -> Any:
    return world.runs.get(job_id, T0 + timedelta(seconds=seconds))


def test_the_network_is_blocked_in_service_unit_tests() -> None:
    import socket

    with pytest.raises(NetworkBlocked):
        socket.create_connection(("127.0.0.1", 9))


def test_a_healthy_run_takes_the_fast_path_and_records_its_outcome_in_one_write(world: World) -> None:
    # Given a one-off due in 5 s, handed over by its request
    job_id = one_off(world)
    # When its second comes and the worker receives it
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then the run is SUCCEEDED at attempt 1 with no lease row ever written, and the job COMPLETED
    run = run_of(world, job_id, 5)
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 1 and run.lease_owner is None
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED and job.active_run is None


def test_a_run_of_a_leasing_worker_is_leased_then_run_then_recorded_by_its_holder(world: World) -> None:
    world.svc.worker.fast_path = False
    job_id = one_off(world)
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    run = run_of(world, job_id, 5)
    assert run.status == RunStatus.SUCCEEDED and run.lease_owner is not None and run.started_at is not None


def test_a_second_message_for_a_finished_run_is_a_duplicate_and_runs_nothing(world: World) -> None:
    calls: list[int] = []
    world.handler("unit.count", lambda payload, ctx: calls.append(ctx.attempt))
    job_id = one_off(world, handler="unit.count")
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    sf = times.stored(T0 + timedelta(seconds=5))
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=sf, guard=True), 0)])
    assert world.deliver() == [Outcome.DUPLICATE]
    assert calls == [1]


def test_a_run_of_a_job_cancelled_before_it_started_never_starts_and_says_so(world: World) -> None:
    calls: list[int] = []
    world.handler("unit.count", lambda payload, ctx: calls.append(ctx.attempt))
    job_id = one_off(world, handler="unit.count")
    assert world.svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"
    world.clock.advance(5)
    assert world.deliver() == [Outcome.CANCELLED]
    assert run_of(world, job_id, 5).status == RunStatus.CANCELLED and calls == []


def test_a_tick_that_came_due_during_a_pause_is_left_to_the_resume(world: World) -> None:
    job_id = recurring(world)
    world.svc.dispatcher.dispatch_all()  # hands over 12:01 (the look-ahead is 90 s)
    world.svc.schedule.pause(job_id, tenant="t")
    world.clock.advance(60)
    assert world.deliver() == [Outcome.PAUSED]
    assert run_of(world, job_id, 60) is None  # nothing written: resume decides by the catch-up policy


def test_cancel_is_refused_while_a_run_holds_its_job_and_applies_after(world: World) -> None:
    # Given a one-off whose handler tries to cancel its own job while it runs
    answers: list[str] = []

    def cancel_me(payload: dict[str, Any], ctx: RunContext) -> None:
        try:
            world.svc.job_service.cancel(ctx.job_id, tenant="t")
            answers.append("cancelled")
        except Conflict:
            answers.append("409")

    world.handler("unit.cancel_me", cancel_me)
    job_id = one_off(world, handler="unit.cancel_me")
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then the cancel during the run was a 409, and the run's success completed the job
    assert answers == ["409"]
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED


def test_cancel_sweeps_the_pending_runs_already_handed_over(world: World) -> None:
    job_id = one_off(world, seconds=30)
    assert run_of(world, job_id, 30).status == RunStatus.PENDING
    world.svc.job_service.cancel(job_id, tenant="t")
    assert run_of(world, job_id, 30).status == RunStatus.CANCELLED


def test_a_buffer_one_tick_waits_behind_the_running_one_and_is_woken_by_its_release(world: World) -> None:
    # Given a per-minute buffer_one job whose 12:01 run is still running when 12:02 comes due
    ran: list[str] = []

    def slow(payload: dict[str, Any], ctx: RunContext) -> None:
        ran.append(times.stored(ctx.scheduled_for))
        if len(ran) == 1:
            world.clock.advance(60)  # 12:02 is due while 12:01 runs
            nested.extend(world.deliver())

    nested: list[Any] = []
    world.handler("unit.slow", slow)
    job_id = recurring(world, handler="unit.slow", overlap_policy="buffer_one")
    world.svc.dispatcher.dispatch_all()  # 12:01
    world.clock.advance(60)
    world.svc.dispatcher.dispatch_all()  # 12:02 (and 12:03 once it is in the look-ahead)
    # When 12:01 runs, the 12:02 tick arrives meanwhile, then 12:01 finishes and releases the slot
    first = world.deliver()
    # Then 12:02 was buffered (left queued), and the release sent it a wake-up that runs it next
    twelve_02 = times.stored(T0 + timedelta(seconds=120))
    assert first == [Outcome.SUCCEEDED] and nested == ["left"]
    buffered = world.jobs.get_job(job_id)
    assert buffered is not None and buffered.buffered_run == twelve_02
    assert world.deliver() == [Outcome.SUCCEEDED]  # the wake-up copy, due at once
    # And the sleeping original, when it surfaces, finds its run finished
    world.clock.advance(1200)
    assert world.deliver() == [Outcome.DUPLICATE] and world.queue.depth() == 0
    assert ran == [times.stored(T0 + timedelta(seconds=60)), twelve_02]
    assert run_of(world, job_id, 120).status == RunStatus.SUCCEEDED
