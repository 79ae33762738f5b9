"""A tick of a pause received before its second, or by a worker whose clock runs ahead (tests/sim, seeds 5,
110, 273, 7098)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.domain.status import RunStatus
from jobsched.errors import TransientStoreError
from jobsched.ports import Crash, FakeClock, no_crash
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World
from tests.unit.services.test_worker_crash_after_handler import VISIBILITY, crash_once_at


def _paused_after_its_hand_over(world: World) -> str:
    """A per-minute job (catch-up "one") created at 12:00:00.5, its 12:01 tick handed over, paused."""
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", catchup="one")
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.svc.schedule.pause(job_id, tenant="t")
    return job_id


def test_a_tick_received_early_during_a_pause_still_runs_after_a_resume_before_its_second(
    world: World,
) -> None:
    # Given a per-minute job created at 12:00:00.5, whose 12:01 tick went out at once (SQS delays are
    # whole seconds, rounded down: the message surfaces at 12:00:59.5), and the job is paused
    job_id = _paused_after_its_hand_over(world)
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


def _ran_early_and_died_before_the_pause(world: World) -> str:
    """A per-minute job (catch-up "one"), its 12:01 tick handed over at once; a worker whose clock
    runs 0.5 s ahead receives it at 12:00:59.6 (due on its clock, the job not yet paused), runs the
    handler and dies before recording it; the job is paused at 12:00:59.8. Its id."""
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", catchup="one")
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.svc.worker.clock = AheadClock(world.clock, 0.5)
    world.clock.set(T0 + timedelta(seconds=59.6))
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    world.clock.set(T0 + timedelta(seconds=59.8))
    world.svc.schedule.pause(job_id, tenant="t")
    return job_id


def test_a_tick_a_worker_ahead_ran_before_the_pause_and_died_after_is_not_coalesced_by_the_resume(
    world: World,
) -> None:
    # Given the same per-minute job (catch-up "one"), its 12:01 tick handed over at once; a worker
    # whose clock runs 0.5 s ahead receives it at 12:00:59.6 (due on its clock, the job not yet
    # paused), runs the handler and dies before recording it; the job is paused at 12:00:59.8
    job_id = _ran_early_and_died_before_the_pause(world)
    # When it is resumed at 12:03:30 (12:01, 12:02, 12:03 missed: coalesced into 12:03), and the
    # dead receive's message comes back (twice: the first receive finds the run's start kept on its
    # row by the tick that took its lapsed slot, and waits for that slot)
    world.clock.set(T0 + timedelta(seconds=210))
    world.svc.schedule.resume(job_id, tenant="t")
    for _ in range(2):
        world.clock.advance(VISIBILITY + 1)
        world.deliver()
    # Then 12:01, whose start marker the resume found on the job, is the redelivery's: recorded as
    # executed. Before, the resume wrote it SKIPPED "coalesced" and the redelivery, meeting that
    # row, dropped itself as a duplicate: a run that executed recorded SKIPPED (tests/sim seed 110)
    first = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert first is not None and first.status == RunStatus.SUCCEEDED
    second = world.runs.get(job_id, T0 + timedelta(seconds=120))
    assert second is not None and second.status == RunStatus.SKIPPED and second.reason == "coalesced"


def test_a_tick_a_worker_ahead_ran_before_the_pause_and_died_after_is_not_rescheduled_by_an_edit(
    world: World,
) -> None:
    # Given the same job and the same early receive of its 12:01 tick, which runs the handler and
    # dies before recording it; the job is paused at 12:00:59.8
    job_id = _ran_early_and_died_before_the_pause(world)
    # When an edit during the pause (12:03:30) moves the schedule to every five minutes: the old
    # schedule's ticks of the pause (12:01, 12:02, 12:03) are its to record SKIPPED "rescheduled"
    world.clock.set(T0 + timedelta(seconds=210))
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/5 * * * *"), tenant="t")
    # Then 12:01, whose start marker the edit found on the job, is left to its redelivery; the two
    # ticks that never started are SKIPPED. Before, the edit wrote 12:01 SKIPPED "rescheduled" too,
    # over a run that executed, and its redelivery met that row as a finished run (tests/sim seed 273)
    assert world.runs.get(job_id, T0 + timedelta(seconds=60)) is None
    for minute in (2, 3):
        row = world.runs.get(job_id, T0 + timedelta(seconds=60 * minute))
        assert row is not None and (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled")
    # and once it is resumed and the message comes back, 12:01 is recorded as executed
    world.svc.schedule.resume(job_id, tenant="t")
    for _ in range(2):
        world.clock.advance(VISIBILITY + 1)
        world.deliver()
    first = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert first is not None and first.status == RunStatus.SUCCEEDED


@pytest.mark.parametrize("fails", ["runs.get", "queue.send"])
def test_a_tick_a_worker_ahead_took_for_one_of_the_pause_runs_when_a_call_after_the_resumes_write_fails(
    world: World, fails: str
) -> None:
    # Given the per-minute job, its 12:01 tick handed over at once, paused; a worker whose clock runs
    # 0.5 s ahead received the tick at 12:00:59.6 and acknowledged it as one of the pause
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", catchup="one")
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.svc.schedule.pause(job_id, tenant="t")
    world.svc.worker.clock = AheadClock(world.clock, 0.5)
    world.clock.set(T0 + timedelta(seconds=59.6))
    assert world.deliver() == [Outcome.PAUSED]
    # When the job is resumed at 12:00:59.8, and after its write applied a call of the resume meets a
    # throttle (a read of the store, a send to the queue), the API answering 503
    world.clock.set(T0 + timedelta(seconds=59.8))
    target = world.runs if fails == "runs.get" else world.queue
    name = fails.split(".")[1]
    real = getattr(target, name)

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise TransientStoreError(f"sim: ThrottlingException on {name}")

    save = world.jobs.save_definition

    def save_then_throttle(job: Any, *, expected_version: int) -> bool:
        applied = save(job, expected_version=expected_version)
        setattr(target, name, throttled)
        return applied

    world.jobs.save_definition = save_then_throttle  # type: ignore[method-assign]
    try:
        world.svc.schedule.resume(job_id, tenant="t")
    except TransientStoreError:
        pass
    finally:
        world.jobs.save_definition = save  # type: ignore[method-assign]
        setattr(target, name, real)
    # and the dispatcher's next pass comes at 12:01:00.5, then the workers
    world.clock.set(T0 + timedelta(seconds=60.5))
    world.svc.dispatcher.dispatch_all()
    later = world.deliver()
    # Then the tick runs: the resume's copy of it goes out in its hand-over, before the stamp, and a
    # hand-over that failed leaves the stamp at the tick for the next pass. Before, the copy was sent
    # in a step after the hand-over's stamp, and a fault there lost the tick: no run, no row (tests/sim
    # seed 7098: a throttle on the read of the run row that decided the copy)
    assert Outcome.SUCCEEDED in later
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.SUCCEEDED


def test_a_tick_of_the_pause_whose_twin_receive_counted_it_and_died_is_run_after_the_resume(
    world: World,
) -> None:
    # Given a per-minute job (catch-up "one") paused before its 12:01 tick, handed over already; SQS
    # hands the tick's message out twice at 12:01:00.5: one receive stops at the pause and
    # acknowledges it, the other counts the run on the job (its start marker) and dies there
    job_id = _paused_after_its_hand_over(world)
    world.clock.set(T0 + timedelta(seconds=60.5))
    assert world.deliver() == [Outcome.PAUSED]
    twin = world.clock.now()
    counted, _ = world.jobs.count_and_read(
        job_id,
        run=times.stored(T0 + timedelta(seconds=60)),
        message="m-twin",
        until=twin + timedelta(seconds=30),
        now=twin,
    )
    assert counted and world.queue.peek() == []  # no message of the tick is left
    # When it is resumed at 12:03:30 (12:01, 12:02 and 12:03 missed: coalesced into 12:03), the
    # twin's marker long lapsed, and the queue plays what it holds then
    world.clock.set(T0 + timedelta(seconds=210))
    world.svc.schedule.resume(job_id, tenant="t")
    world.clock.advance(1)
    world.deliver()
    # Then 12:01 has a row: the resume left it to a redelivery (its marker says it may have run) and,
    # that marker lapsed, sent the copy that settles it. Before, the tick had no row for good
    # (tests/sim seed 9173), neither run nor recorded SKIPPED
    first = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert first is not None and first.status == RunStatus.SUCCEEDED
    second = world.runs.get(job_id, T0 + timedelta(seconds=120))
    assert second is not None and second.status == RunStatus.SKIPPED and second.reason == "coalesced"
