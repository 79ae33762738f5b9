"""A worker-pool run holds its job's overlap slot until settled, on the DynamoDB adapters (moto
server): the hand-off keeps the slot, the pool's reports renew it, a `skip` job's next tick is
SKIPPED while the run runs, and `finished` frees it (tests/unit/services/test_worker_pool_slots.py
plays the same on the memory fakes)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from jobsched import resources
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.keys import run_id_for
from jobsched.domain.models import RunMessage
from jobsched.domain.placement import Resources
from jobsched.domain.status import RunStatus
from jobsched.domain.workers import HEARTBEAT_SECONDS
from jobsched.pools import attach
from jobsched.ports import FakeClock
from jobsched.services.run import Delivery, Outcome
from jobsched.services.workers import WorkerPools
from jobsched.wiring import Services
from tests.support import services_on

T0 = times.parse_stored("2026-11-30T12:00:00.000Z")
TICK_1, TICK_2 = T0 + timedelta(hours=1), T0 + timedelta(hours=1, minutes=1)


@pytest.fixture
def pooled(
    endpoint: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Services, WorkerPools, FakeClock]]:
    prefix = f"ps{abs(hash(request.node.name)) % 10**8}"
    clock = FakeClock(T0)
    services = services_on(endpoint, prefix, clock=clock)
    pools = attach(services, table=resources.physical_name(prefix, resources.WORKERS_TABLE))
    assert pools is not None
    yield services, pools, clock


def delivery(job_id: str, at: str, n: int) -> Delivery:
    body = RunMessage(job_id=job_id, scheduled_for=at, guard=True).model_dump_json()
    return Delivery(f"msg-{n}", f"receipt-{n}", body)


def test_a_skip_jobs_pool_run_holds_its_slot_on_dynamodb_until_finished(
    pooled: tuple[Services, WorkerPools, FakeClock],
) -> None:
    svc, pools, clock = pooled
    # Given a per-minute `skip` job on a pool, its 12:01 tick handed off and started on a worker
    request = CreateJobRequest(
        type="recurring",
        cron_expr="* * * * *",
        target={"type": "worker", "pool": "gpu", "handler": "mypkg.train"},
        overlap_policy="skip",
    )
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    clock.set(TICK_1)
    assert svc.worker.process(delivery(job_id, times.stored(TICK_1), 1)) == Outcome.HANDED_OFF
    worker = pools.register(
        tenant="t", pool="gpu", capacity=Resources(cpu=4096, memory_mib=8192), labels={}
    ).worker_id
    [run] = pools.poll(tenant="t", worker_id=worker)
    assert run.run_id == run_id_for(job_id, TICK_1)
    assert pools.ack(tenant="t", worker_id=worker, run_id=run.run_id).applied
    assert pools.started(tenant="t", worker_id=worker, run_id=run.run_id).applied
    # When it runs past several holds (25 s each at a 30 s lease), its worker heartbeating
    for _ in range(6):
        clock.advance(HEARTBEAT_SECONDS)
        pools.heartbeat(tenant="t", worker_id=worker, free=None, runs={run.run_id: "RUNNING"})
    # Then the 12:01 run still holds the slot, and the 12:02 tick is SKIPPED for overlap
    job = svc.jobs.get_job(job_id)
    assert job is not None and job.active_run == times.stored(TICK_1)
    assert job.active_until is not None and job.active_until > clock.now()
    assert svc.worker.process(delivery(job_id, times.stored(TICK_2), 2)) == Outcome.SKIPPED
    second = svc.runs.get(job_id, times.stored(TICK_2))
    assert second is not None and second.status == RunStatus.SKIPPED
    # And finished frees it
    assert pools.finished(tenant="t", worker_id=worker, run_id=run.run_id, result="{}", error=None).applied
    job = svc.jobs.get_job(job_id)
    assert job is not None and job.active_run is None
