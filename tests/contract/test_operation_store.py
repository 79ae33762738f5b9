"""The OperationStore contract (jobsched.ports): one item per operation, a compare-and-set per chunk."""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain.listing import JobFilter
from jobsched.domain.operations import Operation
from tests.contract.conftest import T0, Backend


def operation(operation_id: str = "op_1", *, tenant: str = "t1") -> Operation:
    return Operation(
        operation_id=operation_id,
        tenant=tenant,
        kind="backfill",
        job_id="job_1",
        request={"from": "2026-11-29T00:00:00.000Z", "to": "2026-11-30T00:00:00.000Z"},
        total=24,
        created_at=T0,
        updated_at=T0,
    )


def test_an_operation_is_stored_once_and_read_back_whole(backend: Backend) -> None:
    # Given a new operation
    first = operation()
    # When it is stored, and stored again under the same id
    assert backend.jobs.put_operation(first) is True
    assert backend.jobs.put_operation(first.model_copy(update={"total": 1})) is False
    # Then it reads back as first stored, and an unknown id reads as None
    assert backend.jobs.get_operation("op_1") == first
    assert backend.jobs.get_operation("op_2") is None


def test_a_chunk_advances_an_operation_only_from_the_chunk_it_was_done_for(backend: Backend) -> None:
    # Given an operation at chunk 0
    backend.jobs.put_operation(operation())
    one = operation().model_copy(update={"chunk": 1, "done": 10, "updated_at": T0 + timedelta(seconds=5)})
    # When two deliveries of chunk 0 record it, and one of a chunk not reached yet
    assert backend.jobs.advance_operation(one, expected_chunk=0) is True
    assert backend.jobs.advance_operation(one.model_copy(update={"done": 99}), expected_chunk=0) is False
    assert backend.jobs.advance_operation(one.model_copy(update={"chunk": 9}), expected_chunk=5) is False
    # Then the first one's progress is what is stored
    assert backend.jobs.get_operation("op_1") == one


def test_an_operation_item_is_neither_a_job_of_the_listing_nor_a_due_entry(backend: Backend) -> None:
    # Given a stored operation of tenant t1
    backend.jobs.put_operation(operation())
    # When t1 lists its jobs
    page = backend.jobs.list_jobs("t1", order="created", where=JobFilter(), cursor=None, limit=100)
    # Then the listing holds no operation and read none
    assert page.jobs == [] and page.items_read == 0
