"""Run-time tenant quotas against moto_server: the dispatcher spreads a tenant's runs beyond its
max_runs_per_second over later seconds with SQS DelaySeconds, and a tenant's max_concurrent_runs
(its quota set by an operator, in the quotas table) makes excess runs wait, never fail."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.limits import TENANT_KEY, Quota
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import RunStatus
from jobsched.ports import FakeClock
from jobsched.services.run import Delivery, Outcome
from jobsched.wiring import Services
from tests.support import services_on

T0 = times.parse_stored("2026-11-30T12:00:00.000Z")
RUN_AT = T0 + timedelta(hours=1)  # past the look-ahead at submit: the dispatcher's pass hands them over
WAITED = "waited for the tenant's quota max_concurrent_runs (limit 2)"


def world(endpoint: str, name: str, *, shards: int) -> tuple[Services, FakeClock]:
    clock = FakeClock(T0)
    return services_on(endpoint, f"q{abs(hash(name)) % 10**8}", clock=clock, shard_count=shards), clock


@pytest.fixture
def one_shard(endpoint: str, request: pytest.FixtureRequest) -> Iterator[tuple[Services, FakeClock]]:
    yield world(endpoint, request.node.name, shards=1)


@pytest.fixture
def two_shards(endpoint: str, request: pytest.FixtureRequest) -> Iterator[tuple[Services, FakeClock]]:
    yield world(endpoint, request.node.name, shards=2)


def one_offs(svc: Services, tenant: str, count: int, handler: str = "demo.echo") -> list[str]:
    request = CreateJobRequest(type="one_off", handler=handler, run_at=RUN_AT)
    return [svc.job_service.submit(request, tenant=tenant, idempotency_key=None).job_id for _ in range(count)]


def drain(svc: Services, expected: int) -> list[RunMessage]:
    """Every message of the execution queue (real SQS delays of a few seconds), deleted as read."""
    sqs = svc.queue.client  # type: ignore[attr-defined]
    url = svc.settings.execution_queue_url
    got: list[RunMessage] = []
    for _ in range(30):
        if len(got) >= expected:
            break
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for m in answer.get("Messages", []):
            got.append(RunMessage.model_validate_json(m["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return got


def test_a_tenant_at_rate_5_with_20_runs_due_on_one_second_has_them_delivered_over_4_seconds(
    one_shard: tuple[Services, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, clock = one_shard
    # Given an operator's quota of 5 runs a second for tenant "noisy" (in the quotas table)
    assert svc.quotas is not None
    svc.quotas.put_quota("noisy", Quota(max_runs_per_second=5))
    # And 20 of its one-offs due on one second, beside tenant "quiet"'s 3 (the defaults)
    noisy, quiet = one_offs(svc, "noisy", 20), one_offs(svc, "quiet", 3)
    delays: dict[str, int] = {}
    send = svc.queue.send

    def recording(outgoing: Sequence[Outgoing]) -> None:
        for o in outgoing:
            assert isinstance(o.message, RunMessage)
            delays[o.message.job_id] = o.delay_seconds
        send(outgoing)

    monkeypatch.setattr(svc.queue, "send", recording)
    # When the dispatcher's pass hands them over on their second
    clock.set(RUN_AT)
    report = svc.dispatcher.dispatch_all()
    assert report.runs_sent == 23
    # Then the noisy tenant's go out delayed 0, 1, 2 and 3 s, 5 each, and the quiet tenant's undelayed
    assert Counter(delays[j] for j in noisy) == {0: 5, 1: 5, 2: 5, 3: 5}
    assert [delays[j] for j in quiet] == [0, 0, 0]
    # And SQS delivers every one of them, each with its own tick
    got = drain(svc, 23)
    assert sorted(m.job_id for m in got) == sorted(noisy + quiet)
    assert {m.scheduled_for for m in got} == {times.stored(RUN_AT)}


def test_two_shards_side_by_side_never_send_a_tenant_more_than_its_rate_for_one_second(
    two_shards: tuple[Services, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, clock = two_shards
    assert svc.quotas is not None
    svc.quotas.put_quota("noisy", Quota(max_runs_per_second=5))
    noisy = one_offs(svc, "noisy", 20)
    delays: list[int] = []
    send = svc.queue.send
    monkeypatch.setattr(
        svc.queue, "send", lambda out: (delays.extend(o.delay_seconds for o in out), send(out))
    )
    clock.set(RUN_AT)
    svc.dispatcher.dispatch_all()
    # Then each second gets at most 5 of the tenant's 20 runs from both shards together
    assert len(delays) == len(noisy) and max(Counter(delays).values()) <= 5
    assert len(drain(svc, 20)) == 20


def test_with_max_concurrent_runs_2_of_5_runs_due_at_once_2_run_and_3_wait_then_all_succeed(
    one_shard: tuple[Services, FakeClock],
) -> None:
    svc, clock = one_shard
    # Given tenant "t" at max_concurrent_runs 2, and 5 of its one-offs whose handler stays in until told
    assert svc.quotas is not None
    svc.quotas.put_quota("t", Quota(max_concurrent_runs=2))
    lock = threading.Condition()
    state = {"active": 0, "peak": 0}
    finish = threading.Event()

    def hold(payload: dict[str, Any], ctx: Any) -> None:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
            lock.notify_all()
        finish.wait(timeout=60)
        with lock:
            state["active"] -= 1

    svc.registry.register("quota.hold", hold)
    jobs = one_offs(svc, "t", 5, handler="quota.hold")
    sf = times.stored(RUN_AT)
    outcomes: dict[str, Outcome] = {}
    n = iter(range(1000))

    def work(job_id: str) -> None:
        i = next(n)
        body = RunMessage(job_id=job_id, scheduled_for=sf, guard=True).model_dump_json()
        outcome = svc.worker.process(Delivery(f"msg-{i}", f"receipt-{i}", body))
        with lock:
            outcomes[job_id] = outcome
            lock.notify_all()

    # When 5 workers take the 5 runs at once
    clock.set(RUN_AT)
    threads = [threading.Thread(target=work, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    # Then 2 run and the other 3 wait, the wait on their run rows
    with lock:
        assert lock.wait_for(lambda: state["active"] == 2 and len(outcomes) == 3, timeout=60)
    assert sorted(outcomes.values()) == [Outcome.WAITING] * 3
    waiting = list(outcomes)
    for j in waiting:
        row = svc.runs.get(j, RUN_AT)
        assert row is not None and row.status == RunStatus.PENDING and row.reason == WAITED
    finish.set()
    for t in threads:
        t.join(timeout=60)
    # And racing again, every run gets through, never more than 2 at once, all succeeding once
    for _ in range(5):
        rest = [j for j in jobs if outcomes[j] != Outcome.SUCCEEDED]
        threads = [threading.Thread(target=work, args=(j,)) for j in rest]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert all(outcomes[j] == Outcome.SUCCEEDED for j in jobs) and state["peak"] == 2
    for j in jobs:
        row = svc.runs.get(j, RUN_AT)
        assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    for j in waiting:  # the history keeps the wait
        row = svc.runs.get(j, RUN_AT)
        assert row is not None and row.reason == WAITED
    assert svc.worker.limits is not None and svc.worker.limits.holders("t", TENANT_KEY, now=clock.now()) == {}
