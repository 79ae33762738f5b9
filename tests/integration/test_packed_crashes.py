"""Packed one-offs (jobsched.domain.packs) on moto, with processes killed between any two steps: a
batch's one-off runs once, its history says what happened, and its job ends as its run did.

The packed path's own writes: the create's pack and cursor, the hand-over's sends and cursor move, the
worker's start on the run row (PersistRunning) and its record. Each crash below kills the process at
one step boundary; the message then surfaces again (or a dispatcher pass finds the cursor)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.packs import parse_packed
from jobsched.domain.results import Submitted
from jobsched.handlers import HandlerRegistry, RunContext
from jobsched.ports import Crash, FakeClock
from jobsched.wiring import Services
from tests.conftest import T0
from tests.integration.test_crashes import fresh_dispatcher, runs_by_key
from tests.support import CrashAt, Pump

DUE = T0 + timedelta(seconds=5)


class Ledger:
    """Every handler invocation (effect key, attempt); the first one dies with its process if asked."""

    def __init__(self, *, crash_first: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.crash_first = crash_first

    def handler(self, payload: dict[str, Any], ctx: RunContext) -> None:
        self.calls.append((ctx.effect_key, ctx.attempt))
        if self.crash_first and len(self.calls) == 1:
            raise Crash("mid-handler")


def with_ledger(svc: Services, ledger: Ledger) -> None:
    registry = HandlerRegistry()
    registry.register("test.ledger", ledger.handler)
    svc.worker.registry = svc.job_service.registry = registry


def packed(svc: Services, *run_at: datetime, key: str = "b") -> list[str]:
    """A batch of one-offs at `run_at` (packed: no key of their own); their job ids."""
    items = svc.job_service.submit_batch(
        [(CreateJobRequest(type="one_off", handler="test.ledger", run_at=at), None) for at in run_at],
        tenant="t",
        idempotency_key=key,
    )
    assert all(isinstance(i, Submitted) for i in items), items
    ids = [i.job_id for i in items if isinstance(i, Submitted)]
    assert all(parse_packed(i) is not None for i in ids)
    return ids


@pytest.mark.parametrize(
    ("point", "handler_calls", "attempt", "outcome"),
    [
        # died after its start was written: the lease lapses, the next receive takes the run over
        ("run.after_lease", 1, 2, "succeeded"),
        ("mid_handler", 2, 2, "succeeded"),  # the handler runs again (the same effect key)
        ("run.after_handler", 2, 2, "succeeded"),  # died before recording: runs again, one effect
        ("run.after_record", 1, 1, "duplicate"),  # died before the ack: the redelivery finds it done
    ],
)
def test_a_packed_worker_killed_at_any_step_still_runs_the_one_off_once(
    svc: Services, pump: Pump, clock: FakeClock, point: str, handler_calls: int, attempt: int, outcome: str
) -> None:
    ledger = Ledger(crash_first=point == "mid_handler")
    with_ledger(svc, ledger)
    if point != "mid_handler":
        svc.worker.crash = CrashAt(point)
    # Given a packed one-off due in 5 s (handed over by the create)
    (job_id,) = packed(svc, DUE)
    # When the first worker dies at `point`, and the message surfaces again after its lease
    assert pump.run_due(DUE)["crashed"] == 1
    pump.expire_leases(svc.settings.lease_seconds)
    outcomes = pump.run_due()
    # Then the run finished exactly once, under its one effect key
    assert runs_by_key(svc, job_id) == {DUE: "SUCCEEDED"}
    assert outcomes == Counter({outcome: 1})
    assert len(ledger.calls) == handler_calls and len({k for k, _ in ledger.calls}) == 1
    run = svc.runs.get(job_id, DUE)
    assert run is not None and run.attempt == attempt
    # and the job says COMPLETED (read through the API: copied out, as its run left it)
    assert svc.job_service.get(job_id, tenant="t").job.status == "COMPLETED"
    assert pump.receive_all() == []


def test_a_packed_run_whose_worker_died_after_its_handler_then_a_cancel_is_lost_not_cancelled(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a packed one-off whose worker dies after the handler ran, before recording it
    ledger = Ledger()
    with_ledger(svc, ledger)
    svc.worker.crash = CrashAt("run.after_handler")
    (job_id,) = packed(svc, DUE)
    assert pump.run_due(DUE)["crashed"] == 1
    # When its lease lapses, a cancel answers 200 (nothing live holds the run), and the message surfaces
    pump.expire_leases(svc.settings.lease_seconds)
    assert svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"
    pump.run_due()
    # Then the run is not said CANCELLED (its handler ran), and it does not run again
    assert runs_by_key(svc, job_id) == {DUE: "LOST"}
    assert len(ledger.calls) == 1
    assert pump.receive_all() == []


@pytest.mark.parametrize("point", ["dispatch.before_send", "dispatch.after_send", "dispatch.after_stamp"])
def test_a_dispatcher_killed_handing_a_pack_over_loses_no_job_and_runs_none_twice(
    svc: Services, pump: Pump, clock: FakeClock, point: str
) -> None:
    ledger = Ledger()
    with_ledger(svc, ledger)
    # Given a pack of three one-offs due in 4 to 6 minutes (past the look-ahead: the cursor holds them)
    ids = packed(svc, *(T0 + timedelta(seconds=s) for s in (240, 300, 360)))
    # When the pass at +3 min dies at `point`, and the next pass runs a minute later
    clock.set(T0 + timedelta(minutes=3))
    svc.dispatcher.crash = CrashAt(point)
    with pytest.raises(Crash):
        svc.dispatcher.dispatch_all()
    fresh = fresh_dispatcher(svc)
    for minute in (4, 5, 6):  # the next passes (the hand-over horizon here is the look-ahead, 90 s)
        clock.set(T0 + timedelta(minutes=minute))
        fresh.dispatch_all()
        pump.run_due(clock.now())
    pump.run_due(T0 + timedelta(minutes=7))
    # Then each ran once
    for job_id, s in zip(ids, (240, 300, 360), strict=True):
        assert runs_by_key(svc, job_id) == {T0 + timedelta(seconds=s): "SUCCEEDED"}
    assert sorted(k for k, _ in ledger.calls) == sorted(set(k for k, _ in ledger.calls))
    assert len(ledger.calls) == 3
    assert pump.receive_all() == []


def test_a_create_killed_after_its_pack_is_written_is_retried_with_its_key_and_loses_nothing(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    ledger = Ledger()
    with_ledger(svc, ledger)
    # Given a batch whose request dies after its pack and cursor are written, before its hand-over's send
    svc.dispatcher.crash = CrashAt("dispatch.before_send")
    requests = [(CreateJobRequest(type="one_off", handler="test.ledger", run_at=DUE), None)]
    with pytest.raises(Crash):
        svc.job_service.submit_batch(requests, tenant="t", idempotency_key="k")
    # When the client retries it with its key
    (answer,) = svc.job_service.submit_batch(requests, tenant="t", idempotency_key="k")
    assert isinstance(answer, Submitted)
    pump.run_due(DUE + timedelta(seconds=5))
    # Then its one job ran once
    assert runs_by_key(svc, answer.job_id) == {DUE: "SUCCEEDED"}
    assert len(ledger.calls) == 1
