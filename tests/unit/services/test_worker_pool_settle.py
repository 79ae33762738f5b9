"""A worker-pool run whose outcome was recorded but never settled (the api died between `finished`
recording the row and settling it, and the worker never retried its report) is settled by the
sweep or heartbeat that finds the worker's hold on it: the worker's hold is released only after
the settling (services/workers.py WorkerPools.finished).

    finished: record ──X crash (before settle)
    the worker goes silent ──> 30 s ──> another worker's poll sweeps the pool ──> bury:
        the hold's run is over ──> settle (idempotent) ──> free the job's markers
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobsched.adapters.memory import MemoryWorkerStore
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.placement import Resources
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.workers import DEAD_AFTER_SECONDS, HEARTBEAT_SECONDS
from jobsched.pools import connect, pools_over
from jobsched.ports import Crash, CrashPoints, no_crash
from jobsched.services.run import Outcome
from jobsched.services.workers import WorkerPools
from tests.unit.services.conftest import T0, World

RUN_AT = T0 + timedelta(seconds=30)


def crash_at(point: str) -> CrashPoints:
    def crash(at: str) -> None:
        if at == point:
            raise Crash(at)

    return crash


def setup(world: World) -> tuple[WorkerPools, str, str, str]:
    """A one-off pool run started on worker A, and an idle worker B: (pools, job, run id, A)."""
    pools = connect(world.svc, pools_over(world.svc, MemoryWorkerStore()))
    request = CreateJobRequest(
        type="one_off",
        run_at=RUN_AT,
        target={"type": "worker", "pool": "gpu", "handler": "mypkg.train"},
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(30)
    assert world.deliver() == [Outcome.HANDED_OFF]
    capacity = Resources(cpu=4096, memory_mib=8192)
    a = pools.register(tenant="t", pool="gpu", capacity=capacity, labels={}).worker_id
    [run] = pools.poll(tenant="t", worker_id=a)
    assert pools.ack(tenant="t", worker_id=a, run_id=run.run_id).applied
    assert pools.started(tenant="t", worker_id=a, run_id=run.run_id).applied
    pools.register(tenant="t", pool="gpu", capacity=capacity, labels={})
    return pools, job_id, run.run_id, a


def outlive(world: World, pools: WorkerPools, a: str) -> str:
    """A stops heartbeating; B heartbeats on until A is 30 s late: answers B."""
    [b] = [w.worker_id for w in pools.listing(tenant="t", pool="gpu") if w.worker_id != a]
    for _ in range(DEAD_AFTER_SECONDS // HEARTBEAT_SECONDS):
        world.clock.advance(HEARTBEAT_SECONDS)
        pools.heartbeat(tenant="t", worker_id=b, free=None, runs={})
    world.clock.advance(1)
    return b


def test_a_success_recorded_by_an_api_that_died_before_settling_completes_the_one_off_when_its_worker_dies(
    world: World,
) -> None:
    # Given a one-off's pool run on worker A, whose `finished` is recorded, then the api crashes
    pools, job_id, run_id, a = setup(world)
    pools.crash = crash_at("pools.finished.before_settle")
    with pytest.raises(Crash):
        pools.finished(tenant="t", worker_id=a, run_id=run_id, result="{}", error=None)
    pools.crash = no_crash
    row = world.runs.get(job_id, RUN_AT)
    assert row is not None and row.status == RunStatus.SUCCEEDED
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.SCHEDULED  # not settled
    # When A never retries and stops heartbeating, and B's poll sweeps the pool past 30 s
    b = outlive(world, pools, a)
    assert pools.poll(tenant="t", worker_id=b) == []
    # Then the one-off is COMPLETED, and the run is not queued again
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED and job.active_run is None
    assert pools.waiting(tenant="t", pool="gpu") == []


def test_a_failure_recorded_by_an_api_that_died_before_settling_is_handed_over_exactly_once(
    world: World,
) -> None:
    # Given a pool run on worker A whose failed `finished` is recorded, then the api crashes
    pools, job_id, run_id, a = setup(world)
    pools.crash = crash_at("pools.finished.before_settle")
    with pytest.raises(Crash):
        pools.finished(tenant="t", worker_id=a, run_id=run_id, result=None, error=("Boom", "no GPU"))
    pools.crash = no_crash
    row = world.runs.get(job_id, RUN_AT)
    assert row is not None and row.status == RunStatus.FAILED and world.machines.started == {}
    # When A dies (no heartbeat for 30 s) and B polls and heartbeats the pool, again and again
    b = outlive(world, pools, a)
    for _ in range(3):
        pools.poll(tenant="t", worker_id=b)
        pools.heartbeat(tenant="t", worker_id=b, free=None, runs={})
        world.clock.advance(HEARTBEAT_SECONDS)
    # Then the failure was handed to the failure workflow exactly once, for attempt 1
    [handed] = world.machines.started.values()
    assert (handed["attempt"], handed["retryable"]) == (1, True)
    # And A's late retry of its report changes nothing and hands nothing over again
    late = pools.finished(tenant="t", worker_id=a, run_id=run_id, result=None, error=("Boom", "no GPU"))
    assert not late.applied and len(world.machines.started) == 1


def test_a_live_worker_that_never_retries_its_report_has_the_run_settled_at_its_next_heartbeat(
    world: World,
) -> None:
    # Given a pool run whose `finished` was recorded by an api that crashed before settling
    pools, job_id, run_id, a = setup(world)
    pools.crash = crash_at("pools.finished.before_settle")
    with pytest.raises(Crash):
        pools.finished(tenant="t", worker_id=a, run_id=run_id, result="{}", error=None)
    pools.crash = no_crash
    # When its worker, alive, heartbeats without the run (it is done with it)
    world.clock.advance(HEARTBEAT_SECONDS)
    worker, _ = pools.heartbeat(tenant="t", worker_id=a, free=None, runs={})
    # Then the run is settled (the one-off COMPLETED) and the worker's hold released
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED
    assert worker.holds == {}
