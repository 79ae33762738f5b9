"""Fargate vCPU reservations in the run path, on the fakes (services/run.py `_reserve_vcpu`): an
ECS-placed run reserves its placed CPU against the account's quota and its tenant's max_fargate_cpu
before it starts; a run that cannot reserve waits queued (its wait in its history), is never lost,
and runs once the vCPU is given back; every reservation is released at its run's outcome."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from jobsched.adapters.fargate_vcpu import MemoryFargateVcpuStore
from jobsched.adapters.limits import MemoryQuotaStore
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.compute import Resources
from jobsched.domain.fargate_vcpu import ACCOUNT_SCOPE, Scope, tenant_scope
from jobsched.domain.limits import Quota
from jobsched.domain.models import RunMessage
from jobsched.domain.status import RunStatus
from jobsched.services.limits import TenantQuotas
from jobsched.services.run import Delivery, Outcome
from tests.unit.services.conftest import T0, World

RUN_AT = T0 + timedelta(hours=1)
ACCOUNT_WAIT = "waited for Fargate capacity: the account's vCPU quota (2 vCPU) is reserved"


@pytest.fixture
def ecs(world: World) -> MemoryFargateVcpuStore:
    """The world's worker as the ECS worker, with an account quota of 2 vCPU."""
    worker = world.svc.worker
    worker.settings = worker.settings.model_copy(update={"worker_lane": "ecs", "fargate_vcpu_quota": 2})
    worker.fargate_vcpu = store = MemoryFargateVcpuStore()
    return store


def big_jobs(world: World, count: int, *, tenant: str = "t", handler: str = "demo.echo") -> list[str]:
    """One-offs placed on Fargate at 1 vCPU / 2 GB (a 600 s timeout, 1024 CPU units): the ECS worker's
    own task size, so they run in-process (a bigger one gets a task of its own:
    tests/integration/test_big_python_runs.py)."""
    request = CreateJobRequest(
        type="one_off",
        handler=handler,
        run_at=RUN_AT,
        timeout_seconds=600,
        resources=Resources(cpu=1024, memory_mib=2048),
    )
    submit = world.svc.job_service.submit
    return [submit(request, tenant=tenant, idempotency_key=None).job_id for _ in range(count)]


def hand_over(world: World) -> None:
    world.clock.set(RUN_AT)
    world.svc.dispatcher.dispatch_all()


def occupy(store: MemoryFargateVcpuStore, run: str, cpu: int, *, lapses_in: float = 3600) -> None:
    """Another run's reservation (its task running elsewhere)."""
    now = RUN_AT
    account = Scope(name=ACCOUNT_SCOPE, limit=2048)
    assert (
        store.reserve(run, cpu=cpu, scopes=(account,), until=now + timedelta(seconds=lapses_in), now=now)
        is None
    )


def test_an_ecs_placed_run_reserves_its_size_and_gives_it_back_at_its_outcome(
    world: World, ecs: MemoryFargateVcpuStore
) -> None:
    [job] = big_jobs(world, 1)
    hand_over(world)
    assert world.deliver() == [Outcome.SUCCEEDED]
    row = world.runs.get(job, RUN_AT)
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.reason is None
    assert ecs.used(ACCOUNT_SCOPE) == 0 and ecs.reservations() == {}


def test_the_handler_runs_while_its_vcpu_is_reserved(world: World, ecs: MemoryFargateVcpuStore) -> None:
    seen: list[int] = []
    world.handler("unit.look", lambda payload, ctx: seen.append(ecs.used(ACCOUNT_SCOPE)))
    big_jobs(world, 1, handler="unit.look")
    hand_over(world)
    assert world.deliver() == [Outcome.SUCCEEDED]
    assert seen == [1024] and ecs.used(ACCOUNT_SCOPE) == 0


def test_a_run_that_cannot_reserve_waits_queued_with_its_wait_in_its_history_then_runs(
    world: World, ecs: MemoryFargateVcpuStore
) -> None:
    # Given 1.5 of the account's 2 vCPU reserved by another run
    occupy(ecs, "other", 1536)
    [job] = big_jobs(world, 1)
    hand_over(world)
    # When its run is delivered, then it waits: acknowledged, a delayed copy carries it
    assert world.deliver() == [Outcome.WAITING]
    row = world.runs.get(job, RUN_AT)
    assert row is not None and row.status == RunStatus.PENDING and row.reason == ACCOUNT_WAIT
    assert ecs.used(ACCOUNT_SCOPE) == 1536
    assert world.queue.receive() == []  # the copy is delayed
    # When the other run gives its vCPU back, the copy runs once, on attempt 1
    assert ecs.release("other")
    for _ in range(5):
        world.clock.advance(30)
        world.deliver()
    row = world.runs.get(job, RUN_AT)
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    assert row.reason == ACCOUNT_WAIT  # the wait stays in its history
    assert ecs.used(ACCOUNT_SCOPE) == 0


def test_a_dead_runs_reservation_lapses_and_the_waiting_run_goes_on(
    world: World, ecs: MemoryFargateVcpuStore
) -> None:
    # Given a run that died holding 1.5 vCPU, its reservation lapsing in 60 s
    occupy(ecs, "dead", 1536, lapses_in=60)
    [job] = big_jobs(world, 1)
    hand_over(world)
    assert world.deliver() == [Outcome.WAITING]
    # When its lapse passes, the next look reserves (the lapsed one released) and runs
    for _ in range(5):
        world.clock.advance(30)
        world.deliver()
    row = world.runs.get(job, RUN_AT)
    assert row is not None and row.status == RunStatus.SUCCEEDED
    assert ecs.reservations() == {} and ecs.used(ACCOUNT_SCOPE) == 0


def test_a_tenants_max_fargate_cpu_caps_its_runs_within_the_account(
    world: World, ecs: MemoryFargateVcpuStore
) -> None:
    # Given tenant "t" capped at 1 vCPU with 1 vCPU of it reserved (a run of its own elsewhere), and a
    # run each of "t" and of "u" (no cap), the account having 1 vCPU free
    store = MemoryQuotaStore({"t": Quota(max_fargate_cpu=1024)})
    limits = world.svc.worker.limits
    world.svc.worker.quotas = TenantQuotas(store=store, limits=limits, clock=world.clock)  # type: ignore[arg-type]
    scopes = (Scope(name=ACCOUNT_SCOPE, limit=2048), Scope(name=tenant_scope("t"), limit=1024))
    assert (
        ecs.reserve("t-elsewhere", cpu=1024, scopes=scopes, until=RUN_AT + timedelta(hours=1), now=RUN_AT)
        is None
    )
    [capped] = big_jobs(world, 1, tenant="t")
    [free] = big_jobs(world, 1, tenant="u")
    hand_over(world)
    # When both are delivered
    outcomes = sorted(world.deliver())
    # Then "t"'s waits on its own cap and "u"'s runs in the account's rest
    assert outcomes == sorted([Outcome.WAITING, Outcome.SUCCEEDED])
    row = world.runs.get(capped, RUN_AT)
    assert row is not None and row.status == RunStatus.PENDING
    assert row.reason == (
        "waited for Fargate capacity: the tenant's quota max_fargate_cpu (1024 CPU units) is reserved"
    )
    done = world.runs.get(free, RUN_AT)
    assert done is not None and done.status == RunStatus.SUCCEEDED
    assert ecs.used(tenant_scope("t")) == 1024 and ecs.used(ACCOUNT_SCOPE) == 1024


def test_a_lambda_placed_run_reserves_nothing(world: World, ecs: MemoryFargateVcpuStore) -> None:
    request = CreateJobRequest(type="one_off", handler="demo.echo", run_at=RUN_AT)
    world.svc.job_service.submit(request, tenant="t", idempotency_key=None)
    occupy(ecs, "all", 2048)
    hand_over(world)
    assert world.deliver() == [Outcome.SUCCEEDED]


def test_racing_ecs_workers_never_reserve_more_than_the_account_quota(
    world: World, ecs: MemoryFargateVcpuStore
) -> None:
    # Given 5 runs of 1 vCPU each against 2 vCPU, whose handler stays in until told to finish
    lock = threading.Condition()
    state = {"active": 0, "peak": 0, "most_reserved": 0}
    finish = threading.Event()

    def hold(payload: dict[str, Any], ctx: Any) -> None:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
            state["most_reserved"] = max(state["most_reserved"], ecs.used(ACCOUNT_SCOPE))
            lock.notify_all()
        finish.wait(timeout=30)
        with lock:
            state["active"] -= 1

    world.handler("unit.hold", hold)
    world.svc.worker.heartbeat_thread = False
    jobs = big_jobs(world, 5, handler="unit.hold")
    hand_over(world)
    outcomes: dict[str, Outcome] = {}

    def work(m: Any) -> None:
        outcome = world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body))
        world.queue.delete(m.receipt_handle)
        with lock:
            outcomes[RunMessage.model_validate_json(m.body).job_id] = outcome
            lock.notify_all()

    # When 5 workers take them at once
    threads = [threading.Thread(target=work, args=(m,)) for m in world.queue.receive(10)]
    assert len(threads) == 5
    for t in threads:
        t.start()
    # Then 2 run and 3 wait
    with lock:
        assert lock.wait_for(lambda: state["active"] == 2 and len(outcomes) == 3, timeout=30)
    assert sorted(outcomes.values()) == [Outcome.WAITING] * 3
    finish.set()
    for t in threads:
        t.join(timeout=30)
    # And the waiting copies run later, never more than 2 vCPU reserved at once, all succeeding once
    for _ in range(10):
        world.clock.advance(30)
        world.deliver()
    assert state["peak"] == 2 and state["most_reserved"] <= 2048
    for j in jobs:
        row = world.runs.get(j, RUN_AT)
        assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    assert ecs.used(ACCOUNT_SCOPE) == 0 and ecs.reservations() == {}
