"""Concurrency keys against moto_server (thread-safe): racing workers never run more than a key's
limit at once; a dead holder's slot is freed by its lapse; a wait uses up no receives toward the
execution queue's redrive."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from jobsched import resources
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.limits import Concurrency
from jobsched.domain.models import RunMessage
from jobsched.domain.status import RunStatus
from jobsched.ports import Crash, FakeClock
from jobsched.services.run import Delivery, Outcome
from jobsched.wiring import Services
from tests.support import CrashAt, services_on

T0 = times.parse_stored("2026-11-30T12:00:00.000Z")
RUN_AT = T0 + timedelta(hours=1)  # past the look-ahead: the test delivers the runs itself
LIMIT = 2
RUNS = 8
_ids = itertools.count()


@pytest.fixture
def keyed(endpoint: str, request: pytest.FixtureRequest) -> Iterator[tuple[Services, FakeClock]]:
    """Services on the embedded moto server and a fake clock; real threads may race on them."""
    clock = FakeClock(T0)
    yield services_on(endpoint, f"k{abs(hash(request.node.name)) % 10**8}", clock=clock), clock


def submit(svc: Services, handler: str, *, key: str = "db", limit: int = LIMIT) -> str:
    request = CreateJobRequest(
        type="one_off", handler=handler, run_at=RUN_AT, concurrency=Concurrency(key=key, limit=limit)
    )
    return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def delivery(job_id: str) -> Delivery:
    """A fresh message of the job's run (a new message id each time, as a re-sent copy has)."""
    body = RunMessage(job_id=job_id, scheduled_for=times.stored(RUN_AT), guard=True).model_dump_json()
    n = next(_ids)
    return Delivery(f"msg-{n}", f"receipt-{n}", body)


def test_racing_workers_never_run_more_runs_of_a_key_than_its_limit(
    keyed: tuple[Services, FakeClock],
) -> None:
    svc, clock = keyed
    # Given 8 one-offs sharing key "db" (limit 2) whose handler stays in until told to finish
    lock = threading.Condition()
    state = {"active": 0, "peak": 0, "ran": 0}
    finish = threading.Event()

    def hold(payload: dict[str, Any], ctx: Any) -> None:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
            lock.notify_all()
        finish.wait(timeout=60)
        with lock:
            state["active"] -= 1
            state["ran"] += 1

    svc.registry.register("race.hold", hold)
    jobs = [submit(svc, "race.hold") for _ in range(RUNS)]
    clock.set(RUN_AT)
    outcomes: dict[str, Outcome] = {}

    def work(job_id: str) -> None:
        outcome = svc.worker.process(delivery(job_id))
        with lock:
            outcomes[job_id] = outcome
            lock.notify_all()

    # When 8 workers receive the 8 runs at once
    threads = [threading.Thread(target=work, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    # Then exactly 2 get in; the other 6 wait (acknowledged, a delayed copy carries each)
    with lock:
        assert lock.wait_for(lambda: state["active"] == LIMIT and len(outcomes) == RUNS - LIMIT, timeout=60)
    assert sorted(outcomes.values()) == [Outcome.WAITING] * (RUNS - LIMIT)
    finish.set()
    for t in threads:
        t.join(timeout=60)
    assert [outcomes[j] for j in jobs].count(Outcome.SUCCEEDED) == LIMIT
    # And racing again, round after round, every run gets through, never more than 2 at once
    for _ in range(RUNS):
        waiting = [j for j in jobs if outcomes[j] != Outcome.SUCCEEDED]
        if not waiting:
            break
        threads = [threading.Thread(target=work, args=(j,)) for j in waiting]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert all(outcomes[j] == Outcome.SUCCEEDED for j in jobs)
    assert state["peak"] == LIMIT and state["ran"] == RUNS
    assert svc.worker.limits is not None and svc.worker.limits.holders("t", "db", now=clock.now()) == {}
    for j in jobs:
        row = svc.runs.get(j, RUN_AT)
        assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1


def test_a_dead_holders_slot_is_freed_by_its_lapse_and_the_waiting_run_goes_on(
    keyed: tuple[Services, FakeClock],
) -> None:
    svc, clock = keyed
    # Given two one-offs of key "db" (limit 1), the first one's worker killed inside its handler
    svc.worker.crash = CrashAt("run.after_handler")
    first = submit(svc, "demo.echo", limit=1)
    second = submit(svc, "demo.echo", limit=1)
    clock.set(RUN_AT)
    with pytest.raises(Crash):
        svc.worker.process(delivery(first))
    svc.worker.crash = CrashAt("never")
    # When the second run comes while the dead holder's slot is live, it waits
    assert svc.worker.process(delivery(second)) == Outcome.WAITING
    row = svc.runs.get(second, RUN_AT)
    assert row is not None and row.status == RunStatus.PENDING
    assert row.reason == "waited for concurrency key 'db' (limit 1)"
    # Then, once the hold lapses (nobody renews a dead worker's slot), it gets the slot and runs
    clock.advance(svc.worker.hold_seconds() + 1)
    assert svc.worker.process(delivery(second)) == Outcome.SUCCEEDED
    row = svc.runs.get(second, RUN_AT)
    assert row is not None and row.status == RunStatus.SUCCEEDED


def test_a_run_that_waits_many_times_uses_up_no_receives_toward_the_redrive(
    keyed: tuple[Services, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, clock = keyed
    # (the copies' delays are SQS's real seconds on moto_server: undelayed here, the count is the point)
    monkeypatch.setattr("jobsched.services.run.key_wait_seconds", lambda waits: 0)
    sqs = svc.queue.client  # type: ignore[attr-defined]
    url = svc.settings.execution_queue_url
    # Given a keyed run whose key another holder keeps full
    job_id = submit(svc, "demo.echo", limit=1)
    clock.set(RUN_AT)
    assert svc.worker.limits is not None
    svc.worker.limits.acquire(
        "t", "db", holder="other", limit=1, until=RUN_AT + timedelta(hours=1), now=RUN_AT
    )
    current = delivery(job_id)
    # When it is received and finds the key full more times than the queue's maxReceiveCount
    for _ in range(resources.EXECUTION_QUEUE.max_receive_count + 2):
        assert svc.worker.process(current) == Outcome.WAITING
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"]
        )["Messages"]
        [m] = got
        # Then every copy is a new message, received for the first time
        assert m["Attributes"]["ApproximateReceiveCount"] == "1"
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        current = Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"])
    svc.worker.limits.release("t", "db", holder="other")
    assert svc.worker.process(current) == Outcome.SUCCEEDED
