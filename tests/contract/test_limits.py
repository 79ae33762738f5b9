"""The LimitStore and QuotaStore contracts (jobsched.ports), and RunStore.note_wait: a key's holder set
never holds more live holders than its limit, racing acquirers included; a holder's expiry frees its
slot; a day's budget never passes its limit. On the in-memory fakes and on the limits and quotas
tables (moto)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from jobsched.adapters.dynamodb.limits import DynamoDBLimitStore, DynamoDBQuotaStore
from jobsched.adapters.memory import MemoryLimitStore, MemoryQuotaStore
from jobsched.domain import times
from jobsched.domain.limits import Quota
from jobsched.domain.records import NewRun
from jobsched.domain.status import RunStatus
from tests.contract.conftest import T0, Backend, at
from tests.support import provision


@pytest.fixture(params=["memory", "moto"])
def stores(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """(LimitStore, QuotaStore) of one implementation."""
    if request.param == "memory":
        yield MemoryLimitStore(), MemoryQuotaStore()
        return
    with mock_aws():
        settings = provision("limits")
        ddb = boto3.client("dynamodb")
        yield (
            DynamoDBLimitStore(client=ddb, table=settings.limits_table),
            DynamoDBQuotaStore(client=ddb, table=settings.quotas_table),
        )


def take(
    limits: Any, holder: str, *, now: float = 0, hold: float = 30, limit: int = 2, tenant: str = "t1"
) -> bool:
    return bool(limits.acquire(tenant, "db", holder=holder, limit=limit, until=at(now + hold), now=at(now)))


def test_acquire_admits_holders_up_to_the_limit_and_refuses_the_next(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    assert take(limits, "a") and take(limits, "b")
    assert not take(limits, "c")
    assert set(limits.holders("t1", "db", now=at(0))) == {"a", "b"}


def test_a_holder_already_in_the_set_is_renewed_not_counted_twice(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    assert take(limits, "a") and take(limits, "b")
    assert take(limits, "a", now=1, hold=100)
    assert limits.holders("t1", "db", now=at(1))["a"] == at(101)


def test_a_released_slot_is_free_again_and_releasing_twice_is_harmless(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    assert take(limits, "a") and take(limits, "b")
    limits.release("t1", "db", holder="a")
    limits.release("t1", "db", holder="a")
    limits.release("t1", "db", holder="never")
    assert take(limits, "c")


def test_a_holder_whose_expiry_passed_frees_its_slot(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    assert take(limits, "dead", hold=30) and take(limits, "b", hold=300)
    assert not take(limits, "c", now=29)
    assert take(limits, "c", now=31)  # dead's expiry passed: nobody renewed it
    assert set(limits.holders("t1", "db", now=at(31))) == {"b", "c"}


def test_extend_pushes_a_holders_expiry_and_refuses_a_holder_not_in_the_set(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    assert take(limits, "a", hold=30)
    assert limits.extend("t1", "db", holder="a", until=at(90))
    assert not limits.extend("t1", "db", holder="stranger", until=at(90))
    assert take(limits, "b", now=60)
    assert not take(limits, "c", now=60)  # a's renewed expiry still holds its slot


def test_keys_are_scoped_to_their_tenant(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    assert take(limits, "a", limit=1, tenant="t1")
    assert take(limits, "b", limit=1, tenant="t2")
    assert not take(limits, "c", limit=1, tenant="t1")


def test_racing_acquirers_never_leave_more_live_holders_than_the_limit(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    if isinstance(limits, DynamoDBLimitStore):
        pytest.skip(
            "moto in-process is not thread-safe; the racing workers run on moto_server in tests/integration"
        )
    won: list[str] = []
    start = threading.Barrier(12)

    def racer(name: str) -> None:
        start.wait(timeout=10)
        if take(limits, name, limit=3):
            won.append(name)

    threads = [threading.Thread(target=racer, args=(f"h{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(won) == 3 and set(limits.holders("t1", "db", now=at(0))) == set(won)


def test_a_stale_acquirer_loses_to_a_write_made_after_its_read(stores: tuple[Any, Any]) -> None:
    # The optimistic write is conditional on the set being unchanged since it was read: interleave a
    # second acquirer between one acquirer's read and its write, and the first must re-read.
    limits, _ = stores
    if not isinstance(limits, DynamoDBLimitStore):
        pytest.skip("the memory store takes its lock around read and write: no interleaving to play")
    assert take(limits, "a", limit=2)
    read = limits._read
    calls = 0

    def interleaved(tenant: str, key: str) -> Any:
        nonlocal calls
        calls += 1
        seen = read(tenant, key)
        if calls == 1:  # another worker takes the last slot right after our read
            assert limits.acquire(tenant, key, holder="b", limit=2, until=at(30), now=at(0))
        return seen

    limits._read = interleaved
    assert not take(limits, "c", limit=2)
    limits._read = read
    assert set(limits.holders("t1", "db", now=at(0))) == {"a", "b"}


def test_a_days_budget_is_taken_while_it_lasts_and_never_past_its_limit(stores: tuple[Any, Any]) -> None:
    limits, _ = stores
    assert limits.take_budget("t1", "backfill_ticks", day="2026-11-30", amount=600, limit=1000)
    assert not limits.take_budget("t1", "backfill_ticks", day="2026-11-30", amount=401, limit=1000)
    assert limits.take_budget("t1", "backfill_ticks", day="2026-11-30", amount=400, limit=1000)
    assert not limits.take_budget("t1", "backfill_ticks", day="2026-11-30", amount=1, limit=1000)
    assert limits.take_budget("t1", "backfill_ticks", day="2026-12-01", amount=1000, limit=1000)
    assert limits.take_budget("t2", "backfill_ticks", day="2026-11-30", amount=1000, limit=1000)
    assert not limits.take_budget("t3", "backfill_ticks", day="2026-11-30", amount=1001, limit=1000)


def test_a_quota_is_none_until_set_then_read_back_and_listed(stores: tuple[Any, Any]) -> None:
    _, quotas = stores
    assert quotas.get_quota("t1") is None and quotas.list_quotas() == {}
    quotas.put_quota("t1", Quota(max_jobs=5))
    quotas.put_quota("t2", Quota(min_cron_interval_seconds=60, max_concurrent_runs=3))
    assert quotas.get_quota("t1") == Quota(max_jobs=5)
    assert quotas.list_quotas() == {
        "t1": Quota(max_jobs=5),
        "t2": Quota(min_cron_interval_seconds=60, max_concurrent_runs=3),
    }
    quotas.put_quota("t1", Quota(max_jobs=7))
    assert quotas.get_quota("t1") == Quota(max_jobs=7)


# --- RunStore.note_wait --------------------------------------------------------------------------


def test_note_wait_creates_a_pending_row_keeps_the_reason_and_counts_the_waits(backend: Backend) -> None:
    sf = times.stored(at(60))
    new = NewRun("job_a", "t1", sf, "scheduled")
    assert backend.runs.note_wait("job_a", sf, reason="waited for x", now=T0, create=new) == 1
    later = T0 + timedelta(seconds=1)
    assert backend.runs.note_wait("job_a", sf, reason="waited for x", now=later, create=new) == 2
    row = backend.runs.get("job_a", sf)
    assert row is not None and row.status == RunStatus.PENDING and row.attempt == 0
    assert row.reason == "waited for x" and row.tenant == "t1" and row.kind == "scheduled"


def test_note_wait_counts_on_a_start_held_under_a_lease(backend: Backend) -> None:
    # Given a run whose dead receive's start is kept on its row (RUNNING)
    from jobsched.domain.records import Lease

    sf = times.stored(at(60))
    new = NewRun("job_a", "t1", sf, "scheduled")
    lease = Lease(owner="w1/1", message="m-1", worker="w1", until=at(90))
    assert backend.runs.claim("job_a", sf, lease=lease, now=T0, create=new).applied
    assert backend.runs.start("job_a", sf, owner="w1/1", now=T0).applied
    # When its redelivery waits for the key, the wait is counted and the row stays RUNNING
    assert backend.runs.note_wait("job_a", sf, reason="r", now=T0, create=new) == 1
    row = backend.runs.get("job_a", sf)
    assert row is not None and row.status == RunStatus.RUNNING


def test_note_wait_writes_nothing_on_a_run_that_is_over(backend: Backend) -> None:
    sf = times.stored(at(60))
    backend.runs.put_pending(job_id="job_a", tenant="t1", scheduled_for=at(60), now=T0, skipped="overlap")
    new = NewRun("job_a", "t1", sf, "scheduled")
    assert backend.runs.note_wait("job_a", sf, reason="x", now=T0, create=new) is None
    row = backend.runs.get("job_a", sf)
    assert row is not None and row.status == RunStatus.SKIPPED and row.reason == "overlap"


# --- JobStore.count_jobs (max_jobs) -------------------------------------------------------------


def test_count_jobs_counts_the_tenants_jobs_of_the_statuses_asked_only(backend: Backend) -> None:
    from jobsched.domain.status import JobStatus
    from tests.contract.conftest import create, job

    for n in range(3):
        create(backend, job(f"job_s{n}"))
    create(backend, job("job_p", status=JobStatus.PAUSED))
    create(backend, job("job_c", status=JobStatus.CANCELLED))
    create(backend, job("job_other", tenant="t2"))
    live = (JobStatus.SCHEDULED, JobStatus.PAUSED)
    assert backend.jobs.count_jobs("t1", statuses=live, stop_at=100) == 4
    assert backend.jobs.count_jobs("t1", statuses=(JobStatus.CANCELLED,), stop_at=100) == 1
    assert backend.jobs.count_jobs("t2", statuses=live, stop_at=100) == 1
    assert backend.jobs.count_jobs("t3", statuses=live, stop_at=100) == 0
    assert backend.jobs.count_jobs("t1", statuses=live, stop_at=2) >= 2
