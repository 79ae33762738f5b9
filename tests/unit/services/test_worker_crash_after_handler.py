"""A run whose worker died after its handler ran is recorded as executed (tests/sim, issue 19).

The fast path writes nothing on the run row before the handler: the one trace of a started run is
its start marker on the job, the slot held by its message. Its redelivery met the tick's gate
(a pause, an edit, a cancel that went through once the marker lapsed) and wrote SKIPPED or
CANCELLED over a run that executed (seeds 4, 5, 6, 7, 9 of 10,000).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.domain.keys import run_id_for
from jobsched.domain.limits import Concurrency
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import StoreUnreachable, TransientStoreError
from jobsched.handlers import RunContext
from jobsched.ports import Crash, no_crash
from jobsched.services.run import DEAD_HOLDER, Delivery, InFlightElsewhere, Outcome
from jobsched.services.runs import RunService
from tests.unit.services.conftest import T0, World

VISIBILITY = 300  # the world's queue: a message not acknowledged surfaces again after this long


def crash_once_at(point: str) -> Any:
    """A worker process that dies the first time it reaches `point`."""
    left = [1]

    def crash(reached: str) -> None:
        if reached == point and left[0]:
            left[0] -= 1
            raise Crash(point)

    return crash


def _effect(world: World) -> list[tuple[str, int]]:
    calls: list[tuple[str, int]] = []

    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append((ctx.effect_key, ctx.attempt))
        return {"ok": True}

    world.handler("test.effect", effect)
    return calls


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "leased"])
def test_a_run_whose_worker_died_after_its_handler_is_not_cancelled_by_a_later_cancel(
    world: World, fast_path: bool
) -> None:
    # Given a one-off due now, whose worker dies after the handler ran, before recording it
    calls = _effect(world)
    request = CreateJobRequest(type="one_off", handler="test.effect", run_at=T0 + timedelta(seconds=5))
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.svc.worker.fast_path = fast_path
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    # When its start marker (and the leased path's row lease) lapsed, a cancel answers 200, and the
    # message comes back
    world.clock.advance(VISIBILITY + 1)
    world.svc.job_service.cancel(job_id, tenant="t")
    world.svc.worker.crash = no_crash
    outcomes = world.deliver()
    # Then the run is recorded LOST (it may have run; a cancelled job starts nothing), not CANCELLED
    # as if it never ran; the handler ran once. Before, the redelivery wrote CANCELLED.
    assert outcomes == [Outcome.LOST] and len(calls) == 1
    [run] = world.runs.recent(job_id, limit=5)
    assert run.status == RunStatus.LOST and run.error is not None
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.CANCELLED


def minute_job_dead_after_handler(world: World) -> tuple[str, list[tuple[str, int]]]:
    """A per-minute job whose 12:01 tick's worker died after the handler ran (the fleet healthy
    again since): its id, and the handler's calls."""
    calls = _effect(world)
    request = CreateJobRequest(type="recurring", handler="test.effect", cron_expr="* * * * *", catchup="one")
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.set(T0 + timedelta(seconds=60))
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    return job_id, calls


def test_a_run_whose_worker_died_after_its_handler_runs_again_though_an_edit_moved_the_schedule(
    world: World,
) -> None:
    # Given a per-minute job whose 12:01 tick's worker dies after the handler ran
    job_id, calls = minute_job_dead_after_handler(world)
    # When an edit moves the schedule off 12:01, and the tick's message comes back
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/5 * * * *"), tenant="t")
    world.clock.advance(VISIBILITY)
    outcomes = world.deliver()
    # Then the run goes on and is recorded as executed: the handler ran again (at least once) under
    # the same effect key (it started before the edit). Before, the redelivery met the edit's gate
    # and wrote it SKIPPED ("rescheduled").
    assert Outcome.SUCCEEDED in outcomes
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.SUCCEEDED
    assert len(calls) == 2 and calls[0] == calls[1]


def test_a_run_whose_worker_died_after_its_handler_is_not_skipped_once_a_later_tick_took_its_slot(
    world: World,
) -> None:
    # Given a per-minute job whose 12:01 tick's worker dies after the handler ran, and an edit that
    # moves the schedule to every five minutes
    job_id, calls = minute_job_dead_after_handler(world)
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/5 * * * *"), tenant="t")
    # When the 12:05 tick, a little late, takes the dead run's lapsed slot (its start marker) and
    # succeeds, and then the 12:01 message comes back, every minute until all is settled
    lapsed = T0 + timedelta(seconds=60 + world.svc.worker.hold_seconds() + 1)
    assert T0 + timedelta(seconds=300) < lapsed < T0 + timedelta(seconds=60 + VISIBILITY)
    world.clock.set(lapsed)
    world.svc.dispatcher.dispatch_all()
    assert world.deliver() == [Outcome.SUCCEEDED]
    for minute in range(6, 16):
        world.clock.set(T0 + timedelta(seconds=60 * minute))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    # Then 12:01 is recorded as executed: taken over as attempt 2 (at least once, one effect key).
    # Before, its redelivery found the 12:05 hold where its marker was and, the schedule moved, wrote
    # a run that executed SKIPPED "rescheduled" (tests/sim seed 82).
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and (run.status, run.attempt) == (RunStatus.SUCCEEDED, 2)
    first = [c for c in calls if c[1] == 1]
    assert [c[0] for c in calls].count(first[0][0]) == 2


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "leased"])
def test_a_failed_run_whose_worker_died_before_handing_it_over_is_handed_over_after_a_cancel(
    world: World, fast_path: bool
) -> None:
    # Given a retried one-off whose first attempt failed and was recorded FAILED, its worker dead
    # before it handed the failure to the workflow (run.after_record)
    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        raise RuntimeError("fails")

    world.handler("test.fails", effect)
    request = CreateJobRequest(
        type="one_off", handler="test.fails", run_at=T0 + timedelta(seconds=5), max_attempts=3
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.svc.worker.fast_path = fast_path
    world.svc.worker.crash = crash_once_at("run.after_record")
    with pytest.raises(Crash):
        world.deliver()
    # When its markers lapsed, a cancel answers 200, and the message comes back
    world.clock.advance(VISIBILITY + 1)
    world.svc.job_service.cancel(job_id, tenant="t")
    world.svc.worker.crash = no_crash
    world.deliver()
    # Then the failure is handed over (the workflow ends it: re-armed, its retry then cancelled, or
    # dead-lettered), not left FAILED with no workflow and no message for good (tests/sim seed 48:
    # the redelivery, seeing the start marker, found the row not claimable and dropped itself)
    [run] = world.runs.recent(job_id, limit=5)
    assert run.status == RunStatus.FAILED
    assert [p["attempt"] for p in world.machines.started.values()] == [1]


def test_a_failed_run_whose_worker_died_before_handing_it_over_and_whose_slot_was_taken_is_handed_over(
    world: World,
) -> None:
    # Given a job every three minutes whose 12:03 attempt failed and was recorded FAILED, its worker
    # dead before it handed the failure to the workflow (run.after_record)
    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        if ctx.scheduled_for == T0 + timedelta(minutes=3):
            raise RuntimeError("fails")
        return {"ok": True}

    world.handler("test.fails", effect)
    request = CreateJobRequest(
        type="recurring", handler="test.fails", cron_expr="*/3 * * * *", max_attempts=3
    )
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.set(T0 + timedelta(minutes=3))
    world.svc.dispatcher.dispatch_all()
    world.svc.worker.crash = crash_once_at("run.after_record")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When the 12:06 tick takes its lapsed slot (where its start marker was), the job is cancelled,
    # and the 12:03 message comes back
    world.clock.set(T0 + timedelta(minutes=6))
    world.svc.dispatcher.dispatch_all()
    assert world.deliver() == [Outcome.SUCCEEDED]
    world.clock.advance(1)
    assert world.svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"
    world.clock.set(T0 + timedelta(minutes=3, seconds=VISIBILITY + 1))
    world.deliver()
    # Then its failure is handed over (the workflow ends it), not left FAILED with no workflow for
    # good (tests/sim seed 4: the redelivery met the cancelled job as a run that never started)
    run = world.runs.get(job_id, T0 + timedelta(minutes=3))
    assert run is not None and run.status == RunStatus.FAILED
    assert [p["attempt"] for p in world.machines.started.values()] == [1]


def test_a_duplicate_delivery_while_its_twin_runs_is_left_alone_and_runs_nothing(world: World) -> None:
    # Given a one-off whose message SQS hands out twice at once: while the first receive's handler
    # runs, the second receive of the very same message is processed
    calls: list[int] = []
    twin: list[object] = []
    [received] = [None]

    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            assert received is not None
            try:
                twin.append(world.svc.worker.process(Delivery(received.message_id, "twin", received.body)))
            except InFlightElsewhere as exc:
                twin.append(type(exc).__name__)
        return {"ok": True}

    world.handler("test.effect", effect)
    request = CreateJobRequest(type="one_off", handler="test.effect", run_at=T0 + timedelta(seconds=5))
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    [received] = world.queue.receive()
    # When both receives are processed
    outcome = world.svc.worker.process(Delivery(received.message_id, received.receipt_handle, received.body))
    # Then the twin is left in the queue (its visibility governs; it finds the run finished later) and
    # runs nothing: the handler ran once. Before, the twin took the live hold of its own message for
    # a dead receive's, ran the handler beside it, and its end freed the slot while the first ran
    # (tests/sim seed 24: an overlap under skip, and a cancel answered 200 while a run ran)
    assert outcome == Outcome.SUCCEEDED and twin == ["InFlightElsewhere"] and calls == [1]
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == RunStatus.SUCCEEDED


def test_a_run_whose_worker_died_after_its_handler_and_whose_redelivery_died_leased_is_lost_on_cancel(
    world: World,
) -> None:
    # Given a per-minute job whose 12:01 tick's worker died after the handler ran (fast path: no row),
    # and whose redelivery, on the leased path, died after its claim (the row LEASED, never started)
    job_id, calls = minute_job_dead_after_handler(world)
    redelivered = T0 + timedelta(seconds=60 + VISIBILITY)
    world.clock.set(redelivered)
    world.svc.worker.fast_path = False
    world.svc.worker.crash = crash_once_at("run.after_lease")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    row = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert row is not None and row.status == RunStatus.LEASED
    # When a later tick takes the lapsed slot (where the run's start marker was) and succeeds, the
    # claim's lease lapses, a cancel answers 200, and the 12:01 message comes back
    world.clock.set(redelivered + timedelta(seconds=world.svc.worker.hold_seconds() + 1))
    world.svc.dispatcher.dispatch_all()
    assert Outcome.SUCCEEDED in world.deliver()
    world.clock.set(redelivered + timedelta(seconds=VISIBILITY + 1))
    assert world.svc.job_service.cancel(job_id, tenant="t").status == "CANCELLED"
    world.deliver()
    # Then 12:01 is recorded LOST (it may have run: its handler did), not CANCELLED as if it never
    # ran. Before, the LEASED row, its lease lapsed, was cancelled (tests/sim seeds 8765, 1422; 83,
    # 9573, 8173: a LEASED takeover of a RUNNING row that never recorded)
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.LOST, run
    assert len([c for c in calls if c[0] == calls[0][0]]) == 1


def test_a_run_whose_worker_died_after_its_handler_is_not_skipped_when_its_takers_answer_failed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a per-minute job whose 12:01 tick's worker dies after the handler ran; the ticks after it
    # meet its live hold and are skipped (they never started)
    job_id, calls = minute_job_dead_after_handler(world)
    for minute in range(2, 6):
        world.clock.set(T0 + timedelta(seconds=60 * minute))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    # When the 12:06 tick takes the lapsed slot over and its write's answer times out (the write
    # applied: its receive dies before keeping the dead holder's start on its row), and then the 12:01
    # message comes back while that hold is live
    hold_and_read = world.jobs.hold_and_read
    timed_out: list[str] = []

    def answer_lost(job_id: str, *, run: str, **kwargs: Any) -> Any:
        answer = hold_and_read(job_id, run=run, **kwargs)
        if answer[0] and answer[1] is not None and answer[1].active_run not in (None, run) and not timed_out:
            timed_out.append(run)
            raise StoreUnreachable("read timeout after the hold applied")
        return answer

    monkeypatch.setattr(world.jobs, "hold_and_read", answer_lost)
    world.clock.set(T0 + timedelta(seconds=360))
    world.svc.dispatcher.dispatch_all()
    outcomes: list[object] = []
    for m in sorted(world.queue.receive(), key=lambda m: "12:01" in m.body):  # 12:06's, then 12:01's
        try:
            outcomes.append(world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body)))
        except (InFlightElsewhere, StoreUnreachable) as exc:
            outcomes.append(type(exc).__name__)
    # Then the 12:01 run is not written SKIPPED: its message finds itself the holder the taker
    # displaced (the taker's write recorded it), keeps its start on its row, and waits for the slot.
    # Before, it met the taker's live hold and a PENDING row and was skipped "overlap" (tests/sim
    # seeds 603, 5978, 6757, 8442).
    assert timed_out == ["2026-11-30T12:06:00.000Z"] and outcomes == ["StoreUnreachable", "WaitBehind"]
    first = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert first is not None and first.status == RunStatus.RUNNING
    # and once the messages come back, it is taken over (at least once, under one effect key)
    for minute in range(7, 16):
        world.clock.set(T0 + timedelta(seconds=60 * minute))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    first = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert first is not None and (first.status, first.attempt) == (RunStatus.SUCCEEDED, 2)
    assert [c[0] for c in calls].count(calls[0][0]) == 2


@pytest.mark.parametrize("overlap", ["skip", "allow"], ids=["slot", "in_flight"])
def test_a_run_whose_worker_died_after_its_handler_is_not_skipped_by_another_message_of_it(
    world: World, overlap: str
) -> None:
    # Given a per-minute job whose 12:01 tick's worker dies after the handler ran (its message
    # invisible until 12:06), and an edit that moves the schedule off 12:01
    calls = _effect(world)
    request = CreateJobRequest(
        type="recurring", handler="test.effect", cron_expr="* * * * *", overlap_policy=overlap  # type: ignore[arg-type]
    )
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.set(T0 + timedelta(seconds=60))
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/5 * * * *"), tenant="t")
    # When another message of the same run (a second send of the tick) arrives once the dead
    # receive's marker (the slot, or its in-flight entry) has lapsed, before the first comes back
    world.clock.set(T0 + timedelta(seconds=60 + world.svc.worker.hold_seconds() + 1))
    tick = RunMessage(job_id=job_id, scheduled_for="2026-11-30T12:01:00.000Z", guard=overlap == "skip")
    world.queue.send([Outgoing(tick, 0)])
    outcomes = world.deliver()
    # Then that message finds the other message's marker, proof that the run started, and runs it
    # again (at least once, one effect key): recorded as executed. Before, it met the edit as a
    # fresh tick and wrote SKIPPED "rescheduled" (tests/sim seeds 533, 2486, 5660).
    assert outcomes == [Outcome.SUCCEEDED]
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.SUCCEEDED
    assert len(calls) == 2 and calls[0] == calls[1]
    # and the first message, back at last, finds it finished
    world.clock.set(T0 + timedelta(seconds=60 + VISIBILITY + 1))
    assert world.deliver() == [Outcome.DUPLICATE]


def test_a_taker_that_cannot_keep_a_dead_holders_start_gives_the_slot_back_and_waits(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a per-minute job whose 12:01 tick's worker dies after the handler ran; the ticks after it
    # meet its live hold and are skipped (they never started)
    job_id, calls = minute_job_dead_after_handler(world)
    for minute in range(2, 6):
        world.clock.set(T0 + timedelta(seconds=60 * minute))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    # When the 12:06 tick takes the lapsed slot over and the store fails every write that would keep
    # the dead holder's start on its row
    persist_running = world.runs.persist_running

    def failing(job_id: str, sf: str, *, lease: Any, **kwargs: Any) -> Any:
        if lease.worker == DEAD_HOLDER:
            raise TransientStoreError("sim: InternalServerError on persist_running")
        return persist_running(job_id, sf, lease=lease, **kwargs)

    monkeypatch.setattr(world.runs, "persist_running", failing)
    world.clock.set(T0 + timedelta(seconds=360))
    world.svc.dispatcher.dispatch_all()
    [m] = [m for m in world.queue.receive() if "12:06" in m.body]
    with pytest.raises(TransientStoreError):
        world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body))
    # Then the 12:06 tick ran nothing and gave the slot back: the dead run's hold is its start marker
    # again, not left to the one displaced record the next takeover overwrites (tests/sim seed 3369)
    job = world.jobs.get_job(job_id)
    assert job is not None and job.active_run == "2026-11-30T12:01:00.000Z"
    assert [c for c in calls if c[1] == 1] == calls[:1] and len(calls) == 1
    # And once the store is well and the 12:01 message comes back, the run is recorded as executed
    monkeypatch.setattr(world.runs, "persist_running", persist_running)
    for minute in range(7, 16):
        world.clock.set(T0 + timedelta(seconds=60 * minute))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    first = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert first is not None and first.status == RunStatus.SUCCEEDED
    assert [c[0] for c in calls].count(calls[0][0]) == 2


@pytest.mark.parametrize("then", ["edit", "run_cancel"])
def test_a_run_whose_worker_died_after_its_handler_keeps_its_start_through_a_key_wait(
    world: World, then: str
) -> None:
    # Given a per-minute job with concurrency key "db" (limit 1), whose 12:01 tick's worker dies after
    # the handler ran (fast path: nothing on the row, its start marker left on the job)
    calls = _effect(world)
    request = CreateJobRequest(
        type="recurring",
        handler="test.effect",
        cron_expr="* * * * *",
        concurrency=Concurrency(key="db", limit=1),
    )
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.set(T0 + timedelta(seconds=60))
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When its message comes back and finds the key full (another run holds its only slot), so the
    # run waits in a delayed copy (a new message), and meanwhile an edit moves the schedule off 12:01,
    # or a client cancels the run
    assert world.svc.worker.limits is not None
    world.clock.set(T0 + timedelta(seconds=60 + VISIBILITY + 1))
    now = world.clock.now()
    assert world.svc.worker.limits.acquire(
        "t", "db", holder="other", limit=1, until=now + timedelta(seconds=600), now=now
    )
    assert world.deliver() == [Outcome.WAITING]
    sf = T0 + timedelta(seconds=60)
    if then == "edit":
        world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/5 * * * *"), tenant="t")
    else:
        answer = RunService(job_service=world.svc.job_service).cancel(run_id_for(job_id, sf), tenant="t")
        # the run may have run: "stopping" (202), not CANCELLED (200)
        assert answer.stopping and answer.status != RunStatus.CANCELLED
    world.svc.worker.limits.release("t", "db", holder="other")
    world.clock.advance(VISIBILITY)
    outcomes = world.deliver()
    # Then the copy knows the run started, though no marker is its own: the wait kept the start on
    # the row (RUNNING under a lapsed lease), and the copy takes it over (at least once, one effect
    # key), or records it LOST on the run cancel. Before, the copy met the edit as a fresh tick and
    # wrote SKIPPED "rescheduled", or the run cancel wrote the PENDING row CANCELLED, over a run that
    # executed (tests/sim KEY_SEEDS 128, 137, 530).
    run = world.runs.get(job_id, sf)
    assert run is not None
    if then == "edit":
        # (The skips are the ticks the edit took off the schedule, 12:03, :04 and :06: due before it,
        # it handed them over first, and the workers recorded them "rescheduled".)
        skipped = {r.scheduled_for for r in world.runs.recent(job_id, limit=20) if r.reason == "rescheduled"}
        assert outcomes.count(Outcome.SKIPPED) == len(skipped) == 3 and sf not in skipped
        assert (run.status, run.attempt) == (RunStatus.SUCCEEDED, 2)
        assert [c[0] for c in calls].count(calls[0][0]) == 2
    else:
        assert outcomes == [Outcome.LOST] and len(calls) == 1
        assert run.status == RunStatus.LOST


def test_a_key_wait_that_cannot_keep_its_runs_start_leaves_the_message_and_its_marker(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an `allow` job every minute with concurrency key "batch" (limit 1), whose 12:01 tick's
    # worker dies after the handler ran (fast path: its in-flight entry on the job is the one proof)
    calls = _effect(world)
    request = CreateJobRequest(
        type="recurring",
        handler="test.effect",
        cron_expr="* * * * *",
        overlap_policy="allow",
        concurrency=Concurrency(key="batch", limit=1),
    )
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.set(T0 + timedelta(seconds=60))
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When its message comes back to a full key, and keeping its start on the row fails both tries
    assert world.svc.worker.limits is not None
    world.clock.set(T0 + timedelta(seconds=60 + VISIBILITY + 1))
    now = world.clock.now()
    assert world.svc.worker.limits.acquire(
        "t", "batch", holder="other", limit=1, until=now + timedelta(seconds=600), now=now
    )
    persist_running = world.runs.persist_running

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise TransientStoreError("throttled")

    monkeypatch.setattr(world.runs, "persist_running", fails)
    [m] = world.queue.receive()
    with pytest.raises(TransientStoreError):
        world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body))
    # Then the receive does not wait (a wait drops its marker): the message stays, and so does the
    # run's in-flight entry, lapsed
    job = world.jobs.get_job(job_id)
    assert job is not None and any(k.startswith("2026-11-30T12:01:00.000Z#") for k in job.in_flight)
    # And when the job is cancelled later, the run that executed is never recorded CANCELLED (before,
    # the wait dropped the entry and the cancel wrote CANCELLED over it: tests/sim seed 5797)
    monkeypatch.setattr(world.runs, "persist_running", persist_running)
    world.svc.worker.limits.release("t", "batch", holder="other")
    world.svc.schedule.pause(job_id, tenant="t")
    for _ in range(4):
        world.clock.advance(VISIBILITY + 1)
        with contextlib.suppress(Exception):
            world.svc.job_service.cancel(job_id, tenant="t")
        world.deliver()
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status != RunStatus.CANCELLED
    assert len([c for c in calls if c[1] == 1]) == 1


@pytest.mark.parametrize("key_full", [False, True], ids=["key free", "key full"])
def test_a_one_offs_success_recorded_by_a_worker_that_died_before_settling_it_completes_the_job(
    world: World, key_full: bool
) -> None:
    # Given a one-off with a concurrency key whose worker recorded its success, then died before the
    # job's COMPLETED write (run.before_signal)
    calls = _effect(world)
    request = CreateJobRequest(
        type="one_off",
        handler="test.effect",
        run_at=T0 + timedelta(seconds=5),
        concurrency=Concurrency(key="db", limit=1),
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.svc.worker.crash = crash_once_at("run.before_signal")
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    # When its markers lapse and the message comes back (after another run took the key's slot)
    world.clock.advance(VISIBILITY + 1)
    if key_full:
        assert world.svc.worker.limits is not None
        now = world.clock.now()
        assert world.svc.worker.limits.acquire(
            "t", "db", holder="other", limit=1, until=now + timedelta(seconds=600), now=now
        )
    outcomes = world.deliver()
    # Then the redelivery finds the run recorded, runs nothing, and completes the job: before, it
    # left the one-off SCHEDULED for good (tests/e2e/test_restart.py; tests/sim seeds 2, 383)
    assert outcomes == [Outcome.DUPLICATE] and len(calls) == 1
    [run] = world.runs.recent(job_id, limit=5)
    assert run.status == RunStatus.SUCCEEDED
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED
    assert world.queue.peek() == []
