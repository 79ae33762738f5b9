"""Long backfills and bulk actions outside the request: accepted, done chunk by chunk, resumable."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobsched import telemetry
from jobsched.adapters.memory.metrics import MemoryMetrics
from jobsched.domain.commands import BackfillRequest, CreateJobRequest
from jobsched.domain.operations import Operation, OperationMessage, is_operation_message
from jobsched.domain.status import JobStatus
from jobsched.errors import NotFound
from jobsched.ports import Crash
from jobsched.services.operations import ChunkOutcome, OperationService
from jobsched.services.run import Delivery
from tests.support import CrashAt
from tests.unit.services.conftest import T0, World

HOURLY = "0 * * * *"
# Eight hourly ticks, 02:00 .. 09:00 of the day before T0; chunks of three: 3 + 3 + 2.
START, END = T0 - timedelta(hours=34), T0 - timedelta(hours=26)


def recurring(world: World, tenant: str = "t") -> str:
    created = world.svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr=HOURLY),
        tenant=tenant,
        idempotency_key=None,
    )
    return created.job_id


def service(world: World, **kwargs: Any) -> OperationService:
    return OperationService(schedule=world.svc.schedule, backfill_chunk=3, bulk_chunk=2, **kwargs)


def deliver_all(world: World, operations: OperationService, *, max_seconds: int = 600) -> Counter[str]:
    """Play the worker until the queue is empty: operation chunks to `operations`, runs to the worker;
    the clock moves a second at a time so held-back messages surface. A Crash leaves the message
    in flight until its visibility timeout ends."""
    outcomes: Counter[str] = Counter()
    for _ in range(max_seconds):
        if world.queue.depth() == 0:
            return outcomes
        for m in world.queue.receive():
            try:
                if is_operation_message(m.body):
                    outcome: str = operations.advance(OperationMessage.model_validate_json(m.body))
                else:
                    outcome = world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body))
            except Crash:
                outcomes["crashed"] += 1
                continue
            outcomes[str(outcome)] += 1
            world.queue.delete(m.receipt_handle)
        world.clock.advance(1)
    raise AssertionError(f"the queue did not drain: {world.queue.peek()}")


def applied_writes(world: World) -> Counter[str]:
    """Every run row the run store really wrote, by tick (a refused put_pending is not a write)."""
    writes: Counter[str] = Counter()
    put = world.runs.put_pending

    def counted(**kwargs: Any) -> Any:
        out = put(**kwargs)
        if out.applied:
            writes[kwargs["scheduled_for"].isoformat()] += 1
        return out

    world.runs.put_pending = counted  # type: ignore[method-assign]
    return writes


def ticks() -> list[datetime]:
    return [START + timedelta(hours=i) for i in range(8)]


def test_a_backfill_longer_than_a_chunk_is_accepted_at_once_and_done_chunk_by_chunk_by_the_worker(
    world: World,
) -> None:
    # Given an hourly job and an operation service with chunks of three ticks
    job_id = recurring(world)
    operations = service(world)
    # When eight ticks are backfilled
    accepted = operations.start_backfill(job_id, BackfillRequest(**{"from": START, "to": END}), tenant="t")
    # Then the request wrote no run: it stored the operation and queued its first chunk
    assert (accepted.status, accepted.total, accepted.done, accepted.chunk) == ("RUNNING", 8, 0, 0)
    assert world.runs.recent(job_id, limit=10) == []
    # and the worker carries it out in three chunks, each of its progress visible on the operation
    outcomes = deliver_all(world, operations)
    assert outcomes[ChunkOutcome.ADVANCED] == 3 and outcomes["succeeded"] == 8
    done = operations.get(accepted.operation_id, tenant="t")
    assert (done.status, done.done, done.created, done.existing, done.chunk) == ("SUCCEEDED", 8, 8, 0, 3)
    assert sorted(r.scheduled_for for r in world.runs.recent(job_id, limit=20)) == ticks()


def test_a_backfill_of_at_most_a_chunk_is_done_inline_and_recorded_as_a_finished_operation(
    world: World,
) -> None:
    # Given an hourly job
    job_id = recurring(world)
    operations = service(world)
    # When three ticks (one chunk) are backfilled
    request = BackfillRequest(**{"from": START, "to": START + timedelta(hours=3)})
    done = operations.start_backfill(job_id, request, tenant="t")
    # Then the request wrote the runs itself and the operation says so; nothing but runs is queued
    assert (done.status, done.done, done.created, done.sent) == ("SUCCEEDED", 3, 3, 3)
    assert operations.get(done.operation_id, tenant="t") == done
    assert all(not is_operation_message(body) for _, body in world.queue.peek())


@pytest.mark.parametrize("point", ["operation.chunk_done", "operation.advanced", "mid-chunk"])
def test_a_worker_killed_during_a_chunk_resumes_it_and_writes_no_tick_twice(world: World, point: str) -> None:
    # Given an eight-tick backfill accepted as an operation, and every run row write counted
    job_id = recurring(world)
    writes = applied_writes(world)
    operations = service(world, crash=CrashAt(point) if point != "mid-chunk" else CrashAt("never"))
    accepted = operations.start_backfill(job_id, BackfillRequest(**{"from": START, "to": END}), tenant="t")
    if point == "mid-chunk":
        # the worker dies between the second and the third tick write of the first chunk
        put, calls = world.runs.put_pending, Counter[str]()

        def dies_once(**kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 3:
                raise Crash("mid-chunk")
            return put(**kwargs)

        world.runs.put_pending = dies_once  # type: ignore[method-assign]
    # When the worker dies at `point` once and the message comes back after its visibility timeout
    outcomes = deliver_all(world, operations)
    # Then the operation finished, every tick has its one run, and no run row was written twice
    assert outcomes["crashed"] == 1
    done = operations.get(accepted.operation_id, tenant="t")
    assert (done.status, done.done) == ("SUCCEEDED", 8)
    assert done.created + done.existing == 8
    assert sorted(writes) == [t.isoformat() for t in ticks()] and set(writes.values()) == {1}
    runs = world.runs.recent(job_id, limit=20)
    assert sorted(r.scheduled_for for r in runs) == ticks() and {r.status.value for r in runs} == {
        "SUCCEEDED"
    }


def test_a_second_delivery_of_a_chunk_already_recorded_does_nothing(world: World) -> None:
    # Given an operation whose first chunk a worker has done
    job_id = recurring(world)
    operations = service(world)
    accepted = operations.start_backfill(job_id, BackfillRequest(**{"from": START, "to": END}), tenant="t")
    first = OperationMessage(operation_id=accepted.operation_id, chunk=0)
    assert operations.advance(first) == ChunkOutcome.ADVANCED
    depth = world.queue.depth()
    # When chunk 0's message is delivered again, twice (its next message may have been lost: once
    # it is sent again), and a message of a chunk far behind arrives
    assert operations.advance(first) == ChunkOutcome.RESENT
    assert world.queue.depth() == depth + 1
    # Then the operation's progress is chunk 0's, once
    after = operations.get(accepted.operation_id, tenant="t")
    assert (after.chunk, after.done, after.created) == (1, 3, 3)
    stale = operations.advance(OperationMessage(operation_id=accepted.operation_id, chunk=5))
    assert stale == ChunkOutcome.STALE


def test_a_backfill_whose_job_is_cancelled_meanwhile_stops_and_says_why(world: World) -> None:
    # Given an eight-tick backfill accepted, and its job cancelled before the worker gets to it
    job_id = recurring(world)
    operations = service(world)
    accepted = operations.start_backfill(job_id, BackfillRequest(**{"from": START, "to": END}), tenant="t")
    world.svc.job_service.cancel(job_id, tenant="t")
    # When the worker takes its chunk
    deliver_all(world, operations)
    # Then the operation failed, naming the cancel, and wrote no run
    done = operations.get(accepted.operation_id, tenant="t")
    assert (done.status, done.error, done.failed, done.created) == ("FAILED", "the job was cancelled", 8, 0)
    assert world.runs.recent(job_id, limit=10) == []


def test_another_tenants_operation_is_not_found(world: World) -> None:
    # Given tenant a's backfill operation
    operations = service(world)
    accepted = operations.start_backfill(
        recurring(world, "a"), BackfillRequest(**{"from": START, "to": END}), tenant="a"
    )
    # When tenant b asks for it, or for an id that is no operation's
    # Then neither is found
    for operation_id in (accepted.operation_id, "op_nope", "job_x"):
        with pytest.raises(NotFound):
            operations.get(operation_id, tenant="b")
    assert isinstance(operations.get(accepted.operation_id, tenant="a"), Operation)


def test_a_bulk_action_on_more_than_a_chunk_runs_outside_the_request_with_one_result_per_job(
    world: World,
) -> None:
    # Given five jobs of tenant t and one of tenant u, and chunks of two jobs
    ids = [recurring(world) for _ in range(5)]
    foreign = recurring(world, "u")
    operations = service(world)
    # When t pauses its five and u's job in one request
    accepted = operations.start_bulk("pause", tenant="t", job_ids=[*ids, foreign], where=None)
    # Then it is accepted as an operation that has paused nothing yet
    assert accepted.operation is not None and accepted.items == []
    assert {world.jobs.get_job(i).status for i in ids} == {JobStatus.SCHEDULED}  # type: ignore[union-attr]
    # and the worker pauses each of t's jobs, and reports u's job as not found, in the order asked
    deliver_all(world, operations)
    done = operations.get(accepted.operation.operation_id, tenant="t")
    assert (done.status, done.done, done.failed, done.chunk) == ("SUCCEEDED", 6, 1, 3)
    assert [r["job_id"] for r in done.results] == [*ids, foreign]
    assert [r["ok"] for r in done.results] == [True] * 5 + [False]
    assert done.results[-1]["error"]["code"] == "not_found"
    assert {world.jobs.get_job(i).status for i in ids} == {JobStatus.PAUSED}  # type: ignore[union-attr]
    assert world.jobs.get_job(foreign).status == JobStatus.SCHEDULED  # type: ignore[union-attr]


def test_a_bulk_action_of_at_most_a_chunk_is_done_inline(world: World) -> None:
    # Given two jobs (one chunk)
    ids = [recurring(world) for _ in range(2)]
    # When they are paused in one request
    accepted = service(world).start_bulk("pause", tenant="t", job_ids=ids, where=None)
    # Then the answer has their results and no operation
    assert accepted.operation is None and [i.job_id for i in accepted.items] == ids
    assert world.queue.depth() == 0


def test_a_chunk_whose_message_reached_the_dead_letter_queue_ends_its_operation_failed(world: World) -> None:
    # Given an eight-tick backfill whose first chunk was done, and the second chunk's message given up on
    job_id = recurring(world)
    operations = service(world)
    accepted = operations.start_backfill(job_id, BackfillRequest(**{"from": START, "to": END}), tenant="t")
    operations.advance(OperationMessage(operation_id=accepted.operation_id, chunk=0))
    given_up = OperationMessage(operation_id=accepted.operation_id, chunk=1)
    # When the reconciler abandons it (and a stale one of chunk 0 too)
    assert (
        operations.abandon(OperationMessage(operation_id=accepted.operation_id, chunk=0))
        == ChunkOutcome.STALE
    )
    assert operations.abandon(given_up) == ChunkOutcome.ABANDONED
    # Then the operation is FAILED, says why, and counts the ticks left undone; a late delivery does nothing
    done = operations.get(accepted.operation_id, tenant="t")
    assert (done.status, done.done, done.failed) == ("FAILED", 3, 5) and "chunk 1" in (done.error or "")
    assert operations.advance(given_up) == ChunkOutcome.STALE


def test_each_chunk_message_is_counted_as_an_operation_outcome_and_never_as_a_run(world: World) -> None:
    # Given an operation service that emits to kept metrics, and a backfill of three chunks
    metrics = MemoryMetrics()
    operations = service(world, metrics=metrics)
    job_id = recurring(world)
    operations.start_backfill(job_id, BackfillRequest(**{"from": START, "to": END}), tenant="t")
    # When the worker carries it out, and a stale copy of its first chunk arrives after
    deliver_all(world, operations)
    operations.advance(OperationMessage(operation_id="op_gone", chunk=0))
    # Then each chunk counted Operations_advanced once, the stale one Operations_stale, and no Runs_
    assert metrics.values(telemetry.operations("advanced")) == [1, 1, 1]
    assert metrics.values(telemetry.operations("stale")) == [1]
    assert not [e.name for e in metrics.emitted if e.name.startswith(telemetry.RUNS)]
