"""The dispatcher's hand-over, on the in-memory fakes (services/dispatch.py's module docstring)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobsched.domain import times
from jobsched.domain.models import Job, RunMessage
from jobsched.domain.status import JobStatus
from jobsched.ports import Crash
from tests.unit.services.conftest import T0, World


def recurring(world: World, cron_expr: str = "*/30 * * * * *") -> str:
    """A job firing every 30 s, stored as the API stores it but not handed over by the request
    (so the dispatcher's pass is what hands its ticks over)."""
    job = Job(
        job_id="job_every30",
        tenant="t",
        type="recurring",
        status=JobStatus.SCHEDULED,
        handler="demo.echo",
        payload={},
        cron_expr=cron_expr,
        next_run_at=T0 + timedelta(seconds=30),
        created_at=T0,
        updated_at=T0,
    )
    world.jobs.create_with_idempotency(job, idempotency_key="k", request_hash="h", response={}, now=T0)
    return job.job_id


def queued(world: World) -> list[str]:
    return sorted(RunMessage.model_validate_json(body).scheduled_for for _, body in world.queue.peek())


def test_a_pass_hands_over_every_tick_in_the_look_ahead_and_stamps_the_next_one(world: World) -> None:
    # Given a job firing every 30 s
    job_id = recurring(world)
    # When one dispatcher pass runs at 12:00
    world.svc.dispatcher.dispatch_all()
    # Then the ticks within the 90 s look-ahead are queued once, and the pending tick moved past them
    ticks = [times.stored(T0 + timedelta(seconds=s)) for s in (30, 60, 90)]
    job = world.jobs.get_job(job_id)
    assert job is not None and job.next_run_at == T0 + timedelta(seconds=120)
    world.svc.dispatcher.dispatch_all()  # a second pass at the same instant finds nothing due
    assert queued(world) == ticks
    # each held back until its own second (pre-dispatch: it fires on the tick, not on the pass)
    assert [at for at, _ in world.queue.peek()] == [T0 + timedelta(seconds=s) for s in (30, 60, 90)]


def test_a_pass_that_dies_before_the_stamp_hands_the_same_ticks_over_again(world: World) -> None:
    # Given a pass that sends, then dies before it stamps the next tick
    job_id = recurring(world)

    def die(point: str) -> None:
        if point == "dispatch.after_send":
            raise Crash(point)

    world.svc.dispatcher.crash = die
    with pytest.raises(Crash):
        world.svc.dispatcher.dispatch_all()
    world.svc.dispatcher.crash = lambda point: None
    # When the shard lease has run out and the next pass runs
    world.clock.advance(60)
    world.svc.dispatcher.dispatch_all()
    # Then no tick is lost: every tick is queued at least once, the next one is stamped
    job = world.jobs.get_job(job_id)
    assert job is not None and job.next_run_at is not None and job.next_run_at > T0 + timedelta(seconds=120)
    sent = queued(world)
    assert {times.stored(T0 + timedelta(seconds=s)) for s in (30, 60, 90, 120, 150)} <= set(sent)
