"""What an idle long poll costs: each of its steps (every 0.5 s, POLL_STEP_SECONDS) used to sweep
the pool (a Query of the workers, a Query of up to 100 queued runs) and read its worker twice. A
process now sweeps a pool at most once a second, reads the queue only when a worker has room (or
a third of a hold passed, to renew the waiting runs' markers), and reads its worker again only
when the sweep changed it. Counted store calls, not wall-clock.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jobsched.adapters.memory import MemoryJobStore, MemoryRunStore, MemoryWorkerStore
from jobsched.domain import times
from jobsched.domain.compute import Resources as JobResources
from jobsched.domain.models import Job
from jobsched.domain.placement import Resources
from jobsched.domain.status import JobStatus
from jobsched.domain.targets import WorkerTarget
from jobsched.ports import FakeClock
from jobsched.services.workers import SWEEP_EVERY_SECONDS, WorkerPools

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SF = times.stored(T0)
STEP = 0.5  # api.workers POLL_STEP_SECONDS


class Markers:
    """A stand-in for the worker function's markers: counts renewals."""

    def __init__(self) -> None:
        self.renewed: list[str] = []

    def hold_seconds(self) -> int:
        return 30

    def renew_handed_off(self, job: Job, sf: str) -> None:
        self.renewed.append(job.job_id)

    def release_handed_off(self, job: Job, sf: str) -> None:
        pass


def counting(store: object, calls: Counter[str], prefix: str) -> None:
    """Count every public method call on `store` as "<prefix>.<name>"."""
    for name in dir(store):
        attr = getattr(store, name)
        if name.startswith("_") or not inspect.ismethod(attr):
            continue

        def wrap(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                calls[key] += 1
                return fn(*args, **kwargs)

            return call

        setattr(store, name, wrap(attr, f"{prefix}.{name}"))


class Pool:
    def __init__(self, *, markers: Markers | None = None) -> None:
        self.clock = FakeClock(T0)
        self.jobs, self.runs = MemoryJobStore(shard_count=2), MemoryRunStore()
        self.workers = MemoryWorkerStore()
        self.svc = WorkerPools(
            workers=self.workers, jobs=self.jobs, runs=self.runs, clock=self.clock, markers=markers
        )
        self.calls: Counter[str] = Counter()

    def job(self, job_id: str, *, cpu: int) -> Job:
        job = Job(
            job_id=job_id,
            tenant="t1",
            type="one_off",
            status=JobStatus.SCHEDULED,
            target=WorkerTarget(pool="gpu", handler="mypkg.train"),
            payload={},
            run_at=T0,
            resources=JobResources(cpu=cpu, memory_mib=512),
            created_at=T0,
            updated_at=T0,
        )
        self.jobs.create_with_idempotency(job, idempotency_key=None, request_hash="h", response={}, now=T0)
        return job

    def register(self, *, cpu: int, memory_mib: int) -> str:
        capacity = Resources(cpu=cpu, memory_mib=memory_mib)
        return self.svc.register(tenant="t1", pool="gpu", capacity=capacity, labels={}).worker_id

    def count(self) -> None:
        for store, prefix in ((self.workers, "workers"), (self.jobs, "jobs"), (self.runs, "runs")):
            counting(store, self.calls, prefix)

    def step(self, worker_id: str) -> Counter[str]:
        """One long-poll step, then the clock moves on by a step: the store calls it made."""
        before = Counter(self.calls)
        self.svc.poll(tenant="t1", worker_id=worker_id)
        self.clock.advance(STEP)
        return self.calls - before


def test_an_idle_poll_sweeps_once_a_second_and_otherwise_reads_its_worker_only() -> None:
    # Given an idle worker, nothing queued, after its first (sweeping) poll
    pool = Pool()
    w = pool.register(cpu=4096, memory_mib=8192)
    pool.svc.poll(tenant="t1", worker_id=w)
    pool.clock.advance(SWEEP_EVERY_SECONDS)
    pool.count()
    # When it long-polls for 20 s (40 steps of 0.5 s)
    steps = [pool.step(w) for _ in range(40)]
    # Then a step that sweeps reads its worker, the pool's workers and the queue; the next reads
    # its worker only: 80 store calls in all (it was 4 a step, 160)
    sweep = Counter({"workers.get_worker": 1, "workers.list_workers": 1, "workers.waiting": 1})
    assert steps[0] == sweep and steps[1] == Counter({"workers.get_worker": 1})
    assert steps == [sweep, Counter({"workers.get_worker": 1})] * 20
    assert sum(pool.calls.values()) == 80


def test_a_full_pool_skips_the_queue_query_until_its_waiting_runs_need_renewing() -> None:
    # Given a worker whose capacity one acknowledged run takes whole, and a second run waiting
    markers = Markers()
    pool = Pool(markers=markers)
    w = pool.register(cpu=2048, memory_mib=1024)
    pool.svc.hand_off(pool.job("a", cpu=2048), SF)
    [run] = pool.svc.poll(tenant="t1", worker_id=w)
    assert pool.svc.ack(tenant="t1", worker_id=w, run_id=run.run_id).applied
    pool.svc.hand_off(pool.job("b", cpu=2048), SF)
    assert markers.renewed == ["a"]  # its ack renewed "a"; "b" was held at its hand-off
    pool.clock.advance(SWEEP_EVERY_SECONDS)
    pool.count()
    # When it long-polls for 20 s
    steps = [pool.step(w) for _ in range(40)]
    # Then a sweep a second, but none reads the queue except every third of a hold (10 s) since the
    # last read, which renews the waiting run's markers: nothing can be placed on a full worker
    reads = [i for i, s in enumerate(steps) if s["workers.waiting"]]
    assert len(reads) == 2 and reads[1] - reads[0] == 20
    assert sum(s["workers.list_workers"] for s in steps) == 20
    assert sum(pool.calls.values()) == 40 + 20 + 2 + 2  # get_worker, list_workers, waiting, get_job
    assert markers.renewed == ["a", "b", "b"]
    assert [q.job_id for q in pool.svc.waiting(tenant="t1", pool="gpu")] == ["b"]


def test_a_finished_run_frees_capacity_that_the_next_poll_step_places_at_once() -> None:
    # Given a full worker, a run waiting, and a poll that just swept
    pool = Pool()
    w = pool.register(cpu=2048, memory_mib=1024)
    pool.svc.hand_off(pool.job("a", cpu=2048), SF)
    pool.svc.hand_off(pool.job("b", cpu=2048), SF)
    [run] = pool.svc.poll(tenant="t1", worker_id=w)
    assert pool.svc.ack(tenant="t1", worker_id=w, run_id=run.run_id).applied
    assert pool.svc.started(tenant="t1", worker_id=w, run_id=run.run_id).applied
    # When the run finishes, within the same second
    assert pool.svc.finished(tenant="t1", worker_id=w, run_id=run.run_id, result="1", error=None).applied
    # Then the next step sweeps and places the waiting run without waiting out the second
    [second] = pool.svc.poll(tenant="t1", worker_id=w)
    assert second.job_id == "b"
