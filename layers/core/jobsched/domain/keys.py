"""Key rules: how a job, a run and a pending tick are named in storage and in messages.

Pure functions of their inputs, shared by every store implementation (DynamoDB and the in-memory
fakes) and by the services that name a run (a run id is derived, never looked up).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from jobsched.domain import times


def job_pk(job_id: str) -> str:
    """Partition key of a job and of its runs."""
    return f"JOB#{job_id}"


def run_sk(scheduled_for: str) -> str:
    """Sort key of the run for one firing (stored-form scheduled_for)."""
    return f"RUN#{scheduled_for}"


def pool_queue_pk(tenant: str, pool: str) -> str:
    """Partition key of a pool's queue of waiting runs (the workers table)."""
    return f"POOL#{tenant}#{pool}"


def pool_queue_sk(enqueued_at: datetime, run_id: str) -> str:
    """Sort key of a run waiting in its pool's queue: oldest first, then by run id."""
    return f"{times.stored(enqueued_at)}#{run_id}"


def run_id_for(job_id: str, scheduled_for: datetime) -> str:
    """The run id: derived from (job_id, scheduled_for), so a run is found without an index."""
    return f"{job_id}-{int(times.to_utc(scheduled_for).timestamp() * 1000)}"


def parse_run_id(run_id: str) -> tuple[str, datetime]:
    """Inverse of run_id_for; raises ValueError on a malformed id."""
    job_id, _, millis = run_id.rpartition("-")
    if not job_id or not millis.isdigit():
        raise ValueError(f"malformed run id {run_id!r}")
    return job_id, datetime.fromtimestamp(int(millis) / 1000, tz=UTC)


def due_key_for(job_id: str, next_run_at: datetime, *, written: datetime, shards: int) -> str:
    """The due-index key of a pending tick written at `written`.

    The bucket is the tick's minute, or the write's minute when the tick is already past: a
    resumed job or a crashed hand-over must land where the dispatcher still reads, not in a
    bucket its watermark left behind.
    """
    return times.due_key(max(next_run_at, written), times.shard_of(job_id, shards))


# Step Functions execution names: 1..80 characters of [A-Za-z0-9-_].
_NAME_MAX = 80


def execution_name(*parts: str) -> str:
    """A valid, deterministic workflow execution name from its parts (the dedup key of a start)."""
    raw = "-".join(parts)
    cleaned = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in raw)
    if len(cleaned) <= _NAME_MAX:
        return cleaned
    digest = hashlib.sha256(raw.encode()).hexdigest()[:16]
    return f"{cleaned[: _NAME_MAX - 17]}-{digest}"
