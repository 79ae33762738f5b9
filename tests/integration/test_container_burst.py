"""A burst of container jobs meets two racing ECS workers (issue 11, item 4): the tenant's vCPU cap, set
with `jobsched admin quota set --max-fargate-cpu`, is never exceeded, neither in the reserved total
(the Fargate vCPU table, sampled while the burst runs) nor in the containers actually running, and
every run still succeeds once. moto_server (thread-safe), real time, the containers as local
processes (the local stack's runner: no Docker here)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from jobsched.adapters.dynamodb.fargate_vcpu import DynamoDBFargateVcpuStore
from jobsched.adapters.targets import TargetFactory
from jobsched.cli import main
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.fargate_vcpu import ACCOUNT_SCOPE, tenant_scope
from jobsched.domain.status import RunStatus
from jobsched.ecsworker import EcsWorker
from jobsched.handlers import registry
from jobsched.wiring import Services, build
from tests.support import poll_until, provision

pytestmark = pytest.mark.slow  # real time: the waits' delayed copies are SQS's real seconds

TENANT = "burst"
CAP = 2048  # 2 vCPU: two 1-vCPU containers at once
BURST = 8


@pytest.fixture
def racing(endpoint: str, capsys: pytest.CaptureFixture[str]) -> Iterator[list[Services]]:
    """Two ECS workers' services on one stack (container targets as local processes), the tenant capped."""
    settings = provision(
        "burst",
        endpoint_url=endpoint,
        shard_count=2,
        lease_seconds=30,
        worker_lane="ecs",
        container_runner="local",
    )
    table = ["--table", settings.quotas_table, "--endpoint-url", endpoint]
    assert main(["admin", "quota", "set", "--tenant", TENANT, "--max-fargate-cpu", str(CAP), *table]) == 0
    capsys.readouterr()
    kw = {"endpoint_url": endpoint}
    both = [
        build(
            settings,
            dynamodb=boto3.client("dynamodb", **kw),
            sqs=boto3.client("sqs", **kw),
            stepfunctions=boto3.client("stepfunctions", **kw),
            handlers=registry.copy(),
        )
        for _ in range(2)
    ]
    yield both
    for services in both:
        assert isinstance(services.worker.targets, TargetFactory)
        services.worker.targets.close()


def container_job(services: Services, run_at: datetime) -> str:
    request = CreateJobRequest.model_validate(
        {
            "type": "one_off",
            "run_at": run_at.isoformat(),
            "timeout_seconds": 60,
            "max_attempts": 1,
            "resources": {"cpu": 1024, "memory_mib": 2048},
            "target": {
                "type": "ecs",
                "image": "busybox:1.36",
                "command": [sys.executable, "-c", "import time; print('working'); time.sleep(0.5)"],
            },
        }
    )
    return services.job_service.submit(request, tenant=TENANT, idempotency_key=None).job_id


def test_a_burst_of_container_jobs_on_racing_workers_never_reserves_or_runs_past_the_tenants_cap(
    racing: list[Services], endpoint: str
) -> None:
    a = racing[0]
    store = DynamoDBFargateVcpuStore(
        client=boto3.client("dynamodb", endpoint_url=endpoint), table=a.settings.fargate_vcpu_table
    )
    factories = [s.worker.targets for s in racing]
    assert all(isinstance(f, TargetFactory) for f in factories)
    # Given a burst of 1-vCPU container jobs due now, handed over to the ECS queue
    run_at = datetime.now(UTC).replace(microsecond=0)
    jobs = [container_job(a, run_at) for _ in range(BURST)]
    a.dispatcher.dispatch_all()
    # And a sampler of the tenant's reserved vCPU and of the containers running, while the burst runs
    reserved: list[int] = []
    running: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            reserved.append(store.used(tenant_scope(TENANT)))
            running.append(sum(f.processes.running() for f in factories))  # type: ignore[union-attr]
            time.sleep(0.01)

    # When two ECS workers (4 runs at once each) race for the runs
    workers = [
        EcsWorker(
            sqs=boto3.client("sqs", endpoint_url=endpoint),
            queue_url=s.settings.ecs_queue_url,
            worker=s.worker,
            trusted_senders=s.settings.trusted_senders,
            concurrency=4,
            wait_seconds=0,
            grace_seconds=2,
        )
        for s in racing
    ]
    threads = [threading.Thread(target=w.serve, daemon=True) for w in workers]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for t in threads:
        t.start()

    def statuses() -> list[Any]:
        rows = [a.runs.get(job_id, times.stored(run_at)) for job_id in jobs]
        return [row.status if row else None for row in rows]

    try:
        poll_until(
            lambda: all(s == RunStatus.SUCCEEDED for s in statuses()),
            "every run of the burst to succeed",
            timeout=90,
        )
    finally:
        done.set()
        for w in workers:
            w.stop()
        for t in threads:
            t.join(timeout=10)
        sampler.join(timeout=5)
    # Then the cap was reached (the burst contended) and never passed, reserved or running
    assert max(reserved) == CAP, reserved
    assert max(running) * 1024 <= CAP, running
    # And each run succeeded once, on attempt 1, and every unit came back
    rows = [a.runs.get(job_id, times.stored(run_at)) for job_id in jobs]
    assert all(row is not None and row.attempt == 1 for row in rows)
    assert store.used(tenant_scope(TENANT)) == 0 and store.used(ACCOUNT_SCOPE) == 0
    assert store.reservations() == {}
