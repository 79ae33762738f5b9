"""JobStore (and ShardLeases) in memory: the same compare-and-sets as adapters/dynamodb/jobs.py.

Each method evaluates the DynamoDB write's condition on the stored Job under one lock and
applies the same update; the start-marker rules and their timeline are documented there and in
jobsched.ports.JobStore.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from pydantic import BaseModel

from jobsched.domain import times
from jobsched.domain.keys import due_key_for, job_pk
from jobsched.domain.listing import MAX_LIST_READ, JobFilter, JobListing, ListOrder, StatusCounts
from jobsched.domain.models import MAX_CANCELLED_RUNS, MAX_FAN_OUT, Job, in_flight_key
from jobsched.domain.operations import Operation
from jobsched.domain.packs import PACK_TYPE, Pack, PackEntry, pack_entry_id
from jobsched.domain.records import Cursor, DueEntry, DuePage, IdempotencyRecord, ShardLease
from jobsched.domain.status import JobStatus
from jobsched.errors import Conflict, FanOutFull, TransientStoreError


@dataclass
class _Lease:
    owner: str | None = None
    until: datetime | None = None
    watermark: str | None = None


def _lapsed(until: datetime | None, now: datetime) -> bool:
    """DynamoDB's `until < :now`: false when the attribute is absent."""
    return until is not None and until < now


_SCALARS = frozenset({type(None), str, int, float, bool, datetime})


def _immutable(value: object) -> bool:
    """Whether a caller holding `value` cannot change it (a frozen model of such values counts)."""
    if type(value) in _SCALARS or isinstance(value, str | int | float | datetime | Enum):
        return True
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    if isinstance(value, BaseModel) and value.model_config.get("frozen"):
        return all(_immutable(v) for v in value.__dict__.values())
    return False


def _detached(job: Job) -> Job:
    """A copy of a stored job that callers may change freely: its mutable values (the payload) copied
    deep, its frozen parts shared (a full deep copy of every datetime and policy cost the simulator
    about 40% of its time)."""
    mutable = {k: copy.deepcopy(v) for k, v in job.__dict__.items() if not _immutable(v)}
    return job.model_copy(update=mutable)


@dataclass
class PackCursor:
    """A pack's cursor item (adapters/dynamodb/packs.py): its next hand-over and its listing keys."""

    pack_id: str
    tenant: str
    created_at: datetime
    count: int
    next_run_at: datetime | None
    due_key: str | None

    def entry(self) -> PackEntry:
        return PackEntry(
            pack_id=self.pack_id,
            tenant=self.tenant,
            created_at=self.created_at,
            next_run_at=self.next_run_at,
            count=self.count,
        )


def _pk_id(pk: str) -> str:
    """A listing or due cursor's PK as the id the in-memory index sorts by."""
    return pack_entry_id(pk.removeprefix("PACK#")) if pk.startswith("PACK#") else pk.removeprefix("JOB#")


def _pk_of(entry_id: str) -> str:
    return f"PACK#{entry_id.removeprefix('pack_')}" if entry_id.startswith("pack_") else job_pk(entry_id)


@dataclass
class MemoryJobStore:
    """Jobs, idempotency records, the due index and shard leases."""

    shard_count: int = 4
    # Dependants a job may have (DynamoDB's store checks the same cap in the edge's write).
    max_fan_out: int = MAX_FAN_OUT
    jobs: dict[str, Job] = field(default_factory=dict)
    # The due-index key each job's pending tick was written under (as the item's due_key holds it).
    due_keys: dict[str, str] = field(default_factory=dict)
    idempotency: dict[tuple[str, str], IdempotencyRecord] = field(default_factory=dict)
    leases: dict[int, _Lease] = field(default_factory=dict)
    operations: dict[str, Operation] = field(default_factory=dict)
    # Packed one-offs (MemoryPackStore writes them): definitions by pack id, and each pack's cursor.
    packs: dict[str, Pack] = field(default_factory=dict)
    pack_cursors: dict[str, PackCursor] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    # -- operations (adapters/dynamodb/operations.py) -------------------------------------------
    def put_operation(self, operation: Operation) -> bool:
        """Store a new operation; False if its id is taken."""
        with self._lock:
            if operation.operation_id in self.operations:
                return False
            self.operations[operation.operation_id] = operation
            return True

    def get_operation(self, operation_id: str) -> Operation | None:
        """The operation, or None."""
        with self._lock:
            return self.operations.get(operation_id)

    def advance_operation(self, operation: Operation, *, expected_chunk: int) -> bool:
        """Replace the operation if its stored chunk is still `expected_chunk`."""
        with self._lock:
            stored = self.operations.get(operation.operation_id)
            if stored is None or stored.chunk != expected_chunk:
                return False
            self.operations[operation.operation_id] = operation
            return True

    # -- helpers ----------------------------------------------------------------------------------
    def _put(self, job: Job, *, written: datetime) -> Job:
        self.jobs[job.job_id] = job
        if job.next_run_at is None:
            self.due_keys.pop(job.job_id, None)
        else:
            self.due_keys[job.job_id] = due_key_for(
                job.job_id, job.next_run_at, written=written, shards=self.shard_count
            )
        return _detached(job)

    def _update(self, job: Job, **changes: Any) -> Job:
        """The stored job with `changes`, the due index kept as it was."""
        new = job.model_copy(update=changes)
        self.jobs[job.job_id] = new
        if new.next_run_at is None:
            self.due_keys.pop(job.job_id, None)
        return _detached(new)

    def _read(self, job_id: str) -> Job | None:
        job = self.jobs.get(job_id)
        return _detached(job) if job else None

    def _edge_ok(self, upstream: str, job: Job) -> bool:
        up = self.jobs.get(upstream)
        return up is not None and up.tenant == job.tenant and up.status != JobStatus.CANCELLED

    def _check_fan_out(self, upstreams: Iterable[str], job_id: str) -> None:
        """FanOutFull if an upstream has max_fan_out dependants already (under the lock: atomic)."""
        for upstream in upstreams:
            up = self.jobs[upstream]
            if job_id not in up.dependants and len(up.dependants) >= self.max_fan_out:
                raise FanOutFull(upstream, dependants=len(up.dependants), cap=self.max_fan_out)

    def _add_edge(self, upstream: str, job_id: str, *, add: bool) -> None:
        up = self.jobs[upstream]
        edges = set(up.dependants) | {job_id} if add else set(up.dependants) - {job_id}
        self.jobs[upstream] = up.model_copy(update={"dependants": tuple(sorted(edges))})

    # -- jobs -------------------------------------------------------------------------------------
    def create_with_idempotency(
        self,
        job: Job,
        *,
        idempotency_key: str | None,
        request_hash: str,
        response: Mapping[str, Any],
        now: datetime,
    ) -> IdempotencyRecord | None:
        """Job (carrying its idempotency record) and upstream edges, all or nothing (see the port)."""
        with self._lock:
            if job.job_id in self.jobs:
                used = self.idempotency.get((job.tenant, job.job_id))
                if used is None:
                    raise TransientStoreError(f"job id {job.job_id} is taken; retry")
                return used
            refused = [u for u in job.depends_on if not self._edge_ok(u, job)]
            if refused:
                raise Conflict(
                    f"depends_on: upstream job '{refused[0]}' changed (cancelled?) "
                    "while this job was created",
                    field="depends_on",
                )
            self._check_fan_out(job.depends_on, job.job_id)
            if idempotency_key is not None:  # on the job item in DynamoDB: keyed by the job here
                self.idempotency[(job.tenant, job.job_id)] = IdempotencyRecord(
                    request_hash=request_hash, response=dict(response)
                )
            for upstream in job.depends_on:
                self._add_edge(upstream, job.job_id, add=True)
            self._put(
                job.model_copy(update={"dependants": tuple(sorted(job.dependants))}), written=job.updated_at
            )
            return None

    def rewire(self, job: Job, *, expected_version: int, added: list[str], removed: list[str]) -> bool:
        """New depends_on and root_schedule, edges moved, version + 1, if the version is unchanged."""
        with self._lock:
            current = self.jobs.get(job.job_id)
            if current is None or current.version != expected_version:
                return False
            if any(not self._edge_ok(u, job) for u in added) or any(u not in self.jobs for u in removed):
                return False
            self._check_fan_out(added, job.job_id)
            for upstream in added:
                self._add_edge(upstream, job.job_id, add=True)
            for upstream in removed:
                self._add_edge(upstream, job.job_id, add=False)
            self._update(
                self.jobs[job.job_id],
                depends_on=tuple(job.depends_on),
                root_schedule=job.root_schedule or "once",
                updated_at=job.updated_at,
                version=current.version + 1,
            )
            return True

    def get_job(self, job_id: str) -> Job | None:
        """The job, or None."""
        with self._lock:
            return self._read(job_id)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The jobs of `job_ids` that exist, by id."""
        with self._lock:
            return {j: job for j in job_ids if (job := self._read(j)) is not None}

    def stamp_next_tick(
        self,
        job_id: str,
        *,
        expected: datetime,
        next_run_at: datetime | None,
        now: datetime,
        dispatched: int = 0,
    ) -> bool:
        """Compare-and-set of the pending tick from `expected`."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.next_run_at != expected:
                return False
            self._put(
                job.model_copy(
                    update={
                        "next_run_at": next_run_at,
                        "updated_at": now,
                        "dispatched": job.dispatched + dispatched,
                    }
                ),
                written=now,
            )
            return True

    def set_job_status(
        self,
        job_id: str,
        *,
        target: JobStatus,
        sources: Iterable[JobStatus],
        now: datetime,
        leave_index: bool,
        release_slot: bool = False,
    ) -> tuple[bool, Job | None]:
        """Compare-and-set of the status from `sources`."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.status not in set(sources):
                return False, self._read(job_id)
            changes: dict[str, Any] = {"status": target, "updated_at": now, "version": job.version + 1}
            if leave_index:
                changes["next_run_at"] = None
            if release_slot:
                changes.update(active_run=None, active_until=None, active_message=None)
            return True, self._update(job, **changes)

    def save_definition(self, job: Job, *, expected_version: int) -> bool:
        """The definition, if the version is unchanged; run-time attributes kept."""
        with self._lock:
            current = self.jobs.get(job.job_id)
            if current is None or current.version != expected_version:
                return False
            kept = {
                k: getattr(current, k)
                for k in (
                    "dispatched",
                    "created_at",
                    "dependants",
                    "active_run",
                    "active_until",
                    "active_message",
                    "displaced_run",
                    "displaced_message",
                    "buffered_run",
                    "buffered_kind",
                    "buffered_until",
                    "in_flight",
                    "cancelled_runs",
                )
            }
            self._put(job.model_copy(update={**kept, "version": current.version + 1}), written=job.updated_at)
            return True

    # -- start markers (the rules and their timeline: adapters/dynamodb/jobs.py) -------------------
    def _slot_free(self, job: Job, *, run: str, message: str, now: datetime, stale: str | None) -> bool:
        if job.active_run == run and job.active_message == message:
            return True  # the holder's own message re-enters (SQS handed it out again)
        free = (
            job.active_run is None
            or _lapsed(job.active_until, now)
            or (stale is not None and job.active_run == stale)
        )
        return free and self._no_other_buffered(job, run=run, now=now)

    @staticmethod
    def _no_other_buffered(job: Job, *, run: str, now: datetime) -> bool:
        return job.buffered_run is None or job.buffered_run == run or _lapsed(job.buffered_until, now)

    def hold_job(
        self,
        job_id: str,
        *,
        run: str,
        message: str,
        until: datetime,
        now: datetime,
        was_buffered: bool,
        stale: str | None = None,
    ) -> bool:
        """Take the slot for `run` (see the port for when)."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.status == JobStatus.CANCELLED or run in job.cancelled_runs:
                return False
            if not self._slot_free(job, run=run, message=message, now=now, stale=stale):
                return False
            changes = self._taking(job, run=run, message=message, until=until)
            if was_buffered:
                changes.update(buffered_run=None, buffered_until=None, buffered_kind=None)
            self._update(job, **changes)
            return True

    def hold_and_read(
        self, job_id: str, *, run: str, message: str, until: datetime, now: datetime
    ) -> tuple[bool, Job | None]:
        """hold_job that answers the job as it stood before the write."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                return False, None
            before = self._read(job_id)
            if (job.status == JobStatus.CANCELLED or run in job.cancelled_runs) or not self._slot_free(
                job, run=run, message=message, now=now, stale=None
            ):
                return False, before
            self._update(job, **self._taking(job, run=run, message=message, until=until))
            return True, before

    @staticmethod
    def _taking(job: Job, *, run: str, message: str, until: datetime) -> dict[str, Any]:
        """A hold's changes: the new holder, and the holder it found there (see hold_job)."""
        return {
            "active_run": run,
            "active_until": until,
            "active_message": message,
            "displaced_run": job.active_run,
            "displaced_message": job.active_message if job.active_run is not None else None,
        }

    def restore_hold(
        self, job_id: str, *, run: str, message: str, taker: str, taker_message: str, until: datetime
    ) -> bool:
        """Give the slot `taker` took over back to `run`."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.active_run != taker or job.active_message != taker_message:
                return False
            self._update(job, active_run=run, active_until=until, active_message=message)
            return True

    def buffer_behind(self, job_id: str, *, run: str, kind: str, until: datetime, now: datetime) -> bool:
        """Take the buffered slot for `run`."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or not self._no_other_buffered(job, run=run, now=now):
                return False
            self._update(job, buffered_run=run, buffered_until=until, buffered_kind=kind)
            return True

    def release_job(self, job_id: str, *, run: str) -> Job | None:
        """Free the slot if `run` holds it; the job as it stood."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.active_run != run:
                return None
            before = _detached(job)
            self._update(job, active_run=None, active_until=None, active_message=None)
            return before

    def extend_hold(self, job_id: str, *, run: str, until: datetime) -> bool:
        """The slot holder's heartbeat."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.active_run != run:
                return False
            self._update(job, active_until=until)
            return True

    def count_and_read(
        self, job_id: str, *, run: str, message: str, until: datetime, now: datetime
    ) -> tuple[bool, Job | None]:
        """Set the run's in-flight entry, unless the job is cancelled or missing."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                return False, None
            before = self._read(job_id)
            if job.status == JobStatus.CANCELLED or run in job.cancelled_runs:
                return False, before
            self._update(job, in_flight={**job.in_flight, in_flight_key(run, message): until})
            return True, before

    def uncount(self, job_id: str, *, run: str, message: str) -> bool:
        """The run's entry is over."""
        with self._lock:
            job = self.jobs.get(job_id)
            key = in_flight_key(run, message)
            if job is None or key not in job.in_flight:
                return False
            self._update(job, in_flight={k: v for k, v in job.in_flight.items() if k != key})
            return True

    def extend_count(self, job_id: str, *, run: str, message: str, until: datetime) -> bool:
        """The run's heartbeat."""
        with self._lock:
            job = self.jobs.get(job_id)
            key = in_flight_key(run, message)
            if job is None or key not in job.in_flight:
                return False
            self._update(job, in_flight={**job.in_flight, key: until})
            return True

    def cancel_run(self, job_id: str, *, run: str) -> Job | None:
        """Add `run` to the job's cancelled_runs (its newest MAX_CANCELLED_RUNS kept); the job after."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                return None
            kept = sorted(job.cancelled_runs - {run}, reverse=True)[: MAX_CANCELLED_RUNS - 1]
            return self._update(job, cancelled_runs=frozenset({run, *kept}))

    def cancel_job(self, job_id: str, *, now: datetime, stale: str | None) -> tuple[bool, Job | None]:
        """SCHEDULED|PAUSED -> CANCELLED while no start marker is live."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                return False, None
            no_live_slot = (
                job.active_run is None
                or _lapsed(job.active_until, now)
                or (stale is not None and job.active_run == stale)
            )
            no_live_count = all(_lapsed(until, now) for until in job.in_flight.values())
            if job.status not in (JobStatus.SCHEDULED, JobStatus.PAUSED) or not (
                no_live_slot and no_live_count
            ):
                return False, self._read(job_id)
            return True, self._update(
                job, status=JobStatus.CANCELLED, updated_at=now, version=job.version + 1, next_run_at=None
            )

    # -- the due index ------------------------------------------------------------------------------
    def due_page(self, due_key: str, *, until: datetime, cursor: Cursor | None, limit: int) -> DuePage:
        """Entries of `due_key` with next_run_at <= until, oldest first, `limit` a page (jobs, and
        packs' cursors as entries of type "pack")."""
        with self._lock:
            due: list[tuple[datetime, str]] = sorted(
                [
                    (job.next_run_at, job.job_id)
                    for job_id, key in self.due_keys.items()
                    if key == due_key
                    and (job := self.jobs[job_id]).next_run_at is not None
                    and job.next_run_at <= until
                ]
                + [
                    (c.next_run_at, pack_entry_id(c.pack_id))
                    for c in self.pack_cursors.values()
                    if c.due_key == due_key and c.next_run_at is not None and c.next_run_at <= until
                ]
            )
            if cursor:
                after = (datetime.fromisoformat(cursor["next_run_at"]["S"]), cursor["job_id"]["S"])
                due = [d for d in due if d > after]
            page = due[:limit]
            entries = [self._due_entry(entry_id) for _, entry_id in page]
            next_cursor: Cursor | None = None
            if len(page) == limit:  # as DynamoDB does: a full page has a cursor, maybe to nothing
                at, entry_id = page[-1]
                next_cursor = {
                    "PK": {"S": _pk_of(entry_id)},
                    "job_id": {"S": entry_id},
                    "due_key": {"S": due_key},
                    "next_run_at": {"S": at.isoformat()},
                }
            return DuePage(entries=entries, cursor=next_cursor, items_read=len(page))

    def _due_entry(self, entry_id: str) -> DueEntry:
        if entry_id in self.jobs:
            return DueEntry.of(self.jobs[entry_id])
        c = self.pack_cursors[entry_id.removeprefix("pack_")]
        assert c.next_run_at is not None
        return DueEntry(
            job_id=entry_id,
            tenant=c.tenant,
            type=PACK_TYPE,
            next_run_at=c.next_run_at,
            cron_expr=None,
            timezone="UTC",
        )

    # -- the listing indexes ------------------------------------------------------------------------
    def count_jobs(self, tenant: str, *, statuses: Iterable[JobStatus], stop_at: int) -> int:
        """The tenant's jobs with one of `statuses` (all of them: a count in memory is cheap); a pack
        counts its jobs as SCHEDULED while its cursor has jobs to hand over (as the DynamoDB store)."""
        wanted = set(statuses)
        with self._lock:
            jobs = sum(1 for j in self.jobs.values() if j.tenant == tenant and j.status in wanted)
            if JobStatus.SCHEDULED in wanted:
                jobs += sum(
                    c.count
                    for c in self.pack_cursors.values()
                    if c.tenant == tenant and c.next_run_at is not None
                )
            return jobs

    def _listed(self, tenant: str, order: ListOrder) -> list[tuple[str, str, Job | PackCursor]]:
        """The tenant's listing index in `order`: (sort value, entry id, job or pack cursor)."""
        rows: list[tuple[str, str, Job | PackCursor]] = []
        for j in self.jobs.values():
            if j.tenant == tenant and (order == "created" or j.next_run_at is not None):
                sort = j.created_at if order == "created" else (j.next_run_at or j.created_at)
                rows.append((times.stored(sort), j.job_id, j))
        for c in self.pack_cursors.values():
            if c.tenant == tenant and (order == "created" or c.next_run_at is not None):
                sort = c.created_at if order == "created" else (c.next_run_at or c.created_at)
                rows.append((times.stored(sort), pack_entry_id(c.pack_id), c))
        return sorted(rows, key=lambda e: (e[0], e[1]), reverse=order == "created")

    def count_by_status(self, tenant: str, *, where: JobFilter, stop_at: int) -> StatusCounts:
        """As the listing index: the tenant's jobs newest first, at most `stop_at` of them read (a read
        that ends exactly at `stop_at` is not known complete, as a DynamoDB page that hits its Limit)."""
        anywhere = where.model_copy(update={"status": None})
        with self._lock:
            newest = self._listed(tenant, "created")
            read = newest[:stop_at]
            counts: dict[str, int] = {}
            packs: list[PackEntry] = []
            for _, _, item in read:
                if isinstance(item, PackCursor):
                    packs.append(item.entry().model_copy(update={"next_run_at": None}))
                elif anywhere.matches(item):
                    counts[item.status.value] = counts.get(item.status.value, 0) + 1
            return StatusCounts(
                counts=counts, complete=len(newest) < stop_at, items_read=len(read), packs=tuple(packs)
            )

    def list_jobs(
        self, tenant: str, *, order: ListOrder, where: JobFilter, cursor: Cursor | None, limit: int
    ) -> JobListing:
        """The tenant's jobs newest first, or by next_run_at (only jobs that have one), as the indexes;
        a pack's cursor item is answered as a PackEntry, whatever the filter."""
        with self._lock:
            sort_attr = "created_at" if order == "created" else "next_run_at"
            keyed = self._listed(tenant, order)
            if cursor:
                after = (cursor[sort_attr]["S"], _pk_id(cursor["PK"]["S"]))
                keyed = [
                    e for e in keyed if ((e[0], e[1]) < after if order == "created" else (e[0], e[1]) > after)
                ]

            def key_of(index: int) -> Cursor:
                sort_value, entry_id, _ = keyed[index]
                return {
                    "PK": {"S": _pk_of(entry_id)},
                    "SK": {"S": "META"},
                    "tenant": {"S": tenant},
                    sort_attr: {"S": sort_value},
                }

            page: list[Job | PackEntry] = []
            before: list[Cursor | None] = []
            read = 0
            for _sort_value, _entry_id, item in keyed:
                if len(page) >= limit or read >= MAX_LIST_READ:
                    break
                previous = key_of(read - 1) if read else cursor
                read += 1
                if isinstance(item, PackCursor):
                    # The created index does not project next_run_at (adapters/dynamodb: LISTING_ATTRIBUTES).
                    entry = item.entry()
                    page.append(
                        entry if order == "next_run" else entry.model_copy(update={"next_run_at": None})
                    )
                    before.append(previous)
                elif where.matches(item):
                    page.append(item.model_copy(deep=True))
                    before.append(previous)
            next_cursor: Cursor | None = key_of(read - 1) if 0 < read < len(keyed) else None
            return JobListing(
                entries=page,
                cursor=next_cursor,
                items_read=read,
                truncated=next_cursor is not None and len(page) < limit,
                before=before,
            )

    # -- shard leases -------------------------------------------------------------------------------
    def acquire_shard(
        self, shard: int, *, owner: str, now: datetime, lease_seconds: int
    ) -> ShardLease | None:
        """Lease a shard if unclaimed, expired, or ours."""
        with self._lock:
            lease = self.leases.setdefault(shard, _Lease())
            if not (lease.owner is None or _lapsed(lease.until, now) or lease.owner == owner):
                return None
            lease.owner, lease.until = owner, now + timedelta(seconds=lease_seconds)
            return ShardLease(shard=shard, owner=owner, watermark=lease.watermark)

    def release_shard(self, lease: ShardLease, *, watermark: str) -> bool:
        """Store the watermark and give the lease up, if still held."""
        with self._lock:
            held = self.leases.get(lease.shard)
            if held is None or held.owner != lease.owner:
                return False
            held.owner, held.until, held.watermark = None, None, watermark
            return True
