"""The RunQueue contract (jobsched.ports): all-or-error sends, visibility extended by receipt."""

from __future__ import annotations

from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from tests.contract.conftest import Backend


def message(n: int) -> Outgoing:
    return Outgoing(RunMessage(job_id=f"job_{n}", scheduled_for="2026-11-30T12:01:00.000Z"), 0)


def test_every_message_sent_is_received_with_its_body(backend: Backend) -> None:
    backend.queue.send([message(n) for n in range(13)])  # more than one SQS batch
    got: list[str] = []
    for _ in range(5):
        batch = backend.receive()
        got += [RunMessage.model_validate_json(m.body).job_id for m in batch]
        for m in batch:
            backend.delete(m.receipt_handle)
        if not batch:
            break
    assert sorted(got) == sorted(f"job_{n}" for n in range(13))


def test_a_received_message_stays_invisible_while_extended(backend: Backend) -> None:
    backend.queue.send([message(1)])
    (received,) = backend.receive()
    assert backend.queue.extend(received.receipt_handle, seconds=300)
    assert backend.receive() == []


def test_extending_a_deleted_message_answers_false(backend: Backend) -> None:
    backend.queue.send([message(1)])
    (received,) = backend.receive()
    backend.delete(received.receipt_handle)
    assert not backend.queue.extend(received.receipt_handle, seconds=30)


def test_messages_with_a_fair_queue_group_are_accepted_by_the_standard_queue(backend: Backend) -> None:
    # Given runs sent each in its tenant's fair-queue group (MessageGroupId on a standard queue)
    grouped = [Outgoing(m.message, 0, group=f"tenant-{n % 2}") for n, m in enumerate(map(message, range(12)))]
    # When they are sent, then the send succeeds and every one of them is received
    backend.queue.send(grouped)
    got: list[str] = []
    while batch := backend.receive():
        got += [RunMessage.model_validate_json(m.body).job_id for m in batch]
        for m in batch:
            backend.delete(m.receipt_handle)
    assert sorted(got) == sorted(f"job_{n}" for n in range(12))
