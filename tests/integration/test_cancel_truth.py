"""Cancel tells the truth: a cancel that answers 200 means the handler never ran; a cancel that
arrives while a run runs answers 409, and that run is recorded as executed.

Every run marks its start on its job (the slot, or the count for overlap "allow") in the write
that reads the job, before its handler runs; a cancel is a compare-and-set on the same item.
These timelines put the cancel inside a run's first seconds, before its first heartbeat: where
the fast path writes nothing to the run's row until the run ends.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import Conflict
from jobsched.handlers import HandlerRegistry, RunContext
from jobsched.ports import FakeClock
from jobsched.services.runs import RunService
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import Pump


class CancelMidRun:
    """A handler that, 2.5 s into its run, has the API cancel its job; it records what cancel said."""

    def __init__(self, svc: Services, clock: FakeClock) -> None:
        self.svc, self.clock = svc, clock
        self.ran: list[str] = []
        self.answers: list[str] = []

    def __call__(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, str]:
        self.ran.append(times.stored(ctx.scheduled_for))
        self.clock.advance(2.5)
        try:
            self.answers.append(self.svc.job_service.cancel(ctx.job_id, tenant=ctx.tenant).status)
        except Conflict:
            self.answers.append("409")
        self.clock.advance(5.5)  # the side effect happens; the run ends 8 s after it started
        return {"done": True}


def _register(svc: Services, name: str, fn: Callable[..., Any]) -> None:
    handlers = HandlerRegistry()
    handlers.register(name, fn)
    svc.worker.registry = svc.job_service.registry = handlers


@pytest.mark.parametrize(
    "request_",
    [
        CreateJobRequest(type="one_off", handler="t.cancel", run_at=T0 + timedelta(seconds=5)),
        CreateJobRequest(type="recurring", handler="t.cancel", cron_expr="5 * * * * *"),
        CreateJobRequest(
            type="recurring", handler="t.cancel", cron_expr="5 * * * * *", overlap_policy="allow"
        ),
        CreateJobRequest(
            type="recurring", handler="t.cancel", cron_expr="5 * * * * *", overlap_policy="buffer_one"
        ),
    ],
    ids=["one_off", "recurring_skip", "recurring_allow", "recurring_buffer_one"],
)
def test_a_cancel_during_a_runs_first_seconds_is_a_409_and_the_run_is_recorded_as_executed(
    svc: Services, pump: Pump, clock: FakeClock, request_: CreateJobRequest
) -> None:
    # Given a run whose handler is 2.5 s in (before any heartbeat) when its job is cancelled
    handler = CancelMidRun(svc, clock)
    _register(svc, "t.cancel", handler)
    job_id = svc.job_service.submit(request_, tenant="t", idempotency_key=None).job_id
    # When it runs
    pump.run_due(T0 + timedelta(seconds=5))
    # Then the cancel answered 409, and the run is recorded as what it was: executed, attempt 1
    assert handler.answers == ["409"]
    run = svc.job_service.get(job_id, tenant="t").runs[0]
    assert (run.status, run.attempt) == ("SUCCEEDED", 1)
    assert run.started_at == T0 + timedelta(seconds=5)
    assert run.finished_at == T0 + timedelta(seconds=13)
    job = svc.jobs.get_job(job_id)
    assert job is not None
    assert job.status == (JobStatus.COMPLETED if request_.type == "one_off" else JobStatus.SCHEDULED)
    # And once the run is over, a cancel goes through (a skip job's lapsing slot is no obstacle)
    if request_.type == "recurring":
        assert svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"


@pytest.mark.parametrize("overlap", ["skip", "allow"])
def test_a_cancel_that_answers_200_means_the_handler_never_runs(
    svc: Services, pump: Pump, clock: FakeClock, overlap: str
) -> None:
    # Given ticks already handed to the queue (a one-off and a recurring job's next ticks)
    ran: list[str] = []
    _register(svc, "t.record", lambda payload, ctx: ran.append(ctx.job_id))
    one_off = CreateJobRequest(type="one_off", handler="t.record", run_at=T0 + timedelta(seconds=5))
    recurring = CreateJobRequest(
        type="recurring", handler="t.record", cron_expr="*/10 * * * * *", overlap_policy=overlap
    )
    ids = [svc.job_service.submit(r, tenant="t", idempotency_key=None).job_id for r in (one_off, recurring)]
    # When both are cancelled before their first tick starts
    clock.advance(1)
    assert [svc.job_service.cancel(j, tenant="t").status for j in ids] == ["CANCELLED"] * 2
    outcomes = pump.run_due(T0 + timedelta(seconds=60))
    # Then no handler ran, and every tick that reached a worker says CANCELLED
    assert ran == [] and outcomes["succeeded"] == 0
    for job_id in ids:
        statuses = {r.status for r in svc.job_service.get(job_id, tenant="t").runs}
        assert statuses <= {RunStatus.CANCELLED.value}


def test_a_run_that_starts_after_the_cancel_read_but_before_its_write_makes_the_cancel_a_409(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a cancel that has read the job (no run in progress) and is about to write
    ran: list[str] = []
    _register(svc, "t.record", lambda payload, ctx: ran.append(ctx.job_id))
    request = CreateJobRequest(type="one_off", handler="t.record", run_at=T0 + timedelta(seconds=5))
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    stale = svc.jobs.get_job(job_id)
    assert stale is not None and stale.active_run is None
    # When the worker takes the run in between (its start marker lands first)
    real_cancel = svc.jobs.cancel_job

    def racing_cancel(job: str, **kw: Any) -> Any:
        svc.jobs.cancel_job = real_cancel  # type: ignore[method-assign]
        held, _ = svc.jobs.hold_and_read(
            job,
            run=times.stored(T0 + timedelta(seconds=5)),
            message="m-1",
            until=clock.now() + timedelta(seconds=15),
            now=clock.now(),
        )
        assert held
        return real_cancel(job, **kw)

    svc.jobs.cancel_job = racing_cancel  # type: ignore[method-assign]
    # Then the cancel's compare-and-set is refused, it reads the job again and answers 409
    with pytest.raises(Conflict, match="in progress"):
        svc.job_service.cancel(job_id, tenant="t")
    job = svc.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.SCHEDULED


def test_a_run_whose_worker_died_mid_run_ends_lost_when_its_job_is_cancelled(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a one-off whose worker died mid-run, on the leased path (its row RUNNING, attempt 1)
    from tests.support import CrashAt

    request = CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5))
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    svc.worker.fast_path = False
    svc.worker.crash = CrashAt("run.after_handler")
    assert pump.run_due(T0 + timedelta(seconds=5))["crashed"] == 1
    # When its leases have lapsed, its job is cancelled, and its message comes back
    clock.advance(svc.settings.lease_seconds + 1)
    assert svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"
    pump.expire_leases(svc.settings.lease_seconds)
    assert pump.run_due()["lost"] == 1
    # Then the run ends LOST (its handler ran: CANCELLED would say it never did; issue 19), taken
    # over once to be written so (attempt 2, which did not run again), not RUNNING forever
    [run] = svc.job_service.get(job_id, tenant="t").runs
    assert (run.status, run.attempt) == ("LOST", 2)
    assert pump.receive_all() == []


class CancelOwnRunMidRun:
    """A handler that, 2.5 s into its run (before any heartbeat), has the API cancel its own run; then
    it beats once (the beat reads the cancel mark) and answers whether it was asked to stop."""

    def __init__(self, svc: Services, clock: FakeClock) -> None:
        self.runs = RunService(job_service=svc.job_service)
        self.clock = clock
        self.answers: list[tuple[str, bool]] = []

    def __call__(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, bool]:
        self.clock.advance(2.5)
        cancel = self.runs.cancel(ctx.run_id, tenant=ctx.tenant)
        self.answers.append((cancel.status.value, cancel.stopping))
        ctx.heartbeat()
        self.clock.advance(5.5)
        return {"stopped": ctx.cancelled}


@pytest.mark.parametrize(
    "request_",
    [
        CreateJobRequest(type="one_off", handler="t.cancel", run_at=T0 + timedelta(seconds=5)),
        CreateJobRequest(type="recurring", handler="t.cancel", cron_expr="5 * * * * *"),
        CreateJobRequest(
            type="recurring", handler="t.cancel", cron_expr="5 * * * * *", overlap_policy="allow"
        ),
    ],
    ids=["one_off", "recurring_skip", "recurring_allow"],
)
def test_a_run_cancel_during_a_runs_first_seconds_asks_it_to_stop_and_the_run_ends_as_what_it_did(
    svc: Services, pump: Pump, clock: FakeClock, request_: CreateJobRequest
) -> None:
    # Given a run whose handler is 2.5 s in (no run row written for a recurring tick: the fast path
    # writes it at the end) when its own run is cancelled
    handler = CancelOwnRunMidRun(svc, clock)
    _register(svc, "t.cancel", handler)
    job_id = svc.job_service.submit(request_, tenant="t", idempotency_key=None).job_id
    # When it runs
    pump.run_due(T0 + timedelta(seconds=5))
    # Then the cancel saw the run's start marker (its slot, or its in-flight entry): asked to stop
    # (202), never a 200 CANCELLED for a run that executes
    assert handler.answers == [("RUNNING", True)]
    # And the run ends as what it did: SUCCEEDED, attempt 1, with the handler's answer to the mark
    [run] = svc.runs.recent(job_id, limit=5)
    assert (run.status, run.attempt, run.result) == (RunStatus.SUCCEEDED, 1, {"stopped": True})
    assert run.cancel_requested_at == T0 + timedelta(seconds=7.5)
