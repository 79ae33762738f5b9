"""A message that meets another message of its run holding the run leaves a delayed copy behind
(Worker._spare): the holder may be a late receive of a message deleted already, and die holding the
run with no message left to revive it (found by tests/sim, seeds 6925, 5924, 5109: stuck RUNNING,
LEASED; seed 6879: a cancelled one-off's redelivery left its run LEASED)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import StoreUnreachable
from jobsched.handlers import RunContext
from jobsched.ports import Crash, FakeClock, no_crash
from jobsched.services.run import Delivery, Outcome, hold_seconds
from tests.unit.services.conftest import T0, World
from tests.unit.services.test_worker_crash_after_handler import crash_once_at
from tests.unit.services.test_worker_record_faults import FailingWrite

TICK = T0 + timedelta(seconds=60)
SF = times.stored(TICK)
LEASE = 300  # the world's lease and visibility timeout


def _fails_once(world: World) -> list[int]:
    """The handler: attempt 1 fails, the others succeed; the attempts it ran."""
    calls: list[int] = []

    def handler(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("fails attempt 1")
        return {"ok": True}

    world.handler("t.fails_once", handler)
    return calls


def _received_twice(world: World, job_id: str, *, guard: bool) -> tuple[Delivery, Delivery]:
    """The tick's message A, sent now and received twice: its live receive, and a late one whose
    receipt goes stale once the live one deletes the message (SQS handed it out twice, or a batch
    reached it after its visibility ran out)."""
    world.clock.set(TICK)
    if not any(json.loads(body)["scheduled_for"] == SF for _, body in world.queue.peek()):
        world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=SF, guard=guard), 0)])
    [a] = [m for m in world.queue.receive() if json.loads(m.body)["scheduled_for"] == SF]
    return Delivery(a.message_id, a.receipt_handle, a.body), Delivery(a.message_id, "stale", a.body)


def _fail_and_rearm(world: World, job_id: str, live: Delivery) -> None:
    """A's live receive records attempt 1 FAILED and deletes A; the failure workflow re-arms the run
    (FAILED -> PENDING, attempt 1 kept) and sends its retry message B."""
    assert world.svc.worker.process(live) == Outcome.FAILED
    assert world.queue.delete(live.receipt_handle)
    assert world.runs.rearm(job_id, SF, attempt=1)
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=SF, guard=True), 0)])


def test_a_retry_that_meets_a_dead_late_receive_in_the_slot_leaves_a_copy_that_runs_the_retry(
    world: World,
) -> None:
    # Given a job (overlap skip: its runs hold the slot) whose tick's message A was received twice;
    # its live receive failed attempt 1, acknowledged A, and the run was re-armed with a retry B
    calls = _fails_once(world)
    request = CreateJobRequest(type="recurring", handler="t.fails_once", cron_expr="* * * * *")
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    live, late = _received_twice(world, job_id, guard=True)
    _fail_and_rearm(world, job_id, live)
    # and the late receive of A took the slot, ran the retry on the fast path and died after it
    world.svc.worker.crash = crash_once_at("run.after_handler")
    with pytest.raises(Crash):
        world.svc.worker.process(late)
    world.svc.worker.crash = no_crash
    # When B meets the dead receive's slot marker, still live
    outcomes = world.deliver()
    # Then B leaves a copy of itself behind, delayed past the marker. Before, B was acknowledged as
    # a spare copy and nothing was left to revive the run: PENDING for good (tests/sim seed 6925)
    assert outcomes == [Outcome.SPARE] and world.queue.depth() == 1
    assert world.deliver() == []  # not before the marker lapses
    # And once the marker has lapsed, the copy runs the retry to its end
    world.clock.advance(hold_seconds(LEASE) + 2)
    assert world.deliver() == [Outcome.SUCCEEDED]
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED
    assert calls == [1, 2, 2] and world.queue.depth() == 0


def test_a_retry_that_meets_a_dead_late_receives_live_lease_leaves_a_copy_that_takes_the_run_over(
    world: World,
) -> None:
    # Given a job whose runs are counted (overlap allow) and lease first (the leased path), whose
    # tick's message A was received twice; the live receive failed attempt 1 and acknowledged A, and
    # the run was re-armed with a retry B
    calls = _fails_once(world)
    world.svc.worker.fast_path = False
    request = CreateJobRequest(
        type="recurring", handler="t.fails_once", cron_expr="* * * * *", overlap_policy="allow"
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    live, late = _received_twice(world, job_id, guard=False)
    _fail_and_rearm(world, job_id, live)
    # and the late receive of A claimed the re-armed run (LEASED, attempt 2) and died
    world.svc.worker.crash = crash_once_at("run.after_lease")
    with pytest.raises(Crash):
        world.svc.worker.process(late)
    world.svc.worker.crash = no_crash
    # When B meets the dead receive's lease, still live
    outcomes = world.deliver()
    # Then B leaves a copy behind, delayed past the lease. Before, B was acknowledged as a duplicate
    # of a live holder and the run stayed LEASED for good (tests/sim seeds 5109, 5924)
    assert outcomes == [Outcome.SPARE] and world.queue.depth() == 1
    # And once the lease has lapsed, the copy takes the run over and runs it to its end
    world.clock.advance(LEASE + 2)
    assert world.deliver() == [Outcome.SUCCEEDED]
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED
    assert calls == [1, 3] and world.queue.depth() == 0


def test_a_copy_that_meets_the_run_finished_is_dropped(world: World) -> None:
    # Given an hourly job (a success leaves its slot to lapse: no tick is due within the hold) whose
    # tick's message A was received twice; the live receive failed attempt 1, and a retry B was sent
    calls = _fails_once(world)
    request = CreateJobRequest(type="recurring", handler="t.fails_once", cron_expr="1 * * * *")
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    live, late = _received_twice(world, job_id, guard=True)
    _fail_and_rearm(world, job_id, live)
    [retry] = world.queue.receive()
    # and the late receive of A, alive, ran the retry to its end
    assert world.svc.worker.process(late) == Outcome.SUCCEEDED
    # When B is delivered while the late receive's slot is live
    outcome = world.svc.worker.process(Delivery(retry.message_id, retry.receipt_handle, retry.body))
    assert world.queue.delete(retry.receipt_handle)
    # Then it is a spare still (the slot is live), and its copy, once due, finds the run finished:
    # dropped, nothing run again, nothing more queued
    assert outcome == Outcome.SPARE
    world.clock.advance(hold_seconds(LEASE) + 2)
    assert world.deliver() == [Outcome.DUPLICATE]
    assert calls == [1, 2] and world.queue.depth() == 0


def test_a_cancelled_one_offs_redelivery_that_meets_its_own_live_lease_is_left_then_ends_the_run(
    world: World,
) -> None:
    # Given a one-off due now on the leased path, whose claim applied but answered a timeout: the
    # receive gave its slot back and ended in an error, its message left to its visibility
    calls = _fails_once(world)
    world.svc.worker.fast_path = False
    request = CreateJobRequest(type="one_off", handler="t.fails_once", run_at=T0 + timedelta(seconds=5))
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    sf = times.stored(T0 + timedelta(seconds=5))
    runs = world.svc.worker.runs
    world.svc.worker.runs = FailingWrite(runs, "claim", after=True)  # type: ignore[assignment]
    with pytest.raises(StoreUnreachable):
        world.deliver()
    world.svc.worker.runs = runs
    leased = world.runs.get(job_id, sf)
    assert leased is not None and leased.status == RunStatus.LEASED and leased.lease_until is not None
    # and a cancel that went through once the row's lease lapsed (by the API's clock)
    world.clock.set(leased.lease_until + timedelta(seconds=1))
    world.svc.job_service.cancel(job_id, tenant="t")
    # When the message comes back to a worker whose clock runs 2 s behind: to it, the lease is live
    world.svc.worker.clock = FakeClock(leased.lease_until - timedelta(seconds=1))
    outcomes = world.deliver()
    # Then the message is left to its visibility: its own receive's lease holds the run. Before, it
    # was acknowledged as CANCELLED while the row stayed LEASED for good (tests/sim seed 6879)
    assert outcomes == ["left"]
    # And its next receive, the lease lapsed, ends the run and runs nothing: LOST, not CANCELLED, as
    # for any claim that got past the gate (a LEASED row cannot tell whether a handler ran under it:
    # Worker._cancelled, tests/sim seed 8765)
    world.svc.worker.clock = world.clock
    world.clock.advance(LEASE + 1)
    assert world.deliver() == [Outcome.LOST]
    row = world.runs.get(job_id, sf)
    assert row is not None and row.status == RunStatus.LOST and calls == []
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.CANCELLED


@pytest.mark.parametrize("overlap", ["skip", "allow"], ids=["slot", "in_flight"])
def test_a_copy_that_meets_its_runs_live_marker_past_the_starting_deadline_is_spare_not_skipped(
    world: World, overlap: str
) -> None:
    # Given a per-minute job with a 5 s starting deadline, whose 12:01 tick one message (A) carries
    # now: its receive took the run's start marker (the slot, or an in-flight entry) and runs it
    request = CreateJobRequest(
        type="recurring", handler="demo.echo", cron_expr="* * * * *", overlap_policy=overlap,  # type: ignore[arg-type]
        starting_deadline_seconds=5,
    )  # fmt: skip
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.set(TICK)
    until = TICK + timedelta(seconds=hold_seconds(LEASE))
    if overlap == "skip":
        assert world.jobs.hold_and_read(job_id, run=SF, message="m-A", until=until, now=TICK)[0]
    else:
        assert world.jobs.count_and_read(job_id, run=SF, message="m-A", until=until, now=TICK)[0]
    # When another message of the same tick (B: a wake-up copy, a second send) is received past the
    # deadline while A's marker is live
    world.clock.set(TICK + timedelta(seconds=20))
    if not any(json.loads(body)["scheduled_for"] == SF for _, body in world.queue.peek()):
        world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=SF, guard=overlap == "skip"), 0)])
    [b] = [m for m in world.queue.receive() if json.loads(m.body)["scheduled_for"] == SF]
    outcome = world.svc.worker.process(Delivery(b.message_id, b.receipt_handle, b.body))
    # Then B is spare (it leaves a copy delayed past A's marker) and writes nothing on the run. Before,
    # the tick's deadline gate came first and wrote SKIPPED "deadline" over the run A was running
    # (tests/sim KEY_SEEDS 83)
    assert outcome == Outcome.SPARE
    assert world.runs.get(job_id, SF) is None
    assert [json.loads(body)["scheduled_for"] for _, body in world.queue.peek()].count(SF) == 2
