"""Crash a dispatcher or a worker between any two steps: no tick is lost, none has two effects.

Invariants checked after every scenario (DESIGN.md 1 and 2):
- every due (job_id, scheduled_for) has exactly one run row, and it is SUCCEEDED;
- no run row was ever written twice as a success (one row per key, by construction of the key,
  and the SUCCEEDED transition is a compare-and-set from RUNNING held by one lease owner).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.handlers import HandlerRegistry, RunContext
from jobsched.ports import Crash, FakeClock
from jobsched.services.dispatch import Dispatcher
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import CrashAt, Pump, run_rows


def runs_by_key(svc: Services, job_id: str) -> dict[datetime, str]:
    rows = run_rows(svc.settings.runs_table, job_id)
    keys = [r["SK"]["S"] for r in rows]
    assert len(keys) == len(set(keys)), "two rows for one firing"
    return {times.parse_stored(r["scheduled_for"]["S"]): r["status"]["S"] for r in rows}


def fresh_dispatcher(svc: Services) -> Dispatcher:
    """A new process: same stores, new identity, no crash injected."""
    return Dispatcher(
        jobs=svc.jobs,
        runs=svc.runs,
        queue=svc.queue,
        settings=svc.settings,
        clock=svc.clock,
        max_workers=1,  # moto in-process is not thread-safe
        io_workers=1,
        packs=svc.dispatcher.packs,
    )


@pytest.mark.parametrize(
    "point",
    ["dispatch.before_send", "dispatch.after_send", "dispatch.after_stamp", "dispatch.before_release"],
)
def test_a_dispatcher_killed_after_any_step_loses_no_tick(
    svc: Services, pump: Pump, clock: FakeClock, point: str
) -> None:
    # Given a 10-second cron (the API hands ticks up to T0+90 s over) and a one-off at T0+130 s
    cron = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="*/10 * * * * *"),
        tenant="t",
        idempotency_key="a",
    )
    later = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=130)),
        tenant="t",
        idempotency_key="b",
    )
    # When the dispatcher pass at T0+60 s dies at `point`
    clock.set(T0 + timedelta(seconds=60))
    svc.dispatcher.crash = CrashAt(point)
    with pytest.raises(Crash):
        svc.dispatcher.dispatch_all()
    pump.run_due(T0 + timedelta(seconds=120))
    # and a fresh dispatcher carries on at the next tick
    clock.set(T0 + timedelta(seconds=120))
    fresh_dispatcher(svc).dispatch_all()
    pump.run_due(T0 + timedelta(seconds=210))
    # Then every tick up to the second pass's window (T0+210 = 120 + 90) ran exactly once
    cron_runs = runs_by_key(svc, cron.job_id)
    expected = [T0 + timedelta(seconds=10 * i) for i in range(1, 22)]
    assert sorted(cron_runs) == expected
    assert all(cron_runs[t] == "SUCCEEDED" for t in expected)
    assert runs_by_key(svc, later.job_id) == {T0 + timedelta(seconds=130): "SUCCEEDED"}
    assert pump.outcomes["succeeded"] == len(expected) + 1
    assert pump.receive_all() == []


class Ledger:
    """Every handler invocation, as an append-only list of (effect_key, attempt)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.crash_first = False

    def handler(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, int]:
        self.calls.append((ctx.effect_key, ctx.attempt))
        if self.crash_first and len(self.calls) == 1:
            raise Crash("mid-handler")
        return {"attempt": ctx.attempt}


@pytest.mark.parametrize(
    ("fast_path", "point", "handler_calls", "attempt"),
    [
        # leased first (takeovers, long runs, non-idempotent jobs): every attempt leaves its trace
        (False, "run.after_lease", 1, 2),  # died holding the lease: the next receive takes it over
        (False, "mid_handler", 2, 2),  # died inside the handler: it runs again (same effect key)
        (False, "run.after_handler", 2, 2),  # died before recording: runs again, one effect
        (False, "run.after_record", 1, 1),  # died before acking: the redelivery finds it done
        # the one-write fast path: an attempt that died before its write left nothing behind, so
        # the redelivery is attempt 1 again (bounded by the queue's redrive limit, not max_attempts)
        (True, "run.after_lease", 1, 1),
        (True, "mid_handler", 2, 1),
        (True, "run.after_handler", 2, 1),
        (True, "run.after_record", 1, 1),
    ],
)
def test_a_worker_killed_at_any_step_still_runs_the_tick_once(
    svc: Services,
    pump: Pump,
    clock: FakeClock,
    fast_path: bool,
    point: str,
    handler_calls: int,
    attempt: int,
) -> None:
    svc.worker.fast_path = fast_path
    ledger = Ledger()
    registry = HandlerRegistry()
    registry.register("test.ledger", ledger.handler)
    svc.worker.registry = svc.job_service.registry = registry
    if point == "mid_handler":
        ledger.crash_first = True
    else:
        svc.worker.crash = CrashAt(point)
    # Given a one-off due in 5 s
    job = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="test.ledger", run_at=T0 + timedelta(seconds=5)),
        tenant="t",
        idempotency_key="w",
    )
    # When the first worker dies at `point`
    assert pump.run_due(T0 + timedelta(seconds=5))["crashed"] == 1
    # and its lease runs out, so the message surfaces again for another worker
    pump.expire_leases(svc.settings.lease_seconds)
    outcome = pump.run_due()
    # Then the run finished exactly once
    assert runs_by_key(svc, job.job_id) == {T0 + timedelta(seconds=5): "SUCCEEDED"}
    assert (
        outcome == Counter({"succeeded": 1})
        if point != "run.after_record"
        else outcome == Counter({"duplicate": 1})
    )
    assert len(ledger.calls) == handler_calls
    assert {key for key, _ in ledger.calls} == {
        f"{job.job_id}-{int((T0 + timedelta(seconds=5)).timestamp() * 1000)}"
    }
    run = svc.runs.get(job.job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.attempt == attempt
    # and the one-off is COMPLETED, whichever receive recorded its run
    assert svc.job_service.get(job.job_id, tenant="t").job.status == "COMPLETED"
    # and nothing is left in the queue
    assert pump.receive_all() == []


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "leased"])
def test_a_worker_killed_after_its_handler_then_a_cancel_records_the_run_lost_not_cancelled(
    svc: Services, pump: Pump, clock: FakeClock, fast_path: bool
) -> None:
    # Given a one-off whose worker dies after the handler ran, before recording it (DynamoDB: the
    # start marker is the only trace the fast path leaves)
    svc.worker.fast_path = fast_path
    ledger = Ledger()
    registry = HandlerRegistry()
    registry.register("test.ledger", ledger.handler)
    svc.worker.registry = svc.job_service.registry = registry
    svc.worker.crash = CrashAt("run.after_handler")
    job = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="test.ledger", run_at=T0 + timedelta(seconds=5)),
        tenant="t",
        idempotency_key="w",
    )
    assert pump.run_due(T0 + timedelta(seconds=5))["crashed"] == 1
    # When its leases lapse, a cancel answers 200, and the message surfaces again
    pump.expire_leases(svc.settings.lease_seconds)
    assert svc.job_service.cancel(job.job_id, tenant="t").status == "CANCELLED"
    outcome = pump.run_due()
    # Then the run is recorded LOST (it may have run), not CANCELLED (it never ran): the handler
    # ran once, and is not run again on a cancelled job
    assert runs_by_key(svc, job.job_id) == {T0 + timedelta(seconds=5): "LOST"}
    assert outcome == Counter({"lost": 1}) and len(ledger.calls) == 1
    assert pump.receive_all() == []


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "leased"])
def test_a_worker_killed_before_handing_a_failure_over_then_a_cancel_still_hands_it_over(
    svc: Services, pump: Pump, clock: FakeClock, fast_path: bool
) -> None:
    # Given a retried one-off whose first attempt failed, recorded FAILED, and whose worker died
    # before starting the failure workflow
    svc.worker.fast_path = fast_path
    svc.worker.crash = CrashAt("run.after_record")
    job = svc.job_service.submit(
        CreateJobRequest(
            type="one_off", handler="demo.fail", run_at=T0 + timedelta(seconds=5), max_attempts=3
        ),
        tenant="t",
        idempotency_key="f",
    )
    assert pump.run_due(T0 + timedelta(seconds=5))["crashed"] == 1
    # When its leases lapse, a cancel answers 200, and the message surfaces again
    pump.expire_leases(svc.settings.lease_seconds)
    assert svc.job_service.cancel(job.job_id, tenant="t").status == "CANCELLED"
    pump.run_due()
    # Then the failure is handed over to its workflow, once, not left FAILED for good. The workflow
    # runs on moto's threads in real time: it is asserted on once it has ended. It re-arms the run
    # (attempt 1 of 3), and its retry meets the cancelled job: the run ends there, final, its history
    # keeping the failed attempt and no other (a cancelled job starts nothing).
    sfn = svc.failures.state_machines.client  # type: ignore[attr-defined]
    executions = sfn.list_executions(stateMachineArn=svc.settings.failure_workflow_arn)["executions"]
    assert len(executions) == 1
    deadline = time.monotonic() + 30
    while sfn.describe_execution(executionArn=executions[0]["executionArn"])["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the failure workflow did not end"
        time.sleep(0.05)
    pump.run_due(T0 + timedelta(minutes=10))
    [run] = svc.runs.recent(job.job_id, limit=5)
    assert run.status.value in ("CANCELLED", "LOST")
    assert [(a.attempt, a.error.type if a.error else None) for a in run.attempts] == [(1, "DemoFailure")]
    assert pump.receive_all() == []


def test_a_worker_killed_mid_run_of_an_allow_job_leaves_no_marker_that_refuses_a_later_cancel(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given an `allow` job every 10 s (counted runs) whose first run's worker dies mid-run
    job = svc.job_service.submit(
        CreateJobRequest(
            type="recurring", handler="demo.echo", cron_expr="*/10 * * * * *", overlap_policy="allow"
        ),
        tenant="t",
        idempotency_key="allow",
    )
    svc.worker.crash = CrashAt("run.after_lease")
    assert pump.run_due(T0 + timedelta(seconds=10))["crashed"] == 1
    # When its message comes back and runs, and the job's ticks up to 12:01:00 run after it
    pump.expire_leases(svc.settings.lease_seconds)
    pump.run_due(T0 + timedelta(seconds=60))
    assert runs_by_key(svc, job.job_id)[T0 + timedelta(seconds=10)] == "SUCCEEDED"
    # Then a cancel right after the last run answers 200: nothing is in flight (DynamoDB: the dead
    # receive's entry was re-entered and removed by its redelivery; a bare count stayed at 1, and
    # the last run's renewal of its lease refused the cancel)
    assert svc.job_service.cancel(job.job_id, tenant="t").status == "CANCELLED"


def test_a_redelivery_while_the_holder_is_alive_is_left_alone(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # SQS may deliver one message twice at once; on the leased path the second receive must not
    # run it again (the fast path writes nothing before the handler: see the next test)
    from jobsched.services.run import Delivery, InFlightElsewhere

    svc.worker.fast_path = False
    job = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5)),
        tenant="t",
        idempotency_key="x",
    )
    [message] = pump.receive_all()
    clock.set(T0 + timedelta(seconds=5))
    svc.worker.crash = CrashAt("run.after_lease")
    with pytest.raises(Crash):
        svc.worker.process(Delivery(message["MessageId"], message["ReceiptHandle"], message["Body"]))
    svc.worker.crash = lambda point: None
    with pytest.raises(InFlightElsewhere):
        svc.worker.process(Delivery(message["MessageId"], "another-receipt", message["Body"]))
    run = svc.runs.get(job.job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == "LEASED" and run.attempt == 1


def test_two_dispatchers_never_drain_one_shard_at_once(svc: Services, pump: Pump, clock: FakeClock) -> None:
    svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=150)),
        tenant="t",
        idempotency_key="y",
    )
    clock.set(T0 + timedelta(seconds=60))
    first, second = fresh_dispatcher(svc), fresh_dispatcher(svc)
    # The first holds every shard's lease (it died mid-pass); the second skips them all
    first.crash = CrashAt("dispatch.before_release", times=svc.settings.shard_count)
    for shard in range(svc.settings.shard_count):
        with pytest.raises(Crash):
            first.dispatch_shard(shard)
    report = second.dispatch_all()
    assert not any(s.leased for s in report.shards)
    # until the lease runs out before the next tick
    clock.set(T0 + timedelta(seconds=120))
    assert all(s.leased for s in second.dispatch_all().shards)


def test_two_deliveries_at_once_on_the_fast_path_run_the_handler_once_and_leave_the_twin(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # The fast path leases nothing before the handler, but the first delivery holds the slot for its
    # message, live: a duplicate delivery of that very message in flight at the same time is left to
    # its visibility (it finds the run finished later). Before (tests/sim seed 24), it took the live
    # hold for a dead receive's, ran the handler too, and its end freed the slot mid-run.
    from jobsched.services.run import Delivery, InFlightElsewhere, Outcome

    ledger = Ledger()
    registry = HandlerRegistry()
    registry.register("test.ledger", ledger.handler)
    svc.worker.registry = svc.job_service.registry = registry
    job = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="test.ledger", run_at=T0 + timedelta(seconds=5)),
        tenant="t",
        idempotency_key="x",
    )
    [message] = pump.receive_all()
    clock.set(T0 + timedelta(seconds=5))
    first = Delivery(message["MessageId"], message["ReceiptHandle"], message["Body"])
    second = Delivery(message["MessageId"], "another-receipt", message["Body"])
    seen: list[str] = []
    started: list[str] = []

    def interleave(point: str) -> None:
        # the second delivery comes between the first's handler and the first's write
        if point == "run.after_handler" and not started:
            started.append(point)
            try:
                seen.append(svc.worker.process(second).value)
            except InFlightElsewhere as exc:
                seen.append(type(exc).__name__)

    svc.worker.crash = interleave
    assert svc.worker.process(first) == Outcome.SUCCEEDED
    assert seen == ["InFlightElsewhere"]
    assert runs_by_key(svc, job.job_id) == {T0 + timedelta(seconds=5): "SUCCEEDED"}
    assert len(ledger.calls) == 1
    run = svc.runs.get(job.job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.attempt == 1 and len(run.attempts) == 1


def test_a_worker_whose_run_was_taken_over_leaves_the_message_to_the_taker(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Worker A leases a run and stalls past its lease; worker B takes the run over and dies holding
    # it. A must not acknowledge the message (its id is B's too): acknowledged, nothing would ever
    # revive the run B left LEASED.
    import dataclasses

    from jobsched.services.run import Delivery, LeaseLost, Outcome

    job = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5)),
        tenant="t",
        idempotency_key="taken",
    )
    [message] = pump.receive_all()
    clock.set(T0 + timedelta(seconds=5))
    a = dataclasses.replace(svc.worker, worker_id="worker-a", fast_path=False)
    b = dataclasses.replace(
        svc.worker, worker_id="worker-b", fast_path=False, crash=CrashAt("run.after_lease")
    )
    stalled: list[str] = []

    def stall(point: str) -> None:
        if point == "run.after_lease" and not stalled:
            stalled.append(point)
            clock.advance(svc.settings.lease_seconds + 1)  # A's lease runs out while it stalls
            with pytest.raises(Crash):
                b.process(Delivery(message["MessageId"], "receipt-b", message["Body"]))

    a.crash = stall
    with pytest.raises(LeaseLost):
        a.process(Delivery(message["MessageId"], message["ReceiptHandle"], message["Body"]))
    run = svc.runs.get(job.job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == "LEASED" and run.attempt == 2  # B's, B is dead
    # the message was left in the queue: once B's lease runs out, a redelivery finishes the run
    clock.advance(svc.settings.lease_seconds + 1)
    c = dataclasses.replace(svc.worker, worker_id="worker-c", crash=lambda point: None)
    assert c.process(Delivery(message["MessageId"], "receipt-c", message["Body"])) == Outcome.SUCCEEDED
    assert runs_by_key(svc, job.job_id) == {T0 + timedelta(seconds=5): "SUCCEEDED"}


def test_a_worker_killed_after_its_handler_whose_slot_a_later_tick_took_is_retried_not_skipped(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a per-minute job whose 12:01 tick's worker dies after the handler ran (fast path: its
    # start marker, the slot held by its message, is the only trace it leaves), and an edit that
    # moves the schedule to every five minutes
    ledger = Ledger()
    registry = HandlerRegistry()
    registry.register("test.ledger", ledger.handler)
    svc.worker.registry = svc.job_service.registry = registry
    svc.worker.crash = CrashAt("run.after_handler")
    clock.advance(0.5)
    job = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="test.ledger", cron_expr="* * * * *", catchup="one"),
        tenant="t",
        idempotency_key="w",
    )
    svc.dispatcher.dispatch_all()
    assert pump.run_due(T0 + timedelta(seconds=60))["crashed"] == 1
    svc.worker.crash = lambda point: None
    svc.schedule.edit(job.job_id, PatchJobRequest(cron_expr="*/5 * * * *"), tenant="t")
    # When the 12:05 tick takes the lapsed slot (the dead run's marker) while the 12:01 message is
    # still in flight, and then the 12:01 message surfaces again
    clock.set(T0 + timedelta(seconds=240))
    svc.dispatcher.dispatch_all()
    # (The 12:05 tick kept 12:01's start on its row and sent a copy of its message in case the
    # dead receive's is gone, Worker._revive: the pump plays it at once, and it is left, no receive
    # holding the run in that instant.)
    assert pump.run_due(T0 + timedelta(seconds=300)) == Counter({"succeeded": 1, "left": 1})
    pump.expire_leases(svc.settings.lease_seconds)
    outcome = pump.run_due()
    # Then 12:01 is taken over as a retry and recorded as executed, not SKIPPED "rescheduled"
    rows = runs_by_key(svc, job.job_id)
    assert rows[T0 + timedelta(seconds=60)] == "SUCCEEDED" and outcome["succeeded"] == 1
    run = svc.runs.get(job.job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.attempt == 2
    key = f"{job.job_id}-{int((T0 + timedelta(seconds=60)).timestamp() * 1000)}"
    assert [attempt for effect_key, attempt in ledger.calls if effect_key == key] == [1, 2]
