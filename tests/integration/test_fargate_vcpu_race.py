"""Fargate vCPU reservations against moto_server (thread-safe): N threads reserving and releasing
against one limit never have more reserved than the limit, and every unit comes back."""

from __future__ import annotations

import threading
from datetime import timedelta

import boto3

from jobsched.adapters.dynamodb.fargate_vcpu import DynamoDBFargateVcpuStore
from jobsched.domain import times
from jobsched.domain.fargate_vcpu import ACCOUNT_SCOPE, Scope, tenant_scope
from tests.support import provision

T0 = times.parse_stored("2026-11-30T12:00:00.000Z")
THREADS = 12
ROUNDS = 4
ACCOUNT = Scope(name=ACCOUNT_SCOPE, limit=6 * 1024)  # the default quota: 6 vCPU
TENANT = Scope(name=tenant_scope("t"), limit=2048)


def test_racing_reservers_never_reserve_more_than_the_limit_and_every_unit_comes_back(endpoint: str) -> None:
    # Given 12 workers, each wanting 1 vCPU four times over, against a tenant cap of 2 vCPU
    settings = provision("caprace", endpoint_url=endpoint)
    store = DynamoDBFargateVcpuStore(
        client=boto3.client("dynamodb", endpoint_url=endpoint), table=settings.fargate_vcpu_table
    )
    start = threading.Barrier(THREADS)
    seen: list[int] = []  # the tenant's reserved units as read while holding, and the holders at once
    holding = [0, 0]  # (now, most)
    won: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        start.wait(timeout=20)
        for n in range(ROUNDS):
            run = f"run-{i}-{n}"
            if store.reserve(run, cpu=1024, scopes=(ACCOUNT, TENANT), until=T0 + timedelta(hours=1), now=T0):
                continue  # full: this round waits (a run would stay queued)
            with lock:
                won.append(run)
                holding[0] += 1
                holding[1] = max(holding)
            seen.append(store.used(tenant_scope("t")))
            with lock:
                holding[0] -= 1
            store.release(run)

    # When they race
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # Then no one ever saw more than the cap reserved, some won, and every unit came back
    assert won and max(seen) <= TENANT.limit and holding[1] * 1024 <= TENANT.limit
    assert store.used(tenant_scope("t")) == 0 and store.used(ACCOUNT_SCOPE) == 0
    assert store.reservations() == {}
