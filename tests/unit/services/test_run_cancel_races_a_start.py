"""A run cancel answered CANCELLED means that run's handler never runs, however its worker races it.

A run cancel (POST /api/runs/{id}/cancel) read the job's start markers, found none of the run, and
wrote its row CANCELLED. A worker's receive that wrote its marker between that read and that write
(or wrote it later and read the row stale: the fast path's read is eventually consistent) ran the
handler under a cancel answered 200 (tests/sim seed 80: an `allow` job's re-armed retry). Now the
cancel writes on the job item first (JobStore.cancel_run adds the run to Job.cancelled_runs and
answers the markers): a marker there, the run started and is asked to stop (202); none, every later
marker write of the run is refused, and the worker that meets the refusal records it CANCELLED.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.keys import run_id_for
from jobsched.domain.records import NewRun, Transition
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.handlers import RunContext
from jobsched.ports import Crash, no_crash
from jobsched.services.run import Outcome
from jobsched.services.runs import RunCancel, RunService
from tests.unit.services.conftest import T0, World
from tests.unit.services.test_worker_crash_after_handler import VISIBILITY, crash_once_at


def _job(world: World, kind: str, effect: Callable[[dict[str, Any], RunContext], Any]) -> tuple[str, Any]:
    """A one-off (its run holds the slot) or an `allow` job (its run is counted) whose run is due now,
    its message visible: the job's id and the run's tick."""
    world.handler("test.effect", effect)
    if kind == "one_off":
        tick = T0 + timedelta(seconds=5)
        request = CreateJobRequest(type="one_off", handler="test.effect", run_at=tick)
    else:
        tick = T0 + timedelta(seconds=60)
        request = CreateJobRequest(
            type="recurring", handler="test.effect", cron_expr="* * * * *", overlap_policy="allow"
        )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.set(tick)
    return job_id, tick


@pytest.mark.parametrize("kind", ["one_off", "allow"])
def test_a_receive_between_a_run_cancels_look_at_the_job_and_its_write_of_the_row_never_runs(
    world: World, kind: str
) -> None:
    # Given a run due now, its message visible, not yet received
    calls: list[int] = []
    job_id, tick = _job(world, kind, lambda payload, ctx: calls.append(ctx.attempt))
    # When a client cancels it, and the worker receives the message just before the cancel writes
    # the run's row (after the cancel looked at the job's start markers and found none)
    outcomes: list[Outcome | str] = []
    write_row = world.runs.cancel

    def cancel_after_a_receive(
        job_id: str, scheduled_for: str, *, now: Any, create: NewRun | None = None
    ) -> Transition:
        if not outcomes:
            outcomes.extend(world.deliver())
        return write_row(job_id, scheduled_for, now=now, create=create)

    world.runs.cancel = cancel_after_a_receive  # type: ignore[method-assign]
    answer = RunService(job_service=world.svc.job_service).cancel(run_id_for(job_id, tick), tenant="t")
    # Then the cancel answered CANCELLED and the handler never ran: the receive's marker write was
    # refused (the run in the job's cancelled_runs), and it recorded the run CANCELLED itself.
    # Before, the marker went in, the row read PENDING, and the handler ran under the 200.
    assert (answer.status, answer.stopping) == (RunStatus.CANCELLED, False)
    assert outcomes == [Outcome.CANCELLED] and calls == []
    row = world.runs.get(job_id, times.stored(tick))
    assert row is not None and row.status == RunStatus.CANCELLED
    job = world.jobs.get_job(job_id)
    assert job is not None and times.stored(tick) in job.cancelled_runs
    assert job.active_run is None and job.in_flight == {}


def test_a_receive_after_a_run_cancel_that_reads_the_runs_row_stale_never_runs(world: World) -> None:
    # Given an `allow` job's run due now, cancelled (200) before its message is received
    calls: list[int] = []
    job_id, tick = _job(world, "allow", lambda payload, ctx: calls.append(ctx.attempt))
    answer = RunService(job_service=world.svc.job_service).cancel(run_id_for(job_id, tick), tenant="t")
    assert (answer.status, answer.stopping) == (RunStatus.CANCELLED, False)
    # When the worker receives it and its eventually consistent read of the row is stale (no row)
    read = world.runs.get

    def stale(job_id: str, scheduled_for: Any, *, consistent: bool = True) -> Any:
        return read(job_id, scheduled_for) if consistent else None

    world.runs.get = stale  # type: ignore[method-assign]
    outcomes = world.deliver()
    # Then the handler never ran: the run's count was refused before any read of its row (before,
    # the count went in, the stale read picked the fast path, and the handler ran: seed 80)
    assert outcomes == [Outcome.CANCELLED] and calls == []
    row = read(job_id, times.stored(tick))
    assert row is not None and row.status == RunStatus.CANCELLED


@pytest.mark.parametrize("kind", ["one_off", "allow"])
def test_a_run_cancel_after_the_runs_marker_asks_it_to_stop_and_its_outcome_stands(
    world: World, kind: str
) -> None:
    # Given a run whose worker got past its start marker and runs its handler (on the fast path: no
    # row yet), when a client cancels it from inside that handler
    answers: list[RunCancel] = []
    service = RunService(job_service=world.svc.job_service)

    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        answers.append(service.cancel(run_id_for(ctx.job_id, ctx.scheduled_for), tenant="t"))
        return {"ok": True}

    job_id, tick = _job(world, kind, effect)
    outcomes = world.deliver()
    # Then the cancel found the run's marker in its own write's answer: it asked the run to stop
    # (202), and the run's outcome is recorded as it ran
    assert len(answers) == 1 and answers[0].stopping and answers[0].status == RunStatus.RUNNING
    assert outcomes == [Outcome.SUCCEEDED]
    row = world.runs.get(job_id, times.stored(tick))
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.cancel_requested_at is not None


def test_a_run_cancel_of_a_buffered_tick_gives_its_turn_up_for_the_next_tick(world: World) -> None:
    # Given a per-minute buffer_one job whose 12:02 tick is buffered behind the running 12:01, and
    # cancelled (200) by a client while it waits
    ran: list[str] = []
    answers: list[RunCancel] = []
    twelve_02 = T0 + timedelta(seconds=120)

    def slow(payload: dict[str, Any], ctx: RunContext) -> None:
        ran.append(times.stored(ctx.scheduled_for))
        if len(ran) == 1:
            world.clock.advance(60)
            assert world.deliver() == ["left"]  # 12:02 buffered
            service = RunService(job_service=world.svc.job_service)
            answers.append(service.cancel(run_id_for(ctx.job_id, twelve_02), tenant="t"))

    world.handler("unit.slow", slow)
    request = CreateJobRequest(
        type="recurring", handler="unit.slow", cron_expr="* * * * *", overlap_policy="buffer_one"
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(60)
    world.svc.dispatcher.dispatch_all()
    assert world.deliver() == [Outcome.SUCCEEDED]  # 12:01, which woke the buffered 12:02
    # When the wake-up copy comes, and then 12:03
    woken = world.deliver()
    world.clock.set(T0 + timedelta(seconds=180))
    world.svc.dispatcher.dispatch_all()
    outcomes = world.deliver()
    # Then 12:02 never ran (its hold refused: CANCELLED), and its turn was given up with it: 12:03
    # ran at once, not after the cancelled tick's wait ran out
    assert (answers[0].status, answers[0].stopping) == (RunStatus.CANCELLED, False)
    assert woken == [Outcome.CANCELLED] and Outcome.SUCCEEDED in outcomes
    assert ran == [times.stored(T0 + timedelta(seconds=60)), times.stored(T0 + timedelta(seconds=180))]
    row = world.runs.get(job_id, times.stored(twelve_02))
    assert row is not None and row.status == RunStatus.CANCELLED


def test_a_run_recorded_under_a_run_cancel_whose_worker_died_before_settling_is_settled_by_its_redelivery(
    world: World,
) -> None:
    # Given a one-off due now, whose handler, once running, is asked to stop by a run cancel (202:
    # its start marker is there) and succeeds all the same; its worker records the success and dies
    # before settling it (the one-off's COMPLETED write, its dependants' signal)
    answers: list[RunCancel] = []

    def effect(payload: dict[str, Any], ctx: RunContext) -> None:
        answers.append(RunService(job_service=world.svc.job_service).cancel(ctx.run_id, tenant="t"))

    job_id, tick = _job(world, "one_off", effect)
    world.svc.worker.crash = crash_once_at("run.after_record")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    assert [a.stopping for a in answers] == [True]
    # When its message comes back: the run cancel refuses the run's marker now
    world.clock.advance(VISIBILITY + 1)
    outcomes = world.deliver()
    # Then the recorded success is settled, as any duplicate of a recorded run settles it: the
    # one-off is COMPLETED. Before, the receive answered CANCELLED and settled nothing (a DAG's
    # dependant was left without a run: tests/sim KEY_SEEDS 165)
    assert outcomes == [Outcome.DUPLICATE]
    row = world.runs.get(job_id, times.stored(tick))
    assert row is not None and row.status == RunStatus.SUCCEEDED
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED
