"""Run-time tenant quotas on the fakes: max_runs_per_second spreads a tenant's burst over later
seconds at hand-over (services/dispatch.py "Rate"); max_concurrent_runs, for a tenant whose quota an
operator set, holds the tenant-wide key (services/run.py `_keys`): excess runs wait, none fails."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

from jobsched.adapters.limits import MemoryQuotaStore
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.limits import TENANT_KEY, Quota
from jobsched.domain.models import RunMessage
from jobsched.domain.status import RunStatus
from jobsched.services.limits import TenantQuotas
from jobsched.services.run import Delivery, Outcome
from tests.unit.services.conftest import T0, World

RUN_AT = T0 + timedelta(hours=1)  # past the look-ahead: no hand-over at submit, the pass hands them over


def set_quota(world: World, tenant: str, **fields: int) -> MemoryQuotaStore:
    """An operator's quota for `tenant`, read by the dispatcher and the worker through one cache."""
    store = MemoryQuotaStore({tenant: Quota(**fields)})
    quotas = TenantQuotas(store=store, limits=world.svc.worker.limits, clock=world.clock)  # type: ignore[arg-type]
    world.svc.dispatcher.quotas = world.svc.worker.quotas = quotas
    return store


def one_offs(world: World, tenant: str, count: int, handler: str = "demo.echo") -> list[str]:
    request = CreateJobRequest(type="one_off", handler=handler, run_at=RUN_AT)
    submit = world.svc.job_service.submit
    return [submit(request, tenant=tenant, idempotency_key=None).job_id for _ in range(count)]


def test_a_tenant_over_its_rate_has_its_burst_spread_over_later_seconds_and_others_are_not_delayed(
    world: World,
) -> None:
    # Given tenant "noisy" at max_runs_per_second 5 with 20 one-offs due on one second, and
    # tenant "quiet" (the defaults) with 3 due on the same second
    set_quota(world, "noisy", max_runs_per_second=5)
    noisy, quiet = one_offs(world, "noisy", 20), one_offs(world, "quiet", 3)
    # When a dispatcher pass hands them over on their second, and the queue is drained second by second
    world.clock.set(RUN_AT)
    world.svc.dispatcher.dispatch_all()
    seen: dict[str, int] = {}
    ticks: set[str] = set()
    for second in range(10):
        while batch := world.queue.receive(10):
            for m in batch:
                message = RunMessage.model_validate_json(m.body)
                seen[message.job_id] = second
                ticks.add(message.scheduled_for)
                world.queue.delete(m.receipt_handle)
        world.clock.advance(1)
    # Then the noisy tenant's 20 surface at most 5 a second
    per_second = Counter(seen[j] for j in noisy)
    assert sum(per_second.values()) == 20 and max(per_second.values()) <= 5
    # over the seconds its fuller shard needs: the tenant's slots are numbered 5 a second, shard i
    # takes the slots i, i + 2, i + 4, ..., so its n-th run takes slot i + 2(n - 1), in second slot // 5
    # (4 seconds when the job ids fall 10 and 10 over the 2 shards, more when unevenly)
    shards = world.svc.settings.shard_count
    per_shard = Counter(times.shard_of(j, shards) for j in noisy)
    last = max((i + (n - 1) * shards) // 5 for i, n in per_shard.items())
    assert set(per_second) == set(range(last + 1))
    # And the quiet tenant's 3 surface at once
    assert [seen[j] for j in quiet] == [0, 0, 0]
    # And every run keeps its own tick: only its message was delayed
    assert ticks == {times.stored(RUN_AT)}


def test_a_tenant_with_the_default_quota_holds_no_tenant_wide_key(world: World) -> None:
    # Given a tenant without a quota of its own (the fleet's limits bound it)
    one_offs(world, "t", 1)
    world.clock.set(RUN_AT)
    world.svc.dispatcher.dispatch_all()
    # When its run runs, then it took no tenant-wide slot (no limits-table call for it)
    assert world.deliver() == [Outcome.SUCCEEDED]
    assert world.svc.worker.quotas is not None and world.svc.worker.quotas.set_for("t") is None


def test_at_most_max_concurrent_runs_run_at_once_the_others_wait_and_all_succeed(world: World) -> None:
    # Given tenant "t" at max_concurrent_runs 2, and 5 of its one-offs due at once whose handler
    # stays in until told to finish
    set_quota(world, "t", max_concurrent_runs=2)
    lock = threading.Condition()
    state = {"active": 0, "peak": 0}
    finish = threading.Event()

    def hold(payload: dict[str, Any], ctx: Any) -> None:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
            lock.notify_all()
        finish.wait(timeout=30)
        with lock:
            state["active"] -= 1

    world.handler("unit.hold", hold)
    world.svc.worker.heartbeat_thread = False
    jobs = one_offs(world, "t", 5, handler="unit.hold")
    world.clock.set(RUN_AT)
    world.svc.dispatcher.dispatch_all()
    outcomes: dict[str, Outcome] = {}

    def work(m: Any) -> None:
        outcome = world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body))
        world.queue.delete(m.receipt_handle)
        with lock:
            outcomes[RunMessage.model_validate_json(m.body).job_id] = outcome
            lock.notify_all()

    # When 5 workers take the 5 runs at once
    threads = [threading.Thread(target=work, args=(m,)) for m in world.queue.receive(10)]
    assert len(threads) == 5
    for t in threads:
        t.start()
    # Then 2 run and 3 wait (acknowledged; a delayed copy carries each, its wait in its history)
    with lock:
        assert lock.wait_for(lambda: state["active"] == 2 and len(outcomes) == 3, timeout=30)
    assert sorted(outcomes.values()) == [Outcome.WAITING] * 3
    waiting = [j for j, o in outcomes.items() if o == Outcome.WAITING]
    for j in waiting:
        row = world.runs.get(j, RUN_AT)
        assert row is not None and row.status == RunStatus.PENDING
        assert row.reason == "waited for the tenant's quota max_concurrent_runs (limit 2)"
    finish.set()
    for t in threads:
        t.join(timeout=30)
    # And once the two are done, the waiting copies run, never more than 2 at once, all succeeding
    for _ in range(10):
        world.clock.advance(30)
        world.deliver()
    assert state["peak"] == 2
    for j in jobs:
        row = world.runs.get(j, RUN_AT)
        assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    for j in waiting:
        row = world.runs.get(j, RUN_AT)
        assert row is not None and row.reason == "waited for the tenant's quota max_concurrent_runs (limit 2)"
    assert world.svc.worker.limits is not None
    assert world.svc.worker.limits.holders("t", TENANT_KEY, now=world.clock.now()) == {}


class CountingQuotaStore(MemoryQuotaStore):
    """The worker's own view of the quotas table (its own Lambda, its own cache): reads counted."""

    reads: int = 0

    def get_quota(self, tenant: str) -> Quota | None:
        self.reads += 1
        return super().get_quota(tenant)


def own_worker_quotas(world: World, quotas: dict[str, Quota]) -> CountingQuotaStore:
    store = CountingQuotaStore(dict(quotas))
    limits = world.svc.worker.limits
    world.svc.worker.quotas = TenantQuotas(store=store, limits=limits, clock=world.clock)  # type: ignore[arg-type]
    return store


def held_tenant_keys(world: World, seen: list[int]) -> None:
    """A handler that notes how many of its tenant's tenant-wide slots are held while it runs."""

    def note(payload: dict[str, Any], ctx: Any) -> None:
        limits = world.svc.worker.limits
        assert limits is not None
        seen.append(len(limits.holders(payload["tenant"], TENANT_KEY, now=world.clock.now())))

    world.handler("unit.note", note)


def test_the_dispatchers_message_carries_the_tenants_cap_so_the_worker_reads_no_quota(world: World) -> None:
    # Given tenant "t" at max_concurrent_runs 3, tenant "u" with no quota of its own, and a worker
    # whose own quota cache is cold (a Lambda of its own)
    set_quota(world, "t", max_concurrent_runs=3)
    reads = own_worker_quotas(world, {"t": Quota(max_concurrent_runs=3)})
    seen: list[int] = []
    held_tenant_keys(world, seen)
    submit = world.svc.job_service.submit
    for tenant in ("t", "u"):
        payload = {"tenant": tenant}
        request = CreateJobRequest(type="one_off", handler="unit.note", payload=payload, run_at=RUN_AT)
        submit(request, tenant=tenant, idempotency_key=None)
    # When the dispatcher hands both over
    world.clock.set(RUN_AT)
    world.svc.dispatcher.dispatch_all()
    caps = {RunMessage.model_validate_json(body).cap for _, body in world.queue.peek()}
    # Then each message carries its tenant's cap: 3 for "t", 0 (no tenant-wide key) for "u"
    assert caps == {3, 0}
    # And the worker runs both without reading a quota, "t"'s under its tenant-wide key, "u"'s under none
    assert world.deliver() == [Outcome.SUCCEEDED, Outcome.SUCCEEDED]
    assert reads.reads == 0
    assert sorted(seen) == [0, 1]


def test_a_message_that_carries_no_cap_is_held_to_the_quota_the_worker_reads(world: World) -> None:
    # Given tenant "t" at max_concurrent_runs 3, and a run sent without a cap (as a retry, a replay
    # or a run-now sends it)
    reads = own_worker_quotas(world, {"t": Quota(max_concurrent_runs=3)})
    seen: list[int] = []
    held_tenant_keys(world, seen)
    job = world.svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="unit.note", payload={"tenant": "t"}, run_at=RUN_AT),
        tenant="t",
        idempotency_key=None,
    )
    world.clock.set(RUN_AT)
    world.svc.dispatcher.quotas = None  # a sender that stamps no cap
    world.svc.dispatcher.dispatch_all()
    assert [RunMessage.model_validate_json(body).cap for _, body in world.queue.peek()] == [None]
    # When the worker runs it, then it read the tenant's quota once and held the tenant-wide key
    assert world.deliver() == [Outcome.SUCCEEDED]
    assert reads.reads == 1 and seen == [1]
    assert world.runs.get(job.job_id, RUN_AT) is not None
