"""Packed one-offs: a batch's one-off jobs stored as one immutable item, their runs as their only state.

A one-off created through POST /api/jobs/batch costs what its writes cost, and DynamoDB bills a write
by the item's size (1 WRU per KB), not per job. So the one-offs of a batch that need nothing but their
run (python or http-like targets on the Lambda worker, no DAG, no concurrency key, no "late" alert, no
own Idempotency-Key) share their create: one item holding every definition, compressed (its `defs`),
and one small cursor item per batch in the due and listing indexes (its next hand-over). Each job's
run row is its only mutable state: the worker's start writes it (a put-if-absent that is the run's
start marker and a cancel's fence at once), and its outcome is the run's history and the job's status.

A packed job's id names its batch and its place in it, so it is found without an index:

    job_<pack id: 26 chars><index: 2 chars>

Everything but its own run works on an item of its own: the first touch of the job (a read through
the API, an edit, a pause, a cancel, a replay, a new dependant naming it) copies it out to one (the
"materialization", JobStore-shaped: services/packs.py) and flags its run row, so that a packed start
meets the flag and takes the job item's path from then on. See docs/design.md#packed-one-offs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobsched.domain.alerts import AlertPolicy
from jobsched.domain.models import Execution, Job, RetryPolicy
from jobsched.domain.records import RUN_HISTORY_DAYS
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import EcsTarget, TargetSpec, WorkerTarget

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
PACK_ID_CHARS = 26
# A batch holds at most 100 jobs (MAX_BATCH in the API): two characters of base 32 name any of them.
INDEX_CHARS = 2
PACKED_JOB_ID_LENGTH = len("job_") + PACK_ID_CHARS + INDEX_CHARS
# The due and listing indexes hold a batch's cursor item under this id (its `job_id` attribute).
PACK_ENTRY_PREFIX = "pack_"
PACK_TYPE = "pack"
# What one definition may weigh, serialized (before compression): 100 of them stay far under
# DynamoDB's 400 KB item, and a SendMessageBatch of 10 runs far under SQS's 256 KiB.
MAX_DEFINITION_BYTES = 2048


def _base32(value: int, chars: int) -> str:
    out = []
    for _ in range(chars):
        value, rem = divmod(value, 32)
        out.append(_CROCKFORD[rem])
    return "".join(reversed(out))


def new_pack_id() -> str:
    """A ULID-shaped pack id: time-ordered, 80 random bits (as services.jobs.new_job_id)."""
    return _base32((int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big"), PACK_ID_CHARS)


def pack_id_for_key(tenant: str, key: str) -> str:
    """The pack id a batch's Idempotency-Key names: a retried batch writes the same pack, once."""
    digest = int.from_bytes(hashlib.sha256(f"{tenant}\x00batch\x00{key}".encode()).digest()[:17], "big")
    return _base32(digest >> 6, PACK_ID_CHARS)


def packed_job_id(pack_id: str, index: int) -> str:
    """The id of the `index`-th job of a pack."""
    if not 0 <= index < 32**INDEX_CHARS:
        raise ValueError(f"pack index {index} out of range")
    return f"job_{pack_id}{_base32(index, INDEX_CHARS)}"


def parse_packed(job_id: str) -> tuple[str, int] | None:
    """(pack id, index) of a packed job's id; None for any other id."""
    if len(job_id) != PACKED_JOB_ID_LENGTH or not job_id.startswith("job_"):
        return None
    body = job_id[4:]
    if any(ch not in _CROCKFORD for ch in body):
        return None
    index = 0
    for ch in body[PACK_ID_CHARS:]:
        index = index * 32 + _CROCKFORD.index(ch)
    return body[:PACK_ID_CHARS], index


def pack_entry_id(pack_id: str) -> str:
    """The `job_id` a pack's cursor item carries in the due and listing indexes."""
    return PACK_ENTRY_PREFIX + pack_id


class PackedDefinition(BaseModel):
    """What one packed job is: enough to run it (it rides in its run's message) and to show it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    tenant: str
    target: TargetSpec
    payload: dict[str, Any] = Field(default_factory=dict)
    run_at: datetime
    name: str | None = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    idempotent: bool = True
    tags: dict[str, str] = Field(default_factory=dict)
    alerts: AlertPolicy | None = None
    created_at: datetime

    @classmethod
    def of(cls, job: Job) -> PackedDefinition:
        """The definition a packable job is stored as (packable(job) must hold)."""
        assert job.run_at is not None
        return cls(
            job_id=job.job_id,
            tenant=job.tenant,
            target=job.target,
            payload=job.payload,
            run_at=job.run_at,
            name=job.name,
            retry=job.retry,
            idempotent=job.idempotent,
            tags=job.tags,
            alerts=job.alerts,
            created_at=job.created_at,
        )

    def compact(self) -> dict[str, Any]:
        """The definition as stored and sent: what differs from the defaults (the target whole: its
        `type` is the tag it is read back by)."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["target"] = self.target.model_dump(mode="json", exclude_none=True)
        return data

    def job(self, *, row: Execution | None = None, packed: bool = True) -> Job:
        """The job this definition stands for, as its run row `row` leaves it (status_of)."""
        status = status_of(row)
        unstarted = row is None or (row.status == RunStatus.PENDING and row.attempt == 0)
        return Job(
            job_id=self.job_id,
            tenant=self.tenant,
            type="one_off",
            status=status,
            target=self.target,
            payload=self.payload,
            name=self.name,
            run_at=self.run_at,
            retry=self.retry,
            idempotent=self.idempotent,
            tags=self.tags,
            alerts=self.alerts,
            next_run_at=self.run_at if status == JobStatus.SCHEDULED and unstarted else None,
            created_at=self.created_at,
            updated_at=self.created_at,
            packed=packed,
        )


def expired(definition: PackedDefinition, row: Execution | None, *, now: datetime) -> bool:
    """Whether a packed job is gone: no run row, its tick older than the run rows are kept (its row
    expired with its history; the pack item outlives it). Read as a job, it would say SCHEDULED and run
    again: it is not found instead (a day short of the TTL, so a row about to expire still counts)."""
    return row is None and definition.run_at < now - timedelta(days=RUN_HISTORY_DAYS - 1)


def status_of(row: Execution | None) -> JobStatus:
    """A packed job's status from its run row, as a one-off's job item would show it: COMPLETED when
    its run succeeded, FAILED when it was dead-lettered, SCHEDULED otherwise (still to run, running,
    waiting for a retry; or lost or cancelled as a run: a run cancel ends the run, not the job)."""
    if row is None:
        return JobStatus.SCHEDULED
    if row.status == RunStatus.SUCCEEDED:
        return JobStatus.COMPLETED
    if row.status == RunStatus.DEAD_LETTER:
        return JobStatus.FAILED
    return JobStatus.SCHEDULED


def packable(job: Job, *, keyed: bool) -> bool:
    """Whether a job of a batch is packed: a one-off that needs nothing but its own run.

    Not packed: a job with its own Idempotency-Key (its id is the key's, so its record is its own
    item), a dependant (its edges live on its upstreams' items), one placed on ECS or a worker pool
    (their tasks and pools read the job item), one with a concurrency key, one alerting on "late" (the
    late watcher reads the job item), and a definition too big to share an item with 99 others."""
    if keyed or job.type != "one_off" or job.run_at is None or job.depends_on:
        return False
    if isinstance(job.target, EcsTarget | WorkerTarget) or job.placement().runs_on != "lambda":
        return False
    if job.concurrency is not None or (job.alerts is not None and job.alerts.late_after_seconds is not None):
        return False
    return len(json.dumps(PackedDefinition.of(job).compact(), separators=(",", ":"))) <= MAX_DEFINITION_BYTES


class Pack(BaseModel):
    """One batch's packed jobs: immutable once written."""

    model_config = ConfigDict(frozen=True)

    pack_id: str
    tenant: str
    created_at: datetime
    request_hash: str
    """The batch's digest: a retry with the pack's Idempotency-Key and another body is a 409."""
    definitions: tuple[PackedDefinition, ...]

    def definition(self, job_id: str) -> PackedDefinition | None:
        parsed = parse_packed(job_id)
        if parsed is None or parsed[0] != self.pack_id:
            return None
        for d in self.definitions:
            if d.job_id == job_id:
                return d
        return None

    def first_due(self) -> datetime:
        return min(d.run_at for d in self.definitions)

    def due_after(self, moment: datetime) -> datetime | None:
        """The earliest run_at after `moment` (the cursor's next position), or None."""
        later = [d.run_at for d in self.definitions if d.run_at > moment]
        return min(later) if later else None


class PackEntry(BaseModel):
    """A pack's cursor item as the listing index answers it."""

    model_config = ConfigDict(frozen=True)

    pack_id: str
    tenant: str
    created_at: datetime | None
    """None where the index read does not hold it (the next-run index)."""
    next_run_at: datetime | None
    """The next run_at not yet handed over (None: every job is handed over)."""
    count: int
    kind: Literal["pack"] = "pack"
