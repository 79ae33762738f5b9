"""A tick of a pause received before its second, or by a worker whose clock runs ahead (tests/sim, seed 5)."""

from __future__ import annotations

from datetime import datetime, timedelta

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import RunStatus
from jobsched.ports import FakeClock
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World


def test_a_tick_received_early_during_a_pause_still_runs_after_a_resume_before_its_second(
    world: World,
) -> None:
    # Given a per-minute job created at 12:00:00.5, whose 12:01 tick went out at once (SQS delays are
    # whole seconds, rounded down: the message surfaces at 12:00:59.5), and the job is paused
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", catchup="one")
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.svc.schedule.pause(job_id, tenant="t")
    # When a worker receives it at 12:00:59.6, and the job is resumed at 12:00:59.8, before the tick
    world.clock.set(T0 + timedelta(seconds=59.6))
    early = world.deliver()
    world.clock.set(T0 + timedelta(seconds=59.8))
    world.svc.schedule.resume(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=65))
    later = world.deliver()
    # Then the early receive left the message queued (the resume counts on it: the tick was not yet
    # missed), and the tick runs. Before, the worker acknowledged it as a tick of the pause and the
    # resume did not replan a tick still in the future: 12:01 never ran and left no row.
    assert early == ["left"]
    assert Outcome.SUCCEEDED in later
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.SUCCEEDED


class AheadClock:
    """A process's clock that runs `seconds` ahead of the reference clock (clock skew)."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self._clock, self._ahead = clock, timedelta(seconds=seconds)

    def now(self) -> datetime:
        return self._clock.now() + self._ahead


def test_a_tick_a_worker_whose_clock_runs_ahead_took_for_missed_still_runs_after_a_resume_before_it(
    world: World,
) -> None:
    # Given the same per-minute job, its 12:01 tick handed over at once, paused; and a worker whose
    # clock runs 0.5 s ahead (seed 5 of tests/sim, issue 19)
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", catchup="one")
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.svc.schedule.pause(job_id, tenant="t")
    world.svc.worker.clock = AheadClock(world.clock, 0.5)
    # When it receives the tick at 12:00:59.6 (12:01:00.1 on its clock: due, a tick of the pause),
    # and the job is resumed at 12:00:59.8, before the tick
    world.clock.set(T0 + timedelta(seconds=59.6))
    early = world.deliver()
    world.clock.set(T0 + timedelta(seconds=59.8))
    world.svc.schedule.resume(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=65))
    later = world.deliver()
    # Then the tick runs: the resume hands the pause's handed-over ticks over again rather than count on
    # messages a worker's clock may have judged (before, the worker acknowledged it as a tick of the
    # pause, the resume took it for still queued, and 12:01 never ran and left no row)
    assert early == [Outcome.PAUSED]
    assert Outcome.SUCCEEDED in later
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.SUCCEEDED
