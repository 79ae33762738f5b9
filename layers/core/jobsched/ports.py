"""Ports: the contracts services rely on. Adapters implement them; tests substitute them.

Services import this module and the domain only (tests/unit/test_layering.py proves it); the
composition root (jobsched.wiring) builds the implementations: DynamoDB, SQS and Step Functions
in jobsched.adapters, in-memory fakes in jobsched.adapters.memory. One contract suite,
tests/contract/, runs every port's docstring against both.

Conventions every implementation keeps:
- A conditional write answers whether it applied, never raises for a refused condition; the
  row it answers when refused is the row as it stood at the write (not a later read).
- Scheduled-for instants of runs are passed in stored form (jobsched.domain.times.stored) where
  a parameter is `scheduled_for: str`; they are run-row keys.
- Reads are consistent unless a method says otherwise. An eventually consistent read (an
  index, or `consistent=False`) may answer an older version of a row, or miss a new one.
- Failures are domain errors (jobsched.errors): TransientStoreError (retry later; after
  StoreUnreachable a write may have applied), StoreError (not retryable), Conflict.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from jobsched.domain import compute
from jobsched.domain.alerts import Alert
from jobsched.domain.fargate_vcpu import Scope
from jobsched.domain.limits import Quota
from jobsched.domain.listing import JobFilter, JobListing, ListOrder, StatusCounts
from jobsched.domain.logs import LogPage
from jobsched.domain.models import Execution, Job
from jobsched.domain.operations import Operation
from jobsched.domain.packs import Pack
from jobsched.domain.placement import Resources
from jobsched.domain.records import (
    AttemptEnd,
    Cursor,
    DeadLetter,
    DuePage,
    IdempotencyRecord,
    Lease,
    NewRun,
    Outgoing,
    ShardLease,
    Transition,
)
from jobsched.domain.secrets import SecretRecord
from jobsched.domain.status import JobStatus
from jobsched.domain.targets import TargetSpec
from jobsched.domain.workers import Hold, QueuedRun, Worker
from jobsched.handlers import RunContext


class ShardLeases(Protocol):
    """One dispatcher pass per shard at a time, and the oldest bucket each shard has not drained."""

    def acquire_shard(
        self, shard: int, *, owner: str, now: datetime, lease_seconds: int
    ) -> ShardLease | None:
        """Lease `shard` until now + lease_seconds if it is unclaimed, expired (lease end < now), or
        already `owner`'s (a pass that re-enters after its own crash); None if another holds it.
        The lease answers the shard's stored watermark (None before its first release)."""
        ...

    def release_shard(self, lease: ShardLease, *, watermark: str) -> bool:
        """Store `watermark` and give the lease up, if lease.owner still holds it; False (nothing
        written) if the lease was lost meanwhile."""
        ...


class OperationStore(Protocol):
    """Operations (jobsched.domain.operations): long API work and its progress, one item each."""

    def put_operation(self, operation: Operation) -> bool:
        """Store a new operation; False (nothing written) if its id is taken."""
        ...

    def get_operation(self, operation_id: str) -> Operation | None:
        """The operation as stored (a consistent read), or None."""
        ...

    def advance_operation(self, operation: Operation, *, expected_chunk: int) -> bool:
        """Replace the stored operation by `operation` if its stored `chunk` is still
        `expected_chunk` (the compare-and-set of one chunk's progress); False otherwise."""
        ...


class JobStore(ShardLeases, OperationStore, Protocol):
    """Jobs: definitions, idempotency records, the due index and the start markers on each job.

    Start markers (see services/run.py's process): a run marks its start on its job item before
    it runs, in one conditional write, either by holding the job's slot (one-offs and guarded
    recurring jobs) or by being counted. A cancel is a compare-and-set on the same item that is
    refused while any marker is live, and every marker write is refused on a cancelled job: a
    cancel and a run's start cannot both win. A marker whose holder stops renewing it lapses
    at its `until` (each in-flight entry at its own). A run cancel (cancel_run) is the same for one
    run: every marker write of a run in Job.cancelled_runs is refused (hold_job, hold_and_read,
    count_and_read), and cancel_run answers the markers as they stand after it.
    """

    def create_with_idempotency(
        self,
        job: Job,
        *,
        idempotency_key: str | None,
        request_hash: str,
        response: Mapping[str, Any],
        now: datetime,
    ) -> IdempotencyRecord | None:
        """Write the job (with its due-index entry), carrying its idempotency record (when a key
        is given), and the edge upstream -> job on every upstream of job.depends_on, all or nothing.

        The caller derives job.job_id from (tenant, key) (services.jobs.job_id_for_key), so a key
        used before names a job that exists: then nothing is written and the record it carries is
        answered. Raises Conflict (field depends_on) when an upstream is missing, another tenant's
        or cancelled, and FanOutFull when one has the store's max_fan_out dependants already: the
        count is checked in the same write that adds the edge, so racing creates never pass it.
        """
        ...

    def rewire(self, job: Job, *, expected_version: int, added: list[str], removed: list[str]) -> bool:
        """Save a dependent job's depends_on and root_schedule, add the edges from `added` and drop
        those from `removed`, bumping its version, all or nothing; False if its version is not
        `expected_version` (or an added upstream is gone). Raises FanOutFull, writing nothing, when
        an added upstream has the store's max_fan_out dependants already (checked in the write)."""
        ...

    def get_job(self, job_id: str) -> Job | None:
        """The job (with its payload, wherever it is stored), read consistently, or None."""
        ...

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The jobs of `job_ids` that exist (at most 100), read consistently in one batch, by id;
        their payloads may be left empty: for walks of the DAG, which read none."""
        ...

    def stamp_next_tick(
        self,
        job_id: str,
        *,
        expected: datetime,
        next_run_at: datetime | None,
        now: datetime,
        dispatched: int = 0,
    ) -> bool:
        """Move the pending tick from `expected` to `next_run_at` (None: out of the due index) and
        add `dispatched` to the job's count: a compare-and-set on next_run_at, so of two callers
        that read the same tick exactly one moves it. False (nothing written) otherwise."""
        ...

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
        """Compare-and-set the status from any of `sources` to `target` (version + 1); also leave
        the due index (`leave_index`) and free the slot (`release_slot`) in the same write.
        (applied, the job after the write; refused: as it stood, None if there is no job)."""
        ...

    def save_definition(self, job: Job, *, expected_version: int) -> bool:
        """Write the job's definition (schedule, policies, status, payload, pending tick) if its
        version is `expected_version` (version + 1); the run-time attributes (start markers,
        dispatched count, dependants) are left as they are. False (nothing written) otherwise."""
        ...

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
        """Make `run` (carried by SQS message `message`) the slot's holder until `until`.

        Applies when the job is not CANCELLED, no other live tick is buffered (none, it is `run`,
        or its wait ended before `now`), and the slot is: unheld; lapsed (its until < now); held by
        this very message (a redelivery); or held by `stale`, a run the caller knows finished; never
        for a run in Job.cancelled_runs.
        `was_buffered`: the write also empties the buffered slot (this tick was the one waiting).
        The same write records the holder it found (Job.displaced_run/displaced_message: None when
        the slot was unheld; the message itself on a redelivery of it), so a takeover's trace of the
        holder it displaced survives a failed answer. False (nothing written) otherwise, also when
        the job does not exist.
        """
        ...

    def hold_and_read(
        self, job_id: str, *, run: str, message: str, until: datetime, now: datetime
    ) -> tuple[bool, Job | None]:
        """hold_job without `stale` and `was_buffered`, answering the job in the same write:
        (held, the job as it stood before the write, None if there is no job). Before, not after:
        a slot already held by this very message is a start marker a crashed receive left, and
        shows its redelivery that the run started (Worker.process)."""
        ...

    def restore_hold(
        self, job_id: str, *, run: str, message: str, taker: str, taker_message: str, until: datetime
    ) -> bool:
        """Give the slot back to `run` (carried by `message`) until `until`, if `taker` (carried by
        `taker_message`) holds it: a tick that took over a lapsed slot whose holder turned out to be
        alive (a worker-pool run still queued in its pool). False (nothing written) otherwise."""
        ...

    def buffer_behind(self, job_id: str, *, run: str, kind: str, until: datetime, now: datetime) -> bool:
        """Take the job's one buffered slot for `run` (of run kind `kind`) until `until`: if it is
        empty, already `run`'s, or its wait ended before `now`. False (nothing written) otherwise."""
        ...

    def release_job(self, job_id: str, *, run: str) -> Job | None:
        """Free the slot if `run` holds it, answering the job as it stood before (so the caller
        can wake the tick buffered behind it); None (nothing written) if `run` does not hold it."""
        ...

    def extend_hold(self, job_id: str, *, run: str, until: datetime) -> bool:
        """Push the slot's until to `until` if `run` holds it (the heartbeat); else False."""
        ...

    def count_and_read(
        self, job_id: str, *, run: str, message: str, until: datetime, now: datetime
    ) -> tuple[bool, Job | None]:
        """Set the in-flight entry of `run` carried by SQS message `message` (in_flight_key) to
        `until`, unless the job is CANCELLED or missing, or `run` is in its cancelled_runs. One entry
        per run and message: a redelivery re-enters its own entry (never counted twice), and an entry
        whose receive died lapses at its own until, whatever the job's other runs renew. (counted,
        the job as it stood before the write; refused: as it stood; None if there is no job)."""
        ...

    def uncount(self, job_id: str, *, run: str, message: str) -> bool:
        """The run's in-flight entry is over: removed; False (nothing written) if it is not there."""
        ...

    def extend_count(self, job_id: str, *, run: str, message: str, until: datetime) -> bool:
        """Push the run's in-flight entry to `until` (its heartbeat) while it is there; else False."""
        ...

    def cancel_run(self, job_id: str, *, run: str) -> Job | None:
        """Add `run` (a tick, stored form) to the job's cancelled_runs, answering the job after the
        write (None: no job): from then on every start marker write of `run` is refused. A marker of
        `run` in the answer was written before: that run started. The set keeps MAX_CANCELLED_RUNS
        entries, the newest ticks and always `run` (a second write drops the oldest, only when over)."""
        ...

    def cancel_job(self, job_id: str, *, now: datetime, stale: str | None) -> tuple[bool, Job | None]:
        """SCHEDULED|PAUSED -> CANCELLED (version + 1, out of the due index), only while no start
        marker is live: the slot is unheld, lapsed, or held by `stale` (a run known finished),
        and every in-flight entry lapsed (until < now). (applied, the job after; refused: as it
        stood or None)."""
        ...

    def list_jobs(
        self, tenant: str, *, order: ListOrder, where: JobFilter, cursor: Cursor | None, limit: int
    ) -> JobListing:
        """Up to `limit` of the tenant's jobs that match `where`, from `cursor`: newest first
        ("created"), or soonest pending tick first ("next_run": jobs without one are not listed).
        Reads the tenant's index partition only, at most MAX_LIST_READ items per call (then a
        short page with a cursor: `truncated`); the page's cursor is None after the last page.
        Eventually consistent: a job just created or changed may be missing or stale."""
        ...

    def count_jobs(self, tenant: str, *, statuses: Iterable[JobStatus], stop_at: int) -> int:
        """How many of the tenant's jobs have one of `statuses`, counted up to `stop_at` at least (it
        may stop there). From the listing index: eventually consistent, as list_jobs."""
        ...

    def count_by_status(self, tenant: str, *, where: JobFilter, stop_at: int) -> StatusCounts:
        """The tenant's jobs matching `where` (its `status` ignored), counted per status, newest
        first, over at most `stop_at` items of the tenant's listing partition (the filter drops some
        of those): `complete` is False when it stopped there (even exactly at the partition's end), and
        every count is then a lower bound.
        One read of the caller's partition, never a scan; eventually consistent, as list_jobs."""
        ...

    def due_page(self, due_key: str, *, until: datetime, cursor: Cursor | None, limit: int) -> DuePage:
        """Up to `limit` entries of due-index partition `due_key` with next_run_at <= until, oldest
        first, from `cursor`; the page's cursor is None after the last page. The index is
        eventually consistent: an entry just written or moved may be missing or stale (the
        stamp's compare-and-set is what decides)."""
        ...


class PackStore(Protocol):
    """Packed one-offs (jobsched.domain.packs): a batch's definitions in one immutable item, and its
    cursor item in the jobs table's due and listing indexes (JobStore.due_page answers it as a
    DueEntry of type "pack", list_jobs as a PackEntry)."""

    def put_pack(self, pack: Pack, *, now: datetime) -> Pack | None:
        """Write the pack's definitions unless its id has them, then its cursor item unless it has
        one (due at the pack's first run_at; listed at its created_at). None: this call wrote the
        definitions; else the pack stored under the id (a retried batch: compare request_hash), and its
        cursor is written if a crash had left it out."""
        ...

    def get_pack(self, pack_id: str, *, consistent: bool = True) -> Pack | None:
        """The pack, or None."""
        ...

    def move_cursor(
        self, pack_id: str, *, expected: datetime, next_run_at: datetime | None, now: datetime
    ) -> bool:
        """Compare-and-set the cursor's next hand-over from `expected` to `next_run_at` (None: every
        job is handed over; it leaves the due index and counts as done for max_jobs)."""
        ...

    def materialize(self, job: Job, *, row: Execution | None, scheduled_for: str) -> bool:
        """Copy a packed job out to an item of its own: in one transaction, put `job` (unless an item
        exists) and flag its run row `materialized`, conditioned on the row standing as `row` was read
        (status, attempt and lease owner; None: no row, which is created PENDING, flagged). False:
        refused (the item exists, or the row moved): read again."""
        ...


class RunStore(Protocol):
    """Runs: one row per (job_id, scheduled_for), moved along the legal edges only.

    Every status change checks the edge against jobsched.domain.status (an illegal one raises
    IllegalTransition before anything is written) and is conditional on the stored status being
    a legal source, plus the lease owner for moves out of a held lease. A refused change writes
    nothing and answers the row as it stood (Transition.row); an applied one answers the row as
    it was before (Transition.previous; None when the write created it).
    """

    def put_pending(
        self,
        *,
        job_id: str,
        tenant: str,
        scheduled_for: datetime,
        now: datetime,
        skipped: str | None = None,
        kind: str = "scheduled",
    ) -> Transition:
        """Create the run row PENDING (attempt 0), or SKIPPED with reason `skipped`, at most once per
        (job_id, scheduled_for): applied with the new row, or refused with the row that exists."""
        ...

    def get(self, job_id: str, scheduled_for: datetime | str, *, consistent: bool = True) -> Execution | None:
        """The run of one firing, or None; `consistent=False` may answer an older version or None."""
        ...

    def get_many(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Execution]:
        """The runs of these (job_id, stored scheduled_for) that exist, by key: eventually consistent,
        100 keys a read (a listing's packed jobs: services/packs.py)."""
        ...

    def claim(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        lease: Lease,
        now: datetime,
        create: NewRun | None = None,
        packed: bool = False,
    ) -> Transition:
        """-> LEASED under `lease` (owner, message, worker, until), attempt + 1. Applies from
        PENDING, from LEASED|RUNNING whose lease ended before `now` (a takeover: previous shows the
        dead holder's row), and from no row when `create` is given (the row is created). `packed`: a
        packed job's start, refused by a row flagged `materialized` (jobsched.domain.packs)."""
        ...

    def start(self, job_id: str, scheduled_for: str, *, owner: str, now: datetime) -> Transition:
        """LEASED -> RUNNING (started_at = now), only for the lease owner `owner`."""
        ...

    def record(self, job_id: str, scheduled_for: str, *, owner: str, end: AttemptEnd) -> Transition:
        """RUNNING -> end.status (SUCCEEDED|FAILED) with its result or error, only for the lease
        owner; the attempt joins the run's history. A success clears the run's earlier error."""
        ...

    def persist_running(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        lease: Lease,
        started_at: datetime,
        now: datetime,
        create: NewRun,
        packed: bool = False,
    ) -> Transition:
        """PENDING (or no row: created) -> LEASED -> RUNNING under `lease` in one write, attempt + 1:
        the fast path's first heartbeat makes a long run visible and its lease takeable; a packed
        job's start (`packed`: refused by a row flagged `materialized`, as claim)."""
        ...

    def record_unleased(
        self, job_id: str, scheduled_for: str, *, worker: str, end: AttemptEnd, create: NewRun
    ) -> Transition:
        """PENDING (or no row: created) -> LEASED -> RUNNING -> end.status in one write, attempt + 1:
        the fast path's only write; refused when another delivery holds or recorded the run. A row
        that says the run never started (status.UNSTARTED_RECORDS at attempt 0) is replaced: this
        attempt ran, unseen by the fleet (its worker stalled past its leases)."""
        ...

    def skip(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        reason: str,
        now: datetime,
        create: NewRun,
        first_attempt_only: bool = True,
    ) -> Transition:
        """PENDING (or no row: created) -> SKIPPED with `reason`; with first_attempt_only, only
        while attempt is 0 (a retry of a run that started is never skipped)."""
        ...

    def note_wait(
        self, job_id: str, scheduled_for: str, *, reason: str, now: datetime, create: NewRun
    ) -> int | None:
        """A run that may still start (no row: created PENDING, attempt 0; PENDING; a start held
        under a lease; FAILED) waits for a key: its row keeps `reason` and counts the wait; answers
        the waits counted so far (this one included), or None when the run is over (nothing
        written: the waiting copy is spare). The reason stays on the row when the run goes on."""
        ...

    def mark_upstream_failed(self, created: NewRun, *, reason: str, now: datetime) -> bool:
        """A dependant's run born UPSTREAM_FAILED (attempt 0, `reason`), only if it has no row yet:
        the failure workflow's MarkUpstreamFailed write (jobsched.asl), for a dependant that joins an
        upstream already dead-lettered. False when a row exists (nothing written)."""
        ...

    def cancel(
        self, job_id: str, scheduled_for: str, *, now: datetime, create: NewRun | None = None
    ) -> Transition:
        """PENDING (or no row, when `create` is given) -> CANCELLED: the run never starts. A run held
        under an expired lease (its worker died) counts as PENDING: RUNNING -> PENDING -> CANCELLED."""
        ...

    def lose(
        self, job_id: str, scheduled_for: str, *, owner: str, now: datetime, error: tuple[str, str]
    ) -> Transition:
        """LEASED|RUNNING -> LOST with error (type, message), only for the lease owner."""
        ...

    def extend_lease(self, *, job_id: str, scheduled_for: str, owner: str, until: datetime) -> bool:
        """Push a LEASED|RUNNING run's lease to `until` if `owner` holds it; else False."""
        ...

    def save_progress(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        owner: str,
        now: datetime,
        progress: str | None = None,
        checkpoint: str | None = None,
    ) -> bool:
        """Keep a LEASED|RUNNING run's progress and/or checkpoint (JSON texts; None: left as is),
        each with its instant (now), if `owner` holds its lease; else False (nothing written). Both
        stay on the row through the run's later moves (a retry, a takeover, its end)."""
        ...

    def note_task(self, job_id: str, scheduled_for: str, *, owner: str, task_arn: str) -> bool:
        """Add `task_arn` to a LEASED|RUNNING run's ecs_tasks (after those noted before) if `owner`
        holds its lease and it is not there yet; False otherwise (nothing written). The list stays on
        the row through the run's later moves."""
        ...

    def request_cancel(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        now: datetime,
        pending_too: bool = False,
        create: NewRun | None = None,
    ) -> Transition:
        """Mark a LEASED|RUNNING run (and a PENDING one with `pending_too`: a fast-path run whose
        row is not written yet) cancel-requested (cancel_requested_at = now, kept if set already):
        its worker's heartbeat reads the mark and the handler is asked to stop. The status does
        not change; refused (the row as it stood, or None) for any other status. With `create`
        (and pending_too), a missing row is created PENDING, marked: a fast-path run that has
        written no row yet. An applied mark answers the row after it."""
        ...

    def fail_stuck(
        self,
        *,
        job_id: str,
        scheduled_for: str,
        tenant: str,
        now: datetime,
        error_type: str,
        error_message: str,
    ) -> Execution | None:
        """PENDING|LEASED|RUNNING (or no row: created) -> FAILED along PENDING -> LEASED ->
        RUNNING -> FAILED, the attempt recorded; the row after, or None if it is already past."""
        ...

    def dead_letters(
        self, *, dl_key: str, start: Cursor | None, limit: int, job_id: str | None
    ) -> tuple[list[DeadLetter], Cursor | None]:
        """Up to `limit` dead letters of index partition `dl_key` (of one job if given), newest
        dead first, from `start`; and the cursor after the page (None: no more). Eventually
        consistent: a run dead-lettered a moment ago may be missing."""
        ...

    def recent(self, job_id: str, *, limit: int) -> list[Execution]:
        """The job's `limit` latest runs by scheduled_for, newest first."""
        ...

    def history(
        self,
        job_id: str,
        *,
        start: datetime | None,
        end: datetime | None,
        status: str | None,
        limit: int,
        cursor: Cursor | None,
        kind: str | None = None,
    ) -> tuple[list[Execution], Cursor | None]:
        """Runs with start <= scheduled_for < end, newest first, of `status` and `kind` if given (a
        run without a kind is "scheduled"); up to `limit`, and the cursor after (None: no more)."""
        ...

    def since(self, job_id: str, *, after: datetime) -> list[Execution]:
        """Every run of the job scheduled after `after`, oldest first (all pages)."""
        ...


class RunQueue(Protocol):
    """The execution queue: messages that ask a worker to run (job_id, scheduled_for).

    At least once: a message may be delivered twice, also at once; workers treat a run's
    second message as a duplicate. A received message is invisible (leased) for a visibility
    timeout and comes back when it ends without a delete.
    """

    def send(self, outgoing: Sequence[Outgoing]) -> None:
        """Queue every message, each visible after its delay (capped at 900 s); all or error: a
        caller that sees no exception knows every message is queued (TransientStoreError if not)."""
        ...

    def extend(self, receipt_handle: str, *, seconds: int) -> bool:
        """Make a received message invisible for `seconds` more from now; False if the receipt is
        no longer valid (the message was deleted, or received again by someone else)."""
        ...


class StateMachines(Protocol):
    """Workflow executions (the failure workflow, the DAG workflow), at most one per name."""

    def start_failure(self, name: str, payload: Mapping[str, Any]) -> bool:
        """start() on the failure workflow."""
        ...

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> bool:
        """Start an execution named `name` with input `payload`; False if one of that name exists
        already (the name is the idempotency key: a crashed starter's retry starts nothing)."""
        ...


class Target(Protocol):
    """A run's call to the user's work: what one attempt executes."""

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Execute one attempt. `envelope`: {"job_id", "run_id", "tenant", "scheduled_for",
        "attempt", "effect_key", "payload"}. Returns a JSON-serialisable result; raises for a
        failed attempt (the exception's type and message become the attempt's error). Runs are at
        least once: the target makes its effect idempotent with envelope["effect_key"]."""
        ...


class Targets(Protocol):
    """Resolves a job's target by name (today: python handlers, jobsched.handlers)."""

    def target(self, name: str) -> Target:
        """The target named `name`; raises UnknownHandler if there is none."""
        ...

    def __contains__(self, name: object) -> bool:
        """Whether `name` resolves to a target."""
        ...


class SigningSecrets(Protocol):
    """Each tenant's one current HTTP signing secret, stored encrypted, never logged.

    A tenant has no secret until its first use, which creates one: of callers that race on a first
    use exactly one secret is created and every caller answers it. A rotation replaces it; of
    rotations that race, one wins and each caller answers the secret that won.
    """

    def current(self, tenant: str) -> str:
        """The tenant's secret (created on first use): what a worker signs with. An implementation
        may serve it from a cache of a few seconds to minutes, so it can lag a rotation that long."""
        ...

    def get(self, tenant: str) -> SecretRecord:
        """The tenant's secret and its created_at, read afresh (created on first use)."""
        ...

    def rotate(self, tenant: str) -> SecretRecord:
        """Replace the tenant's secret with a new one (or create its first) and answer it."""
        ...


class TargetSource(Protocol):
    """Turns a job's target spec into the adapter that calls it (jobsched.adapters.targets.TargetFactory)."""

    def for_spec(
        self,
        spec: TargetSpec,
        *,
        timeout_seconds: float | None = None,
        resources: compute.Resources | None = None,
    ) -> Target:
        """The adapter for `spec`; `timeout_seconds` (the job's) bounds a target that waits;
        `resources`, the run's placed size, sizes a container target's task."""
        ...

    def for_worker_task(
        self, *, timeout_seconds: float | None = None, resources: compute.Resources
    ) -> Target:
        """The adapter that runs one Python run in a task of the ECS worker's own definition at
        `resources` (a container run of OWN_TASK_COMMAND); TargetFailed(TargetUnavailable) if none
        can be started here."""
        ...

    def check(self, spec: TargetSpec) -> None:
        """Raise ValidationFailed naming `target.<field>` if this deployment may never call `spec`
        (an http URL whose host is refused by the deployment's AddressPolicy; on the local stack, a
        container target with no command); nothing written."""
        ...


class AlertStore(Protocol):
    """Raised alerts, kept for listing (GET /api/alerts): at most one per alert id, per tenant."""

    def record(self, alert: Alert) -> bool:
        """Keep `alert` unless one with its (tenant, alert_id) is kept already; True when this call
        kept it (the caller then publishes it), False when it was kept before (nothing changes)."""
        ...

    def recent(
        self, tenant: str, *, since: datetime | None, start: Cursor | None, limit: int
    ) -> tuple[list[Alert], Cursor | None]:
        """The tenant's alerts raised at or after `since`, newest first, at most `limit`, from after
        `start`; and the cursor of the next page (None: no more). Never another tenant's."""
        ...

    def workflow_item(self, alert: Alert) -> dict[str, Any]:
        """The item record() keeps for `alert`, in DynamoDB attribute-value form, for a workflow that
        writes it itself (the failure workflow's RecordAlert) with the same conditional put."""
        ...


class AlertPublisher(Protocol):
    """The alert topic: subscribers filter on the message attributes tenant, job_id and kind."""

    def publish(self, alert: Alert) -> None:
        """Publish `alert` (JSON) with its attributes; raises TransientStoreError or StoreError."""
        ...


class WorkerStore(Protocol):
    """External workers (jobsched.domain.workers) and each pool's queue of waiting runs.

    A worker's holds live on its item, and every change to them is a compare-and-set on the
    worker's version: a placer that read version v adds a hold only if the worker is still at v and
    ALIVE, so two placers racing on one worker cannot both fill the same free capacity.
    """

    def register(self, worker: Worker) -> bool:
        """Store a new worker; False (nothing written) if its id is taken."""
        ...

    def get_worker(self, tenant: str, worker_id: str) -> Worker | None:
        """The tenant's worker, read consistently; None for an unknown id or another tenant's."""
        ...

    def list_workers(self, tenant: str, *, pool: str | None = None) -> list[Worker]:
        """The tenant's workers (of `pool` if given), by worker id; never another tenant's."""
        ...

    def heartbeat(
        self, tenant: str, worker_id: str, *, now: datetime, free: Resources | None, runs: Mapping[str, str]
    ) -> Worker | None:
        """Record an ALIVE worker's heartbeat (last_heartbeat = now, its reported free resources and
        runs), its holds untouched; answers the worker after, or as it stood when it is DEAD (the
        heartbeat is refused), or None when there is no such worker."""
        ...

    def reserve(self, tenant: str, worker_id: str, *, hold: Hold, expected_version: int) -> bool:
        """Add `hold` if the worker is ALIVE, at `expected_version` and holds no such run (version +1)."""
        ...

    def confirm(self, tenant: str, worker_id: str, *, run_id: str, now: datetime) -> bool:
        """Turn the worker's reservation of `run_id` into a confirmed hold (its ack), if the worker is
        ALIVE and the reservation is still there (a repeated ack of a confirmed hold answers True)."""
        ...

    def release(self, tenant: str, worker_id: str, *, run_id: str, only: Hold | None = None) -> bool:
        """Drop the worker's hold on `run_id`; with `only`, just that very reservation (still
        unacknowledged, not replaced by a later placement of the run). False if there was none."""
        ...

    def requeue_lapsed(self, tenant: str, worker_id: str, *, hold: Hold, run: QueuedRun) -> bool:
        """In one atomic write: drop `hold`, a reservation whose ack never came, if it is still that
        very reservation, and put `run` back in its pool's queue. False (nothing written) if the hold
        is gone or replaced: another sweep requeued it first, and may have placed it again since."""
        ...

    def mark_dead(self, tenant: str, worker_id: str, *, expected_version: int) -> Worker | None:
        """ALIVE -> DEAD at `expected_version`, every hold dropped in the same write; answers the worker
        as it was before (with the holds that were dropped), or None when refused."""
        ...

    def enqueue(self, run: QueuedRun) -> bool:
        """Put a run in its pool's queue at its enqueued_at; False if it is queued there already."""
        ...

    def waiting(self, tenant: str, pool: str, *, limit: int) -> list[QueuedRun]:
        """Up to `limit` runs queued in the pool, oldest first."""
        ...

    def waiting_page(
        self, tenant: str, pool: str, *, start: Cursor | None, limit: int
    ) -> tuple[list[QueuedRun], Cursor | None]:
        """Up to `limit` runs queued in the tenant's pool, oldest first, after `start`; and the cursor
        after the page ({"PK", "SK"}: keys.pool_queue_pk/pool_queue_sk; None: no more). A full page
        may have a cursor with nothing after it (as a DynamoDB Query does). Never another tenant's."""
        ...

    def is_queued(self, run: QueuedRun) -> bool:
        """Whether the run waits in its pool's queue at its enqueued_at (one consistent read)."""
        ...

    def dequeue(self, run: QueuedRun) -> bool:
        """Take the run out of its pool's queue; False if it was not there."""
        ...


class RunLogs(Protocol):
    """What runs logged, per run: every line logged inside a run's scope carries its run_id and tenant
    (jobsched.logcontext), and this reads them back by those two fields."""

    def page(self, run_id: str, *, tenant: str, since: datetime, cursor: str | None, limit: int) -> LogPage:
        """Up to `limit` lines of run `run_id` of `tenant`, logged at or after `since`, oldest first,
        from `cursor` (None: the first). A line of another tenant's run is never answered. A page may
        hold fewer lines than `limit` and still have a next_cursor (a reader follows it)."""
        ...


class TaskLogs(Protocol):
    """What container targets' ECS tasks printed, per task: the output of a task of a task definition
    jobsched registered for an image (its awslogs stream, domain.logs.task_stream). Which tasks are a
    run's is the run row's (Execution.ecs_tasks), so a reader reaches only its own tenant's."""

    def page(self, task_arn: str, *, cursor: str | None, limit: int) -> LogPage:
        """Up to `limit` lines the task printed, oldest first, from `cursor` (None: the first). A task
        with no output yet (not started, or silent) answers no lines and no cursor. A page may hold
        fewer lines than `limit` and still have a next_cursor (a reader follows it)."""
        ...


class Metrics(Protocol):
    """Operational figures (CloudWatch EMF on AWS): names and units from jobsched.telemetry.

    Emitting never fails a run or a pass, and never blocks on I/O (EMF is a log line written when
    the invocation ends). No dimension beyond the emitting function's: a per-tenant or per-job
    figure belongs in the run history (GET /api/jobs/{id}/stats), not in a metric.
    """

    def emit(self, name: str, value: float, unit: str) -> None:
        """Record one value of the metric `name`."""
        ...

    def alert(self, kind: str) -> None:
        """Count one alert of `kind` (failed, dead_letter, late, missed, skipped): the alerts' hook."""
        ...


class NoMetrics:
    """Metrics nobody reads: the default where a caller wires none."""

    def emit(self, name: str, value: float, unit: str) -> None:
        """Drop the value."""

    def alert(self, kind: str) -> None:
        """Drop the alert's count."""


class Clock(Protocol):
    """The authoritative time source of a process."""

    def now(self) -> datetime:
        """The current instant, timezone-aware."""
        ...


class SystemClock:
    """The machine's clock, in UTC."""

    def now(self) -> datetime:
        """The current instant, UTC."""
        return datetime.now(UTC)


class FakeClock:
    """A clock that only moves when told to (tests, simulations)."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The simulated instant."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move time forward and return the new instant."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, moment: datetime) -> None:
        """Jump to `moment`."""
        with self._lock:
            self._now = moment


class Crash(BaseException):
    """A simulated process death: it escapes every `except Exception`, as a SIGKILL would."""


class CrashPoints(Protocol):
    """Called between the steps of a service; a test implementation raises Crash at one of them."""

    def __call__(self, point: str) -> None:
        """Reached step boundary `point`."""
        ...


def no_crash(point: str) -> None:
    """The production crash points: none."""


class LimitStore(Protocol):
    """Tenant-scoped limits that runs and requests take: concurrency-key slots and daily budgets.

    A key's slots are a holder set, not a bare count: each holder has its own expiry, renewed by
    its run's heartbeat, so a worker that dies holding a slot frees it when its expiry passes (a
    count would leak the slot for ever).
    """

    def acquire(
        self, tenant: str, key: str, *, holder: str, limit: int, until: datetime, now: datetime
    ) -> bool:
        """Take a slot of (tenant, key) for `holder` until `until` if fewer than `limit` holders are
        live (expiry >= now); a holder already in the set is renewed (True). Atomic: racing callers
        never leave more than `limit` live holders. False: the key is full (nothing written)."""
        ...

    def extend(self, tenant: str, key: str, *, holder: str, until: datetime) -> bool:
        """Push `holder`'s expiry to `until` if it is still in the set; else False."""
        ...

    def release(self, tenant: str, key: str, *, holder: str) -> None:
        """Remove `holder` from the set (a holder not in it: nothing happens)."""
        ...

    def holders(self, tenant: str, key: str, *, now: datetime) -> dict[str, datetime]:
        """The live holders of (tenant, key) and their expiry."""
        ...

    def take_budget(self, tenant: str, name: str, *, day: str, amount: int, limit: int) -> bool:
        """Add `amount` to the tenant's `name` usage of `day` if the total stays <= `limit`; else
        nothing is added (False). Atomic: racing requests never pass the limit together."""
        ...


class QuotaStore(Protocol):
    """Operator-set tenant quotas (written with operator credentials, never by a tenant request)."""

    def get_quota(self, tenant: str) -> Quota | None:
        """The tenant's quota, or None (then the defaults apply)."""
        ...

    def put_quota(self, tenant: str, quota: Quota) -> None:
        """Set the tenant's quota (every field; the fields not given by the operator at their defaults)."""
        ...

    def list_quotas(self) -> dict[str, Quota]:
        """Every tenant that has a quota set, and its quota."""
        ...


class FargateVcpuStore(Protocol):
    """Fargate vCPU reserved per scope (jobsched.domain.fargate_vcpu): a counter per scope, in CPU units,
    and one record per run, so that a release is idempotent and a forgotten reservation can lapse.

    A counter, not a holder set: the limit is on the sum of the holders' sizes, which DynamoDB can
    check in the write's condition itself (used + need <= limit); the run's record says what to give
    back, and when the reservation lapses (its run's timeout has passed: its task is stopped by then).
    """

    def reserve(
        self, run: str, *, cpu: int, scopes: Sequence[Scope], until: datetime, now: datetime
    ) -> Scope | None:
        """Reserve `cpu` units for `run` in every scope at once if each stays within its limit; None
        when reserved, else the first full scope (nothing written). Atomic: racing reservers never
        take a scope past its limit. A run that holds a reservation already keeps it (None), its
        lapse pushed to `until`. Before it answers full, lapsed reservations (until < now) are
        released and the reservation is tried once more."""
        ...

    def release(self, run: str) -> bool:
        """Give `run`'s units back to each scope it reserved in (never below zero); False when it
        holds none (released already, or lapsed and swept): a second release changes nothing."""
        ...

    def used(self, scope: str) -> int:
        """CPU units reserved in `scope` now (0 for a scope never used)."""
        ...

    def reservations(self) -> dict[str, datetime]:
        """Every run holding a reservation, and when it lapses."""
        ...
