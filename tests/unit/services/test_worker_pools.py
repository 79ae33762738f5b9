"""External worker pools (jobsched.services.workers) on the in-memory fakes, time faked.

The timeline each test plays: a worker-pool run handed off (PENDING, queued), placed by best fit on
a worker (reserved), acknowledged (LEASED, confirmed), started, finished; and the ways it goes
wrong: no ack, a worker that stops heartbeating, a dead worker that comes back, a duplicate report.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobsched.adapters.memory import MemoryJobStore, MemoryRunStore, MemoryWorkerStore
from jobsched.domain import times
from jobsched.domain.compute import Resources as JobResources
from jobsched.domain.keys import run_id_for
from jobsched.domain.models import Job
from jobsched.domain.placement import Resources
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import WorkerTarget
from jobsched.domain.workers import DEAD_AFTER_SECONDS, RESERVATION_SECONDS
from jobsched.errors import Conflict, NotFound
from jobsched.ports import FakeClock
from jobsched.services.workers import WorkerPools

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SF = times.stored(T0)


class Pools:
    def __init__(self) -> None:
        self.clock = FakeClock(T0)
        self.jobs = MemoryJobStore(shard_count=4)
        self.runs = MemoryRunStore()
        self.workers = MemoryWorkerStore()
        self.svc = WorkerPools(workers=self.workers, jobs=self.jobs, runs=self.runs, clock=self.clock)

    def job(
        self,
        job_id: str,
        *,
        cpu: int = 1024,
        gpus: int = 0,
        idempotent: bool = True,
        labels: dict[str, str] | None = None,
    ) -> Job:
        job = Job(
            job_id=job_id,
            tenant="t1",
            type="one_off",
            status=JobStatus.SCHEDULED,
            target=WorkerTarget(pool="gpu", handler="mypkg.train", labels=labels or {}),
            payload={"n": 1},
            run_at=T0,
            idempotent=idempotent,
            resources=JobResources(cpu=cpu, memory_mib=512, gpus=gpus),
            created_at=T0,
            updated_at=T0,
        )
        self.jobs.create_with_idempotency(job, idempotency_key=None, request_hash="h", response={}, now=T0)
        return job

    def worker(
        self, cpu: int, *, gpus: int = 0, tenant: str = "t1", labels: dict[str, str] | None = None
    ) -> str:
        capacity = Resources(cpu=cpu, memory_mib=65_536, gpus=gpus)
        return self.svc.register(tenant=tenant, pool="gpu", capacity=capacity, labels=labels or {}).worker_id

    def status(self, job_id: str) -> RunStatus:
        row = self.runs.get(job_id, SF)
        assert row is not None
        return row.status

    def run_through(self, worker_id: str, job_id: str) -> None:
        run = run_id_for(job_id, T0)
        assert self.svc.ack(tenant="t1", worker_id=worker_id, run_id=run).applied
        assert self.svc.started(tenant="t1", worker_id=worker_id, run_id=run).applied


@pytest.fixture
def pools() -> Pools:
    return Pools()


def test_a_handed_off_run_is_placed_on_the_tightest_worker_and_polled_by_it_alone(pools: Pools) -> None:
    # Given workers with 8, 2 and 4 vCPUs and a run that needs 2
    big, small, mid = pools.worker(8192), pools.worker(2048), pools.worker(4096)
    job = pools.job("j1", cpu=2048)
    assert pools.svc.hand_off(job, SF)
    # When the workers poll
    # Then the 2-vCPU worker gets it (the smallest free slot that fits), the others nothing
    assert pools.svc.poll(tenant="t1", worker_id=big) == []
    [assignment] = pools.svc.poll(tenant="t1", worker_id=small)
    assert pools.svc.poll(tenant="t1", worker_id=mid) == []
    assert assignment.run_id == run_id_for("j1", T0) and assignment.handler == "mypkg.train"
    assert assignment.attempt == 1 and assignment.effect_key == assignment.run_id
    assert pools.status("j1") == RunStatus.PENDING


def test_runs_that_fit_no_worker_wait_oldest_first_and_are_placed_when_capacity_frees(pools: Pools) -> None:
    # Given one worker of 2 vCPUs and three 2-vCPU runs handed off a second apart
    w = pools.worker(2048)
    for i, name in enumerate(["a", "b", "c"]):
        pools.clock.set(T0 + timedelta(seconds=i))
        pools.svc.hand_off(pools.job(name, cpu=2048), SF)
    # When the worker polls, runs one, finishes it and polls again
    [first] = pools.svc.poll(tenant="t1", worker_id=w)
    assert first.job_id == "a"
    assert [q.job_id for q in pools.svc.waiting(tenant="t1", pool="gpu")] == ["b", "c"]
    pools.run_through(w, "a")
    assert pools.svc.finished(tenant="t1", worker_id=w, run_id=first.run_id, result="1", error=None).applied
    # Then the oldest waiting run is placed next
    [second] = pools.svc.poll(tenant="t1", worker_id=w)
    assert second.job_id == "b"
    assert [q.job_id for q in pools.svc.waiting(tenant="t1", pool="gpu")] == ["c"]


def test_reports_move_the_run_along_its_edges_and_a_duplicate_finished_changes_nothing(pools: Pools) -> None:
    w = pools.worker(4096)
    pools.svc.hand_off(pools.job("j1"), SF)
    [a] = pools.svc.poll(tenant="t1", worker_id=w)
    # When the worker acks, starts and finishes (and sends finished twice)
    assert pools.svc.ack(tenant="t1", worker_id=w, run_id=a.run_id).run.status == RunStatus.LEASED  # type: ignore[union-attr]
    assert not pools.svc.ack(tenant="t1", worker_id=w, run_id=a.run_id).applied
    assert pools.svc.started(tenant="t1", worker_id=w, run_id=a.run_id).applied
    assert pools.svc.beat(tenant="t1", worker_id=w, run_id=a.run_id).applied
    done = pools.svc.finished(tenant="t1", worker_id=w, run_id=a.run_id, result='"ok"', error=None)
    again = pools.svc.finished(tenant="t1", worker_id=w, run_id=a.run_id, result='"other"', error=None)
    # Then the run SUCCEEDED once, under this worker, and the duplicate answers it unchanged
    assert done.applied and done.run is not None and done.run.status == RunStatus.SUCCEEDED
    assert not again.applied and again.run == done.run
    assert done.run.worker == w and done.run.attempts[-1].worker == w
    worker = pools.svc.get(tenant="t1", worker_id=w)
    assert worker.holds == {} and worker.free().cpu == 4096


def test_an_out_of_order_finished_before_started_changes_nothing(pools: Pools) -> None:
    w = pools.worker(4096)
    pools.svc.hand_off(pools.job("j1"), SF)
    [a] = pools.svc.poll(tenant="t1", worker_id=w)
    pools.svc.ack(tenant="t1", worker_id=w, run_id=a.run_id)
    report = pools.svc.finished(tenant="t1", worker_id=w, run_id=a.run_id, result="1", error=None)
    assert not report.applied and report.run is not None and report.run.status == RunStatus.LEASED


def test_a_reservation_not_acked_in_time_is_released_and_placed_again(pools: Pools) -> None:
    # Given a run reserved on the only worker, which never acks
    slow = pools.worker(2048)
    pools.svc.hand_off(pools.job("j1", cpu=2048), SF)
    [a] = pools.svc.poll(tenant="t1", worker_id=slow)
    other = pools.worker(4096)
    # When the reservation lapses and the other worker polls
    pools.clock.advance(RESERVATION_SECONDS + 1)
    pools.svc.heartbeat(tenant="t1", worker_id=slow, free=None, runs={})
    # Then the run is placed on the other worker (the slow one's late ack is refused)
    held_by = {w: pools.svc.get(tenant="t1", worker_id=w).holds for w in (slow, other)}
    assert list(held_by[other]) == [a.run_id] and held_by[slow] == {}
    assert not pools.svc.ack(tenant="t1", worker_id=slow, run_id=a.run_id).applied
    assert pools.svc.ack(tenant="t1", worker_id=other, run_id=a.run_id).applied


def test_a_worker_silent_for_three_heartbeats_is_dead_and_its_run_finishes_elsewhere_once(
    pools: Pools,
) -> None:
    # Given a run running on worker A
    a = pools.worker(2048)
    pools.svc.hand_off(pools.job("j1", cpu=2048), SF)
    [run] = pools.svc.poll(tenant="t1", worker_id=a)
    pools.run_through(a, "j1")
    b = pools.worker(2048)
    # When A misses three heartbeats while B keeps beating
    for _ in range(3):
        pools.clock.advance(DEAD_AFTER_SECONDS / 3 + 0.5)
        pools.svc.heartbeat(tenant="t1", worker_id=b, free=None, runs={})
    # Then A is DEAD without holds, the run is placed on B, B finishes it: attempt 2, once
    dead = pools.svc.get(tenant="t1", worker_id=a)
    assert dead.status == "DEAD" and dead.holds == {}
    assert [w.status for w in pools.svc.listing(tenant="t1", pool="gpu") if w.worker_id == a] == ["DEAD"]
    [again] = pools.svc.poll(tenant="t1", worker_id=b)
    assert again.run_id == run.run_id and again.attempt == 2
    pools.run_through(b, "j1")
    assert pools.svc.finished(tenant="t1", worker_id=b, run_id=run.run_id, result="1", error=None).applied
    # And A, back from the dead, has its stale reports refused and its heartbeat answered DEAD
    assert not pools.svc.finished(tenant="t1", worker_id=a, run_id=run.run_id, result="2", error=None).applied
    worker, stale = pools.svc.heartbeat(tenant="t1", worker_id=a, free=None, runs={run.run_id: "RUNNING"})
    assert worker.status == "DEAD" and stale == [run.run_id]
    with pytest.raises(Conflict):
        pools.svc.poll(tenant="t1", worker_id=a)
    row = pools.runs.get("j1", SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 2 and row.worker == b


def test_a_dead_workers_run_of_a_non_idempotent_job_is_lost_not_rerun(pools: Pools) -> None:
    a = pools.worker(2048)
    pools.svc.hand_off(pools.job("j1", cpu=2048, idempotent=False), SF)
    pools.svc.poll(tenant="t1", worker_id=a)
    pools.run_through(a, "j1")
    b = pools.worker(2048)
    pools.clock.advance(DEAD_AFTER_SECONDS + 1)
    pools.svc.heartbeat(tenant="t1", worker_id=b, free=None, runs={})
    assert pools.status("j1") == RunStatus.LOST
    assert pools.svc.poll(tenant="t1", worker_id=b) == []


def test_gpu_runs_need_gpu_workers_and_labels_must_match(pools: Pools) -> None:
    cpu_only = pools.worker(8192, labels={"zone": "a"})
    gpu = pools.worker(8192, gpus=1, labels={"zone": "b"})
    pools.svc.hand_off(pools.job("g", gpus=1), SF)
    pools.svc.hand_off(pools.job("z", labels={"zone": "a"}), SF)
    assert [x.job_id for x in pools.svc.poll(tenant="t1", worker_id=gpu)] == ["g"]
    assert [x.job_id for x in pools.svc.poll(tenant="t1", worker_id=cpu_only)] == ["z"]


def test_another_tenants_worker_is_not_found(pools: Pools) -> None:
    w = pools.worker(2048, tenant="t2")
    with pytest.raises(NotFound):
        pools.svc.poll(tenant="t1", worker_id=w)
    with pytest.raises(NotFound):
        pools.svc.heartbeat(tenant="t1", worker_id=w, free=None, runs={})
    assert pools.svc.listing(tenant="t1", pool=None) == []


def test_a_redelivered_hand_off_queues_the_run_once(pools: Pools) -> None:
    job = pools.job("j1")
    assert pools.svc.hand_off(job, SF)
    assert not pools.svc.hand_off(job, SF)
    assert len(pools.svc.waiting(tenant="t1", pool="gpu")) == 1


def _once(monkeypatch: pytest.MonkeyPatch, store: MemoryWorkerStore, name: str, answer: Any) -> None:
    """The store's `name` answers `answer` (a read taken earlier) once: a sweep working from a stale
    read, as a second process that read before the first one wrote."""
    real = getattr(store, name)
    calls = iter([lambda *a, **k: answer])
    monkeypatch.setattr(store, name, lambda *a, **k: next(calls, real)(*a, **k))


def test_two_sweeps_that_read_the_same_lapsed_reservation_leave_the_run_placed_once(
    pools: Pools, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run reserved on a worker that never acks, its reservation lapsed, and a second sweep
    # that read the workers before a first sweep requeued and placed the run again
    # (the sweep that requeues a lapsed reservation passes its worker over: the next one places it)
    slow = pools.worker(2048)
    pools.svc.hand_off(pools.job("j1", cpu=2048), SF)
    [a] = pools.svc.poll(tenant="t1", worker_id=slow)
    pools.clock.advance(RESERVATION_SECONDS + 1)
    stale = pools.workers.list_workers("t1", pool="gpu")
    assert pools.svc.sweep(tenant="t1", pool="gpu") == {}
    assert pools.svc.sweep(tenant="t1", pool="gpu") == {a.run_id: slow}
    placed = pools.svc.get(tenant="t1", worker_id=slow).holds[a.run_id]
    # When the second sweep runs on what it read
    _once(monkeypatch, pools.workers, "list_workers", stale)
    pools.svc.sweep(tenant="t1", pool="gpu")
    # Then the new reservation stands, and the run is not queued a second time
    assert pools.svc.get(tenant="t1", worker_id=slow).holds == {a.run_id: placed}
    assert pools.svc.waiting(tenant="t1", pool="gpu") == []


def test_two_placers_that_read_the_same_waiting_run_reserve_it_once(
    pools: Pools, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a waiting run, and a second placer that read the queue and the workers before the first
    # placed it on the tighter worker
    tight, roomy = pools.worker(2048), pools.worker(4096)
    pools.svc.hand_off(pools.job("j1", cpu=2048), SF)
    stale_workers = pools.workers.list_workers("t1", pool="gpu")
    stale_queue = pools.workers.waiting("t1", "gpu", limit=100)
    [(run_id, first)] = pools.svc.sweep(tenant="t1", pool="gpu").items()
    assert first == tight
    # When the second placer runs on what it read (the tight worker refuses it, the roomy one fits)
    _once(monkeypatch, pools.workers, "list_workers", stale_workers)
    _once(monkeypatch, pools.workers, "waiting", stale_queue)
    # Then its dequeue is refused and it releases the reservation it made: one hold per run
    assert pools.svc.sweep(tenant="t1", pool="gpu") == {}
    assert list(pools.svc.get(tenant="t1", worker_id=tight).holds) == [run_id]
    assert pools.svc.get(tenant="t1", worker_id=roomy).holds == {}


def test_a_stale_reservation_of_a_finished_run_is_released_at_poll_and_not_offered(pools: Pools) -> None:
    # Given a run that finished on one worker, and a second reservation of it left on another (a
    # placer that crashed between its reservation and its refused dequeue)
    done, other = pools.worker(2048), pools.worker(4096)
    pools.svc.hand_off(pools.job("j1", cpu=2048), SF)
    [a] = pools.svc.poll(tenant="t1", worker_id=done)
    stray = pools.svc.get(tenant="t1", worker_id=done).holds[a.run_id]
    version = pools.svc.get(tenant="t1", worker_id=other).version
    assert pools.workers.reserve("t1", other, hold=stray, expected_version=version)
    pools.run_through(done, "j1")
    assert pools.svc.finished(tenant="t1", worker_id=done, run_id=a.run_id, result="1", error=None).applied
    # When the other worker polls
    # Then it is offered nothing, and the stray reservation is gone
    assert pools.svc.poll(tenant="t1", worker_id=other) == []
    assert pools.svc.get(tenant="t1", worker_id=other).holds == {}
