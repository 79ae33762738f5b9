"""A worker-pool run holds its job's overlap slot and its concurrency-key slots from its hand-off
until its pool settles it (services/run.py hands it off, services/workers.py renews and releases).

The timeline each test plays, on the real services over the memory fakes, time faked:

    12:01 due ──> worker function: slot held, keys taken ──> hand-off (queued, PENDING)
        ──> placed, ack (renews) ──> started (renews) ──> heartbeats (renew) ...
    12:02 due ──> skip: SKIPPED (overlap) · buffer_one: buffered, woken by the release
        ──> finished ──> settled ──> slot and keys released
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobsched.adapters.memory import MemoryWorkerStore
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.keys import run_id_for
from jobsched.domain.limits import Concurrency
from jobsched.domain.placement import Resources
from jobsched.domain.status import RunStatus
from jobsched.domain.workers import DEAD_AFTER_SECONDS, HEARTBEAT_SECONDS, pool_key_holder
from jobsched.pools import connect, pools_over
from jobsched.services.run import Delivery, Outcome
from jobsched.services.runs import RunService
from jobsched.services.workers import WorkerPools
from tests.unit.services.conftest import T0, World

TICK_1 = T0 + timedelta(seconds=60)  # 12:01
TICK_2 = T0 + timedelta(seconds=120)  # 12:02
SF_1 = times.stored(TICK_1)


def pools_of(world: World) -> WorkerPools:
    return connect(world.svc, pools_over(world.svc, MemoryWorkerStore()))


def pool_job(world: World, overlap_policy: str, **extra: Any) -> str:
    request = CreateJobRequest(
        type="recurring",
        cron_expr="* * * * *",
        target={"type": "worker", "pool": "gpu", "handler": "mypkg.train"},
        overlap_policy=overlap_policy,
        **extra,
    )
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def register(pools: WorkerPools) -> str:
    capacity = Resources(cpu=8192, memory_mib=65_536)
    return pools.register(tenant="t", pool="gpu", capacity=capacity, labels={}).worker_id


def start_first_tick(world: World, pools: WorkerPools, job_id: str) -> tuple[str, str]:
    """12:01 handed off, placed, acknowledged and started: (its run id, the worker)."""
    world.svc.dispatcher.dispatch_all()  # hands over 12:01 (the look-ahead is 90 s)
    world.clock.advance(60)
    assert world.deliver() == [Outcome.HANDED_OFF]
    worker = register(pools)
    [assigned] = pools.poll(tenant="t", worker_id=worker)
    run_id = assigned.run_id
    assert run_id == run_id_for(job_id, TICK_1)
    assert pools.ack(tenant="t", worker_id=worker, run_id=run_id).applied
    assert pools.started(tenant="t", worker_id=worker, run_id=run_id).applied
    return run_id, worker


def slot_of(world: World, job_id: str) -> str | None:
    job = world.jobs.get_job(job_id)
    assert job is not None
    live = job.active_until is not None and job.active_until >= world.clock.now()
    return job.active_run if live else None


def test_a_skip_jobs_next_tick_is_skipped_while_its_pool_run_is_still_running(world: World) -> None:
    # Given a per-minute `skip` job on a pool, its 12:01 run started on a worker
    pools = pools_of(world)
    job_id = pool_job(world, "skip")
    run_id, worker = start_first_tick(world, pools, job_id)
    # Then the hand-off kept the job's slot for 12:01
    assert slot_of(world, job_id) == SF_1
    # When 12:02 comes due while 12:01 still runs
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(60)
    pools.heartbeat(tenant="t", worker_id=worker, free=None, runs={run_id: "RUNNING"})
    # Then 12:02 is SKIPPED for overlap, not started beside it
    assert world.deliver() == [Outcome.SKIPPED]
    second = world.runs.get(job_id, TICK_2)
    assert second is not None and second.status == RunStatus.SKIPPED and second.reason == "overlap"
    # And when 12:01 finishes, the slot is released
    assert pools.finished(tenant="t", worker_id=worker, run_id=run_id, result="{}", error=None).applied
    assert slot_of(world, job_id) is None


def test_a_long_pool_run_keeps_its_slot_past_the_hold_while_its_worker_heartbeats(world: World) -> None:
    # Given a `skip` job's pool run that runs far longer than one hold (250 s at a 300 s lease)
    pools = pools_of(world)
    job_id = pool_job(world, "skip")
    run_id, worker = start_first_tick(world, pools, job_id)
    hold = world.svc.worker.hold_seconds()
    # When its worker heartbeats every 10 s for three holds' length
    for _ in range(3 * hold // HEARTBEAT_SECONDS):
        world.clock.advance(HEARTBEAT_SECONDS)
        pools.heartbeat(tenant="t", worker_id=worker, free=None, runs={run_id: "RUNNING"})
        # Then the slot never lapses
        assert slot_of(world, job_id) == SF_1


def test_a_buffer_one_tick_waits_for_the_pool_run_and_starts_after_finished(world: World) -> None:
    # Given a per-minute `buffer_one` job on a pool, its 12:01 run started on a worker
    pools = pools_of(world)
    job_id = pool_job(world, "buffer_one")
    run_id, worker = start_first_tick(world, pools, job_id)
    # When 12:02 comes due while 12:01 still runs
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(60)
    # Then it is buffered behind it (left queued), not handed off
    assert world.deliver() == ["left"]
    job = world.jobs.get_job(job_id)
    assert job is not None and job.buffered_run == times.stored(TICK_2)
    assert world.runs.get(job_id, TICK_2) is None
    # When 12:01 finishes
    assert pools.finished(tenant="t", worker_id=worker, run_id=run_id, result="{}", error=None).applied
    # Then its release wakes 12:02, which is handed off to the pool and holds the slot now
    assert world.deliver() == [Outcome.HANDED_OFF]
    assert slot_of(world, job_id) == times.stored(TICK_2)
    assert [q.run_id for q in pools.waiting(tenant="t", pool="gpu")] == [run_id_for(job_id, TICK_2)]


def test_a_pool_run_holds_its_concurrency_key_until_finished(world: World) -> None:
    # Given a pool job with concurrency key "gpu-db" (limit 1), its 12:01 run started on a worker
    pools = pools_of(world)
    job_id = pool_job(world, "allow", concurrency=Concurrency(key="gpu-db", limit=1))
    run_id, worker = start_first_tick(world, pools, job_id)
    limits = world.svc.worker.limits
    assert limits is not None
    # Then the run holds the key's slot past the hand-off, renewed by its worker's heartbeats
    for _ in range(3 * world.svc.worker.hold_seconds() // HEARTBEAT_SECONDS):
        world.clock.advance(HEARTBEAT_SECONDS)
        pools.heartbeat(tenant="t", worker_id=worker, free=None, runs={run_id: "RUNNING"})
    assert set(limits.holders("t", "gpu-db", now=world.clock.now())) == {pool_key_holder(SF_1)}
    # And it is released once the run finished
    assert pools.finished(tenant="t", worker_id=worker, run_id=run_id, result="{}", error=None).applied
    assert limits.holders("t", "gpu-db", now=world.clock.now()) == {}


def test_a_dead_workers_run_is_requeued_with_its_slot_and_its_stale_finished_releases_nothing(
    world: World,
) -> None:
    # Given a `skip` job's pool run started on worker A, and a second worker B of the pool
    pools = pools_of(world)
    job_id = pool_job(world, "skip")
    run_id, dead = start_first_tick(world, pools, job_id)
    other = register(pools)
    # When A stops heartbeating past 30 s and B's poll sweeps the pool
    world.clock.advance(DEAD_AFTER_SECONDS + 1)
    pools.heartbeat(tenant="t", worker_id=other, free=None, runs={})
    [again] = pools.poll(tenant="t", worker_id=other)
    # Then the run is placed on B, and it kept the job's slot throughout
    assert again.run_id == run_id
    assert slot_of(world, job_id) == SF_1
    # When A comes back and reports the run finished
    stale = pools.finished(tenant="t", worker_id=dead, run_id=run_id, result="{}", error=None)
    # Then the report is refused and releases nothing
    assert not stale.applied
    assert slot_of(world, job_id) == SF_1
    # And B runs it to the end, which releases the slot
    assert pools.ack(tenant="t", worker_id=other, run_id=run_id).applied
    assert pools.started(tenant="t", worker_id=other, run_id=run_id).applied
    assert pools.finished(tenant="t", worker_id=other, run_id=run_id, result="{}", error=None).applied
    assert slot_of(world, job_id) is None


def test_a_non_idempotent_run_lost_with_its_worker_releases_its_slot(world: World) -> None:
    pools = pools_of(world)
    job_id = pool_job(world, "skip", idempotent=False)
    start_first_tick(world, pools, job_id)
    other = register(pools)
    world.clock.advance(DEAD_AFTER_SECONDS + 1)
    pools.heartbeat(tenant="t", worker_id=other, free=None, runs={})
    row = world.runs.get(job_id, TICK_1)
    assert row is not None and row.status == RunStatus.LOST
    assert slot_of(world, job_id) is None


def test_a_hand_off_message_redelivered_after_a_crash_before_its_ack_is_dropped_once_the_pool_took_it(
    world: World,
) -> None:
    # Given a `skip` job's 12:01 message, handed off by a receive that died before the ack
    pools = pools_of(world)
    job_id = pool_job(world, "skip")
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(60)
    [message] = world.queue.receive()
    delivery = Delivery(message.message_id, message.receipt_handle, message.body)
    assert world.svc.worker.process(delivery) == Outcome.HANDED_OFF  # (not deleted: the crash)
    # And its pool run acknowledged and started, its worker heartbeating past the visibility timeout
    worker = register(pools)
    [assigned] = pools.poll(tenant="t", worker_id=worker)
    assert pools.ack(tenant="t", worker_id=worker, run_id=assigned.run_id).applied
    assert pools.started(tenant="t", worker_id=worker, run_id=assigned.run_id).applied
    for _ in range(31):
        world.clock.advance(HEARTBEAT_SECONDS)
        pools.heartbeat(tenant="t", worker_id=worker, free=None, runs={assigned.run_id: "RUNNING"})
    # When the message surfaces again
    # Then it is dropped as a duplicate (not left to bounce toward the redrive queue), and the run
    # keeps its slot
    assert world.deliver() == [Outcome.DUPLICATE]
    assert world.queue.depth() == 0
    assert slot_of(world, job_id) == SF_1


def test_a_waiting_pool_run_cancelled_frees_its_key_slot_when_its_stray_placement_is_found(
    world: World,
) -> None:
    # Given an `allow` pool job with a concurrency key, its 12:01 run waiting in the pool's queue
    pools = pools_of(world)
    job_id = pool_job(world, "allow", concurrency=Concurrency(key="gpu-db", limit=1))
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(60)
    assert world.deliver() == [Outcome.HANDED_OFF]
    limits = world.svc.worker.limits
    assert limits is not None
    assert set(limits.holders("t", "gpu-db", now=world.clock.now())) == {pool_key_holder(SF_1)}
    # When the run is cancelled before a worker takes it, then a worker's poll places and finds it
    cancelled = RunService(job_service=world.svc.job_service).cancel(run_id_for(job_id, TICK_1), tenant="t")
    assert cancelled.status == RunStatus.CANCELLED
    worker = register(pools)
    assert pools.poll(tenant="t", worker_id=worker) == []
    # Then its key slot is free, and nothing is left on the worker
    assert limits.holders("t", "gpu-db", now=world.clock.now()) == {}
    assert pools.get(tenant="t", worker_id=worker).holds == {}


def _tick_at(world: World) -> None:
    """The next minute: its tick handed over (look-ahead), then due."""
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(60)


def test_a_skip_jobs_run_waiting_in_an_unswept_pool_keeps_its_slot_for_ten_holds(world: World) -> None:
    # Given a per-minute `skip` job whose 12:01 run waits in a pool no worker polls or heartbeats
    pools = pools_of(world)
    job_id = pool_job(world, "skip")
    _tick_at(world)
    assert world.deliver() == [Outcome.HANDED_OFF]
    first = run_id_for(job_id, TICK_1)
    # When ten holds' length passes (its slot is renewed by nothing of the pool's)
    ticks = 10 * world.svc.worker.hold_seconds() // 60
    for _ in range(ticks):
        _tick_at(world)
        # Then every tick is SKIPPED for overlap, never handed off beside it
        assert world.deliver() == [Outcome.SKIPPED]
        assert [q.run_id for q in pools.waiting(tenant="t", pool="gpu")] == [first]
        assert slot_of(world, job_id) == SF_1
    skipped = [r for r in world.runs.recent(job_id, limit=100) if r.status == RunStatus.SKIPPED]
    assert len(skipped) == ticks and {r.reason for r in skipped} == {"overlap"}
    # And the waiting run was never marked started under a dead holder's lease
    row = world.runs.get(job_id, TICK_1)
    assert row is not None and row.status == RunStatus.PENDING
    # When a worker registers and polls
    worker = register(pools)
    # Then exactly the one run is placed
    assert [a.run_id for a in pools.poll(tenant="t", worker_id=worker)] == [first]
    assert pools.waiting(tenant="t", pool="gpu") == []


def test_a_buffer_one_tick_behind_a_run_in_an_unswept_pool_waits_and_starts_after_finished(
    world: World,
) -> None:
    # Given a per-minute `buffer_one` job whose 12:01 run waits in a pool no worker serves
    pools = pools_of(world)
    job_id = pool_job(world, "buffer_one")
    _tick_at(world)
    assert world.deliver() == [Outcome.HANDED_OFF]
    first = run_id_for(job_id, TICK_1)
    # And its 12:02 tick buffered behind it
    _tick_at(world)
    assert world.deliver() == ["left"]
    # When ten holds' length passes
    for _ in range(10 * world.svc.worker.hold_seconds() // 60):
        _tick_at(world)
        # Then nothing is handed off beside the waiting run: later ticks are skipped, 12:02 waits
        outcomes = world.deliver()
        assert Outcome.HANDED_OFF not in outcomes
        assert set(outcomes) <= {Outcome.SKIPPED, "left"}
        assert [q.run_id for q in pools.waiting(tenant="t", pool="gpu")] == [first]
        assert slot_of(world, job_id) == SF_1
    job = world.jobs.get_job(job_id)
    assert job is not None and job.buffered_run == times.stored(TICK_2)
    # When a worker registers, takes exactly the one run and finishes it
    worker = register(pools)
    [assigned] = pools.poll(tenant="t", worker_id=worker)
    assert assigned.run_id == first
    assert pools.ack(tenant="t", worker_id=worker, run_id=first).applied
    assert pools.started(tenant="t", worker_id=worker, run_id=first).applied
    assert pools.finished(tenant="t", worker_id=worker, run_id=first, result="{}", error=None).applied
    # Then the buffered 12:02 is woken, handed off, and holds the slot now
    assert Outcome.HANDED_OFF in world.deliver()
    assert slot_of(world, job_id) == times.stored(TICK_2)
    assert [q.run_id for q in pools.waiting(tenant="t", pool="gpu")] == [run_id_for(job_id, TICK_2)]


def test_a_lapsed_slot_whose_pool_run_is_over_is_taken_over(world: World) -> None:
    # Given a `skip` job whose 12:01 pool run was cancelled while it waited (its row CANCELLED, its
    # slot never released: its stray queue entry is found only at a placement)
    pools_of(world)
    job_id = pool_job(world, "skip")
    _tick_at(world)
    assert world.deliver() == [Outcome.HANDED_OFF]
    assert world.runs.cancel(job_id, SF_1, now=world.clock.now()).applied
    # When ticks come due until its slot has lapsed
    outcomes: list[Outcome | str] = []
    while not outcomes or outcomes[-1] == Outcome.SKIPPED:
        _tick_at(world)
        outcomes += world.deliver()
    # Then the terminal holder blocks no longer than its hold: the first tick past it is handed off
    assert outcomes[-1] == Outcome.HANDED_OFF
    assert len(outcomes) - 1 <= world.svc.worker.hold_seconds() // 60 + 1
    taker = slot_of(world, job_id)
    assert taker is not None and taker != SF_1


def test_an_idempotent_run_on_a_worker_that_vanished_keeps_its_slot_until_a_sweep_requeues_it(
    world: World,
) -> None:
    # Given a `skip` job's 12:01 run started on a worker that then went silent, the pool's only one
    pools = pools_of(world)
    job_id = pool_job(world, "skip")
    run_id, _ = start_first_tick(world, pools, job_id)
    # When ten holds' length passes with no worker of the pool heard (nothing buries it)
    for _ in range(10 * world.svc.worker.hold_seconds() // 60):
        _tick_at(world)
        # Then every tick is SKIPPED for overlap: the sweep that buries the worker queues the run again
        assert world.deliver() == [Outcome.SKIPPED]
        assert slot_of(world, job_id) == SF_1
    # When a new worker registers and polls
    fresh = register(pools)
    # Then the one run is placed on it, and nothing beside it
    assert [a.run_id for a in pools.poll(tenant="t", worker_id=fresh)] == [run_id]
    assert pools.waiting(tenant="t", pool="gpu") == []
