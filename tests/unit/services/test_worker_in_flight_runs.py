"""A counted run's start marker is its own entry on the job, not a share of a bare count (issue 19).

Runs of `allow` jobs, backfills and dependants mark their start by being counted on their job. A
receive that died after counting (any crash point past the count) gave nothing back, and its
redelivery counted again and uncounted once: the count stayed above zero for good. Its shared lease
was renewed by every later run of the job, so on a job that kept running no cancel ever went
through, even between runs (tests/sim seed 137, "cancel still refused after 1800 s of drain").
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain.commands import BackfillRequest, CreateJobRequest
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import TransientStoreError
from jobsched.handlers import RunContext
from jobsched.ports import Crash, no_crash
from tests.unit.services.conftest import T0, World
from tests.unit.services.test_worker_crash_after_handler import VISIBILITY, crash_once_at


def allow_job(world: World, cron_expr: str, **extra: Any) -> tuple[str, list[str]]:
    """An `allow` job (with `extra` fields) whose handler records each tick it ran for: its id and
    that record."""
    calls: list[str] = []

    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append(str(ctx.scheduled_for))
        return {"ok": True}

    world.handler("test.effect", effect)
    request = CreateJobRequest(
        type="recurring", handler="test.effect", cron_expr=cron_expr, overlap_policy="allow", **extra
    )
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id, calls


@pytest.mark.parametrize("point", ["run.after_lease", "run.after_handler"])
def test_a_cancel_between_runs_of_a_busy_allow_job_applies_after_a_worker_died_mid_run(
    world: World, point: str
) -> None:
    # Given an `allow` job ticking every 15 s whose first run's (12:00:15) worker dies mid-run
    a = T0 + timedelta(seconds=15)
    job_id, calls = allow_job(world, "*/15 * * * * *")
    world.clock.set(a)
    world.svc.dispatcher.dispatch_all()
    world.svc.worker.crash = crash_once_at(point)
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When the job keeps running every 15 s, the dead run's message comes back and runs (past
    # VISIBILITY), and a cancel comes between two runs (every run so far has ended)
    for step in range(1, (VISIBILITY + 60) // 15):
        world.clock.set(a + timedelta(seconds=15 * step))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    run = world.runs.get(job_id, a)
    assert run is not None and run.status == RunStatus.SUCCEEDED and calls.count(str(a)) >= 1
    world.clock.advance(5)
    answer = world.svc.job_service.cancel(job_id, tenant="t")
    # Then the cancel answers 200: no run is in flight. Before, the dead receive's share of the count
    # was never given back, and the live runs kept the count's lease alive: 409 for good.
    assert answer.status == "CANCELLED"
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.CANCELLED


def test_a_counted_run_whose_worker_died_after_its_handler_is_lost_not_cancelled_by_a_later_cancel(
    world: World,
) -> None:
    # Given an `allow` job's tick whose worker dies after the handler ran, before recording it
    job_id, calls = allow_job(world, "* * * * *")
    world.svc.dispatcher.dispatch_all()
    world.clock.set(T0 + timedelta(seconds=60))
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When its in-flight entry lapsed, a cancel answers 200, and the message comes back
    world.clock.advance(VISIBILITY + 1)
    assert world.svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"
    world.deliver()
    # Then the run is recorded LOST (it may have run; a cancelled job starts nothing), not CANCELLED
    # as if it never ran (tests/sim seed 9: a backfill run, counted as allow runs are)
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.LOST and len(calls) == 1


def test_a_receive_of_a_started_run_that_fails_keeps_its_entry_so_its_deadline_does_not_skip_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an `allow` job with a starting deadline, whose tick's worker died after the handler ran,
    # before recording it
    job_id, calls = allow_job(world, "* * * * *", starting_deadline_seconds=60)
    world.svc.dispatcher.dispatch_all()
    tick = T0 + timedelta(seconds=60)
    world.clock.set(tick)
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When its message comes back and that receive meets a throttle on its first read of the run
    real_get = world.runs.get
    throttled = iter([TransientStoreError("sim: ThrottlingException on get")])

    def get_once_throttled(*args: Any, **kwargs: Any) -> Any:
        if (error := next(throttled, None)) is not None:
            raise error
        return real_get(*args, **kwargs)

    monkeypatch.setattr(world.runs, "get", get_once_throttled)
    world.clock.advance(VISIBILITY + 1)
    with pytest.raises(TransientStoreError):
        world.deliver()
    # And it comes back once more, past the starting deadline
    world.clock.advance(VISIBILITY + 1)
    world.deliver()
    # Then the run is taken over as the run that started in time, not SKIPPED as a fresh tick past
    # its deadline (its handler did run: tests/sim seed 319)
    run = world.runs.get(job_id, tick)
    assert run is not None and run.status == RunStatus.SUCCEEDED, run
    assert calls.count(str(tick)) == 2  # the takeover ran it again, under the same effect key


def test_a_backfill_run_whose_worker_died_after_its_handler_is_lost_not_swept_cancelled_by_a_cancel(
    world: World,
) -> None:
    # Given an hourly job's backfill of one past tick (its row written PENDING before it runs), whose
    # worker dies after the handler ran, before recording it
    job_id, calls = allow_job(world, "0 * * * *")
    tick = T0 - timedelta(hours=2)
    world.svc.schedule.backfill(
        job_id, BackfillRequest(**{"from": tick, "to": tick + timedelta(minutes=1)}), tenant="t"
    )
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When its in-flight entry lapsed, a cancel answers 200 (and sweeps the job's PENDING rows), and
    # the message comes back
    world.clock.advance(VISIBILITY + 1)
    assert world.svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"
    world.deliver()
    # Then the run is recorded LOST (it may have run), not CANCELLED by the cancel's sweep as if it
    # never ran: its row was PENDING, but its entry on the job said a receive got past it (tests/sim
    # seeds 3707, 7879, 9167; seed 1370: a retry's re-armed PENDING row)
    run = world.runs.get(job_id, tick)
    assert run is not None and run.status == RunStatus.LOST, run
    assert calls == [str(tick)]
