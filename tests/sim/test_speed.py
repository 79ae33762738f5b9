"""What makes the simulator fast, stated as behaviour (no timing): each test names the cost it removes."""

from __future__ import annotations

from datetime import UTC, datetime

from jobsched.adapters.memory import MemoryJobStore
from jobsched.domain.models import Backoff, Job, RetryPolicy

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _stored_job(store: MemoryJobStore) -> Job:
    job = Job(
        job_id="job_speed", tenant="t", type="one_off", status="SCHEDULED", handler="sim.effect",
        payload={"hold": 3, "nested": {"list": [1, 2]}}, run_at=T0, next_run_at=T0,
        retry=RetryPolicy(max_attempts=2, backoff=Backoff(initial_seconds=1)),
        created_at=T0, updated_at=T0,
    )  # fmt: skip
    store.jobs[job.job_id] = job
    return job


def test_a_job_read_from_the_memory_store_copies_its_payload_and_shares_its_frozen_parts() -> None:
    # Given a stored job
    store = MemoryJobStore(shard_count=2)
    stored = _stored_job(store)
    # When a caller reads it, and changes the payload it was given
    read = store.get_job(stored.job_id)
    assert read is not None
    read.payload["nested"]["list"].append(3)
    read.payload["new"] = True
    # Then the store's job is unchanged (the payload was copied deep) ...
    assert stored.payload == {"hold": 3, "nested": {"list": [1, 2]}}
    assert store.get_job(stored.job_id) == stored.model_copy(update={"payload": stored.payload})
    # ... while the frozen parts nobody can change are shared, not copied again on every read
    assert read.retry is stored.retry and read.policy is stored.policy
    assert read.created_at is stored.created_at
