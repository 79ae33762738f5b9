"""The FargateVcpuStore contract (jobsched.ports): a scope's reserved CPU never passes its limit, racing
reservers included; a reservation is all its scopes or none; a release is idempotent and never takes
a counter below zero; a lapsed reservation is released by the next reserver that finds a scope full.
On the in-memory fake and on the Fargate vCPU table (moto)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from jobsched.adapters.dynamodb.fargate_vcpu import DynamoDBFargateVcpuStore
from jobsched.adapters.memory import MemoryFargateVcpuStore
from jobsched.domain.fargate_vcpu import ACCOUNT_SCOPE, Scope, scopes, tenant_scope
from tests.contract.conftest import at
from tests.support import provision

ACCOUNT = Scope(name=ACCOUNT_SCOPE, limit=1024)  # 1 vCPU
TENANT = Scope(name=tenant_scope("t1"), limit=512)


@pytest.fixture(params=["memory", "moto"])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A FargateVcpuStore of one implementation."""
    if request.param == "memory":
        yield MemoryFargateVcpuStore()
        return
    with mock_aws():
        settings = provision("fvcpu")
        yield DynamoDBFargateVcpuStore(client=boto3.client("dynamodb"), table=settings.fargate_vcpu_table)


def reserve(store: Any, run: str, cpu: int = 256, *, now: float = 0, hold: float = 600, **kw: Any) -> Any:
    chosen = kw.get("scopes", (ACCOUNT,))
    return store.reserve(run, cpu=cpu, scopes=chosen, until=at(now + hold), now=at(now))


def test_it_reserves_up_to_the_limit_and_answers_the_full_scope_past_it(store: Any) -> None:
    assert reserve(store, "r1", 512) is None and reserve(store, "r2", 512) is None
    assert reserve(store, "r3", 256) == ACCOUNT
    assert store.used(ACCOUNT_SCOPE) == 1024
    assert set(store.reservations()) == {"r1", "r2"}


def test_it_refuses_a_run_bigger_than_the_whole_limit(store: Any) -> None:
    assert reserve(store, "r1", 2048) == ACCOUNT
    assert store.used(ACCOUNT_SCOPE) == 0 and store.reservations() == {}


def test_a_reservation_takes_every_scope_or_none(store: Any) -> None:
    both = (ACCOUNT, TENANT)
    assert reserve(store, "r1", 512, scopes=both) is None
    # The tenant is full (512 of 512), the account is not: nothing is written to either.
    assert reserve(store, "r2", 256, scopes=both) == TENANT
    assert store.used(ACCOUNT_SCOPE) == 512 and store.used(tenant_scope("t1")) == 512
    # Another tenant still has the account's rest.
    other = (ACCOUNT, Scope(name=tenant_scope("t2"), limit=512))
    assert reserve(store, "r3", 512, scopes=other) is None
    assert store.used(ACCOUNT_SCOPE) == 1024


def test_a_run_that_holds_a_reservation_keeps_it_and_is_not_counted_twice(store: Any) -> None:
    assert reserve(store, "r1", 512) is None
    assert reserve(store, "r1", 512, now=5, hold=900) is None  # a redelivery of the same run
    assert store.used(ACCOUNT_SCOPE) == 512
    assert store.reservations()["r1"] == at(905)


def test_a_release_gives_the_units_back_once(store: Any) -> None:
    assert reserve(store, "r1", 512, scopes=(ACCOUNT, TENANT)) is None
    assert store.release("r1") is True
    assert store.release("r1") is False  # idempotent: nothing more is given back
    assert store.used(ACCOUNT_SCOPE) == 0 and store.used(tenant_scope("t1")) == 0
    assert store.release("never-reserved") is False
    assert reserve(store, "r2", 1024) is None


def test_a_lapsed_reservation_is_released_by_the_next_reserver_that_finds_the_scope_full(store: Any) -> None:
    assert reserve(store, "dead", 1024, now=0, hold=100) is None
    assert reserve(store, "r2", 256, now=50) == ACCOUNT  # not lapsed yet: full
    assert reserve(store, "r2", 256, now=101) is None  # lapsed: released, then reserved
    assert set(store.reservations()) == {"r2"} and store.used(ACCOUNT_SCOPE) == 256
    assert store.release("dead") is False  # its own late release gives nothing back twice
    assert store.used(ACCOUNT_SCOPE) == 256


def test_the_account_scope_is_the_quota_in_cpu_units_and_the_tenant_cap_is_optional() -> None:
    assert scopes(6, "t1", None) == (Scope(name=ACCOUNT_SCOPE, limit=6144),)
    assert scopes(6, "t1", 2048)[1] == Scope(name="tenant#t1", limit=2048)


def test_racing_reservers_never_reserve_more_than_the_limit(store: Any) -> None:
    if isinstance(store, DynamoDBFargateVcpuStore):
        pytest.skip("moto in-process is not thread-safe: tests/integration/test_fargate_vcpu_race.py races")
    won: list[str] = []
    start = threading.Barrier(16)

    def racer(run: str) -> None:
        start.wait(timeout=10)
        if reserve(store, run, 256, scopes=(Scope(name=ACCOUNT_SCOPE, limit=6144), TENANT)) is None:
            won.append(run)

    threads = [threading.Thread(target=racer, args=(f"r{i}",)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(won) == 2 and store.used(tenant_scope("t1")) == 512 and set(store.reservations()) == set(won)
