"""PackStore in memory: the pack and cursor items of adapters/dynamodb/packs.py, on the in-memory
JobStore's and RunStore's state (a materialization writes both under both locks, as one transaction)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobsched.adapters.memory.jobs import MemoryJobStore, PackCursor
from jobsched.adapters.memory.runs import MemoryRunStore
from jobsched.domain import times
from jobsched.domain.keys import due_key_for, run_id_for
from jobsched.domain.models import Execution, Job
from jobsched.domain.packs import Pack, pack_entry_id
from jobsched.domain.status import RunStatus


@dataclass
class MemoryPackStore:
    """Packs on a MemoryJobStore, materializations onto it and a MemoryRunStore."""

    jobs: MemoryJobStore
    runs: MemoryRunStore

    def put_pack(self, pack: Pack, *, now: datetime) -> Pack | None:
        """The definitions (if absent), then the cursor (if absent)."""
        with self.jobs._lock:
            stored = self.jobs.packs.get(pack.pack_id)
            if stored is None:
                self.jobs.packs[pack.pack_id] = pack
            kept = stored or pack
            if pack.pack_id not in self.jobs.pack_cursors:
                first = kept.first_due()
                self.jobs.pack_cursors[pack.pack_id] = PackCursor(
                    pack_id=pack.pack_id,
                    tenant=kept.tenant,
                    created_at=kept.created_at,
                    count=len(kept.definitions),
                    next_run_at=first,
                    due_key=due_key_for(
                        pack_entry_id(pack.pack_id), first, written=now, shards=self.jobs.shard_count
                    ),
                )
            return stored

    def get_pack(self, pack_id: str, *, consistent: bool = True) -> Pack | None:
        with self.jobs._lock:
            return self.jobs.packs.get(pack_id)

    def move_cursor(
        self, pack_id: str, *, expected: datetime, next_run_at: datetime | None, now: datetime
    ) -> bool:
        with self.jobs._lock:
            cursor = self.jobs.pack_cursors.get(pack_id)
            if cursor is None or cursor.next_run_at != expected:
                return False
            cursor.next_run_at = next_run_at
            cursor.due_key = (
                None
                if next_run_at is None
                else due_key_for(
                    pack_entry_id(pack_id), next_run_at, written=now, shards=self.jobs.shard_count
                )
            )
            return True

    def materialize(self, job: Job, *, row: Execution | None, scheduled_for: str) -> bool:
        with self.jobs._lock, self.runs._lock:
            if job.job_id in self.jobs.jobs:
                return False
            key = (job.job_id, scheduled_for)
            current = self.runs.rows.get(key)
            if row is None:
                if current is not None:
                    return False
                sf = times.parse_stored(scheduled_for)
                flagged = Execution(
                    run_id=run_id_for(job.job_id, sf),
                    job_id=job.job_id,
                    tenant=job.tenant,
                    scheduled_for=sf,
                    status=RunStatus.PENDING,
                    attempt=0,
                    created_at=job.updated_at,
                    materialized=True,
                )
            else:
                if current is None or (current.status, current.attempt, current.lease_owner) != (
                    row.status,
                    row.attempt,
                    row.lease_owner,
                ):
                    return False
                flagged = current.model_copy(update={"materialized": True})
            self.runs.rows[key] = flagged
            self.jobs._put(job.model_copy(update={"packed": False}), written=job.updated_at)
            return True
