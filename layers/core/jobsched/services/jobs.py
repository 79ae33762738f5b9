"""Job use cases behind the API: submit, inspect, cancel. Tenancy is enforced here."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobsched import cron
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.firing import next_fire
from jobsched.domain.limits import QuotaExceeded
from jobsched.domain.models import Job, SchedulePolicy, started_runs
from jobsched.domain.packs import (
    Pack,
    PackedDefinition,
    new_pack_id,
    pack_id_for_key,
    packable,
    packed_job_id,
    parse_packed,
)
from jobsched.domain.records import DueEntry
from jobsched.domain.results import Control, Graph, JobDetail, Submitted
from jobsched.domain.status import HELD, JobStatus, RunStatus
from jobsched.domain.targets import HttpTarget, PythonTarget, TargetSpec
from jobsched.errors import (
    Conflict,
    IdempotencyConflict,
    JobschedError,
    NotFound,
    TransientStoreError,
    ValidationFailed,
)
from jobsched.ports import Clock, JobStore, RunStore, SigningSecrets, Targets, TargetSource
from jobsched.services.dag import DagService, graph_period
from jobsched.services.dispatch import Dispatcher, jitter_offset
from jobsched.services.limits import LIVE_STATUSES, TenantQuotas
from jobsched.services.packs import PackedJobs

# A one-off may be a little in the past (client clock skew, a slow retry): it then fires at once.
RUN_AT_PAST_TOLERANCE = timedelta(minutes=5)
RUN_AT_FUTURE_LIMIT = timedelta(days=366 * 10)
RECENT_EXECUTIONS = 20
# How far back DELETE looks for a RUNNING or PENDING run of the job (newest first).
CANCEL_SCAN_RUNS = 200
# A cancel refused because its job changed (a run started or ended meanwhile) reads it again.
CANCEL_ATTEMPTS = 3
# How many times a cancel's sweep writes one PENDING run CANCELLED while the store fails (a throttle,
# a 500, a timeout), before it goes on to the next run and answers the failure (as Worker._record).
CANCEL_SWEEP_TRIES = 4
IDEMPOTENCY_KEY_MAX = 128
# One item of a batch create: the request and its idempotency key, or the error it arrived with.
BatchItem = tuple[CreateJobRequest, str | None] | JobschedError

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_job_id() -> str:
    """A ULID-shaped id ("job_" + 26 chars): time-ordered, 80 random bits.

    Hand-written because it is eight lines and the ulid packages add a dependency to the layer.
    """
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_CROCKFORD[rem])
    return "job_" + "".join(reversed(chars)).lower()


def job_id_for_key(tenant: str, key: str) -> str:
    """The job id an Idempotency-Key names ("job_" + 26 chars, like new_job_id): a digest of
    (tenant, key), so the key's record is the job item itself and one conditional put both
    creates the job and refuses a second create (JobStore.create_with_idempotency)."""
    value = int.from_bytes(hashlib.sha256(f"{tenant}\x00{key}".encode()).digest()[:17], "big") >> 6
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_CROCKFORD[rem])
    return "job_" + "".join(reversed(chars)).lower()


def batch_hash(items: Sequence[BatchItem]) -> str:
    """A digest of a whole batch: each item's request hash and own key, or its error, in order."""
    parts = [
        f"error:{item}" if isinstance(item, JobschedError) else f"{request_hash(item[0])}:{item[1] or ''}"
        for item in items
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def request_hash(request: CreateJobRequest) -> str:
    """A digest of the normalised request: the same body (defaults filled in) hashes the same."""
    # A field added since (concurrency) is left out while unset: a retry of a request made before it
    # existed, with the same body, hashes as it did then.
    unset_new = {"concurrency"} if request.concurrency is None else set()
    canonical = json.dumps(
        request.model_dump(mode="json", exclude=unset_new), sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class JobService:
    """Submit, read and cancel jobs for a tenant."""

    jobs: JobStore
    runs: RunStore
    dispatcher: Dispatcher
    registry: Targets
    clock: Clock
    dag: DagService
    targets: TargetSource
    signing_secrets: SigningSecrets | None = None
    # The tenants' quotas (services/limits.py); None: no quota is checked.
    quotas: TenantQuotas | None = None
    # Packed one-offs (jobsched.domain.packs, services/packs.py); None: a batch's jobs are each an item.
    packed: PackedJobs | None = None

    def check_target(self, target: TargetSpec, *, tenant: str, shorthand: bool = False) -> None:
        """A 400 naming the field, before anything is written, for a target this deployment cannot
        call: an unregistered python handler (`handler`, or `target.handler`), or an http URL the
        deployment's address policy refuses (`target.url`: the SSRF guard, see TargetSource.check).

        An http target's tenant gets its signing secret here, if it has none yet: the worker, which
        signs, may only decrypt a secret (least privilege), never create one."""
        if isinstance(target, HttpTarget) and self.signing_secrets is not None:
            self.signing_secrets.current(tenant)
        if isinstance(target, PythonTarget):
            if target.handler not in self.registry:
                field = "handler" if shorthand else "target.handler"
                raise ValidationFailed(
                    f"{field}: '{target.handler}' is not a registered handler", field=field
                )
            return
        self.targets.check(target)

    def submit(self, request: CreateJobRequest, *, tenant: str, idempotency_key: str | None) -> Submitted:
        """Validate; store the job (its due entry and idempotency record on it) in one conditional put;
        hand it over if due soon."""
        response, job = self._accept(request, tenant=tenant, idempotency_key=idempotency_key)
        self.hand_over_if_due_soon(job)
        if job.type == "dependent":
            self.dag.join(job)
        return response

    def submit_batch(
        self, items: Sequence[BatchItem], *, tenant: str, idempotency_key: str | None = None
    ) -> list[Submitted | JobschedError]:
        """Create each item, in order; one item's error (or an item that arrives as one) is its answer
        and the others go on.

        The one-offs that need nothing but their run are packed (jobsched.domain.packs): one item
        holds their definitions, one cursor item hands them over, and a job's run row is its only
        state; every other item is its own conditional put, as submit() writes it. (BatchWriteItem
        cannot condition a put, so a retried batch would overwrite a job that ran; a transaction
        doubles every unit and fails the whole batch for one used key.) The batch's Idempotency-Key
        names the pack (a retried batch writes it once and answers as the first time; another body
        is a 409) and keys each unpacked item that has no key of its own (`<key>#<index>`).

        A crash part-way leaves whole jobs, never a half-written one: the pack's definitions are
        written before its cursor, and its jobs are answered only after both (the dispatcher hands
        over whatever the cursor holds that the request's own hand-over did not reach).
        """
        batch_key = self._idempotency_key(idempotency_key)
        pack_id = pack_id_for_key(tenant, batch_key) if batch_key else new_pack_id()
        answers: list[Submitted | JobschedError | None] = []
        due_soon: list[Job] = []
        packed: list[tuple[int, Job]] = []
        live: list[int] = []  # the tenant's live jobs, counted once for the whole pack (max_jobs)
        stored_pack = False  # a retry found its pack written: its answers are the pack's
        for index, item in enumerate(items):
            if isinstance(item, JobschedError):
                answers.append(item)
                continue
            request, key = item
            try:
                job = self._build(request, tenant=tenant, idempotency_key=key)
                if self.packed is not None and packable(job, keyed=key is not None):
                    try:
                        self._check_quotas(request, tenant=tenant, key=None, live=live, adding=len(packed))
                    except QuotaExceeded as exc:
                        # A retry of a batch whose pack its key wrote already (its jobs count among the
                        # live ones now): it answers what the first one did, at the quota or not. This
                        # answer stands for a job the stored pack does not hold (refused the first time).
                        if batch_key is None or self.packed.packs.get_pack(pack_id) is None:
                            raise
                        answers.append(exc)
                        stored_pack = True
                        continue
                    packed.append((index, job.model_copy(update={"job_id": packed_job_id(pack_id, index)})))
                    answers.append(None)  # answered once the pack is written
                    continue
                own_key = key if key is not None or batch_key is None else f"{batch_key}#{index}"
                response, job = self._accept(request, tenant=tenant, idempotency_key=own_key)
                if job.type == "dependent":
                    self.dag.join(job)
            except JobschedError as exc:
                answers.append(exc)
                continue
            answers.append(response)
            if self._due_soon(job):
                due_soon.append(job)
        if packed or stored_pack:
            self._store_pack(pack_id, packed, items=items, tenant=tenant, answers=answers)
        if due_soon:
            now = self.clock.now()
            until = now + timedelta(seconds=self.dispatcher.settings.lookahead_seconds)
            self.dispatcher.hand_over([DueEntry.of(j) for j in due_soon], now=now, until=until)
        return [a for a in answers if a is not None]

    def _store_pack(
        self,
        pack_id: str,
        packed: list[tuple[int, Job]],
        *,
        items: Sequence[BatchItem],
        tenant: str,
        answers: list[Submitted | JobschedError | None],
    ) -> None:
        """Write the pack (or find the one its key wrote), answer its jobs, and hand over its due-soon
        ones at once (the cursor moves past them; the dispatcher hands over the rest)."""
        assert self.packed is not None
        now = times.truncate_ms(self.clock.now())
        pack = Pack(
            pack_id=pack_id,
            tenant=tenant,
            created_at=now,
            request_hash=batch_hash(items),
            definitions=tuple(PackedDefinition.of(job) for _, job in packed),
        )
        # (nothing of the batch packed now: a retry whose every packed job met the quota its pack filled)
        stored = self.packed.packs.put_pack(pack, now=now) if packed else self.packed.packs.get_pack(pack_id)
        if stored is None and not packed:
            return
        if stored is not None:
            if stored.request_hash != pack.request_hash or stored.tenant != tenant:
                conflict = IdempotencyConflict(
                    "Idempotency-Key was already used with a different batch", field="Idempotency-Key"
                )
                for index, _ in packed:
                    answers[index] = conflict
                return
            pack = stored
        for definition in pack.definitions:
            parsed = parse_packed(definition.job_id)
            assert parsed is not None
            answers[parsed[1]] = Submitted(
                job_id=definition.job_id, status=JobStatus.SCHEDULED, next_run_at=definition.run_at
            )
        self.dispatcher.hand_over_pack(pack, now=self.clock.now())

    def _accept(
        self, request: CreateJobRequest, *, tenant: str, idempotency_key: str | None
    ) -> tuple[Submitted, Job]:
        """Validate and store one job (or find the one its key created): its answer and the job."""
        key = self._idempotency_key(idempotency_key)
        job = self._build(request, tenant=tenant, idempotency_key=key)
        self._check_quotas(request, tenant=tenant, key=key)
        response = Submitted(job_id=job.job_id, status=job.status, next_run_at=job.next_run_at)
        used = self.jobs.create_with_idempotency(
            job,
            idempotency_key=key,
            request_hash=request_hash(request),
            response=response.stored(),
            now=job.created_at,
        )
        if used is not None:
            if used.request_hash != request_hash(request):
                raise IdempotencyConflict(
                    "Idempotency-Key was already used with a different request body", field="Idempotency-Key"
                )
            response = Submitted.from_stored(used.response)
            stored = self.jobs.get_job(response.job_id)
            if stored is None:
                raise NotFound(f"job {response.job_id} no longer exists")
            job = stored
        return response, job

    def _build(self, request: CreateJobRequest, *, tenant: str, idempotency_key: str | None) -> Job:
        """The job a request asks for, validated (a 400 naming the field); nothing is written."""
        target = request.run_target()
        self.check_target(target, tenant=tenant, shorthand=request.handler is not None)
        key = self._idempotency_key(idempotency_key)
        now = times.truncate_ms(self.clock.now())
        root_schedule = None
        if request.type == "dependent":
            root_schedule = self.dag.check_upstreams(request.depends_on, tenant=tenant)
            next_run_at = None
        else:
            next_run_at = self._first_tick(request, now)
        return Job(
            job_id=job_id_for_key(tenant, key) if key else new_job_id(),
            tenant=tenant,
            type=request.type,
            status=JobStatus.SCHEDULED,
            target=target,
            payload=request.payload,
            name=request.name,
            run_at=times.truncate_ms(request.run_at) if request.run_at else None,
            cron_expr=" ".join(request.cron_expr.split()) if request.cron_expr else None,
            timezone=request.timezone,
            retry=request.retry_policy(),
            policy=request.schedule_policy(),
            idempotent=request.idempotent,
            tags=dict(request.tags),
            alerts=request.alerts,
            concurrency=request.concurrency,
            resources=request.resources,
            runs_on=request.runs_on,
            depends_on=tuple(request.depends_on),
            root_schedule=root_schedule,
            next_run_at=next_run_at,
            created_at=now,
            updated_at=now,
        )

    def get(self, job_id: str, *, tenant: str) -> JobDetail:
        """The job and its newest runs; another tenant's job is not found."""
        job = self.owned(job_id, tenant)
        runs = self.runs.recent(job.job_id, limit=RECENT_EXECUTIONS)
        return JobDetail(job=job, runs=runs, next_run_at=next_run_shown(job, now=self.clock.now()))

    def graph(self, job_id: str, *, tenant: str, period: str | None = None) -> Graph:
        """The DAG around a job: its recent periods, or the one `period` (a 400 naming it if malformed)."""
        chosen = None if period is None else graph_period(period)
        return self.dag.graph(self.owned(job_id, tenant), period=chosen)

    def cancel(self, job_id: str, *, tenant: str) -> Control:
        """Compare-and-set SCHEDULED|PAUSED -> CANCELLED; 409 while a run is in progress; a repeat is 200.

        "In progress" is a live start marker on the job (JobStore's slot or count), which every run
        writes before its handler runs, on the same item this compare-and-set reads: either the
        cancel sees the run (409, nothing changed), or it wins and the run never starts.

            read job ── live marker? ── yes ──> a finished holder (a skip job's lapsing slot)? ── no ──> 409
                           │ no                        │ yes
                           v                           v
            CAS: status, and no live marker (or that finished holder) ── refused: read again
                           │ applied                                   (a run started meanwhile)
                           v
            dependants cancelled; PENDING runs swept (a worker that meets one sees the job)
        """
        job = self.owned(job_id, tenant)
        recent = self.runs.recent(job.job_id, limit=CANCEL_SCAN_RUNS)
        now = self.clock.now()
        if job.status != JobStatus.CANCELLED and any(
            r.status in HELD and r.lease_until is not None and r.lease_until >= now for r in recent
        ):
            # A leased run's row lease outlives its job marker when its worker dies: refuse while
            # either is live (the message comes back only when the row's lease is over).
            raise Conflict(f"job {job_id} has a run in progress; it cannot be cancelled mid-flight")
        for _ in range(CANCEL_ATTEMPTS):
            if job.status == JobStatus.CANCELLED:
                break
            if job.status in (JobStatus.COMPLETED, JobStatus.FAILED):
                raise Conflict(f"job {job_id} has already {job.status.value.lower()}")
            now = self.clock.now()
            stale = self._in_progress(job, now)
            applied, current = self.jobs.cancel_job(job.job_id, now=now, stale=stale)
            if applied:
                job = current or job  # the job as the cancel wrote it: its markers as they stood then
                break
            if current is None:
                raise NotFound(f"job '{job_id}' not found", field="job_id")
            job = current
        else:
            raise Conflict(f"job {job_id} changed while cancelling; retry")
        # Dependants of a cancelled job could never fire: they are cancelled with it.
        self.dag.cancel_dependants(job)
        # Runs already handed to the queue must not fire. A worker that meets one of them checks
        # the job too, so a crash here (or a repeat cancel, which sweeps again) loses nothing.
        started = self._started_runs(job)
        failed: TransientStoreError | None = None
        for run in recent:
            # (Not a run with a start marker left on the job, lapsed: its receive got past the
            # marker, so it may have run; its redelivery records it truthfully, Worker._lost_to_cancel.)
            if run.status == RunStatus.PENDING and times.stored(run.scheduled_for) not in started:
                try:
                    self._sweep(job.job_id, times.stored(run.scheduled_for))
                except TransientStoreError as exc:
                    failed = exc  # the next rows still go; the client's retry sweeps this one again
        if failed is not None:
            raise failed
        return Control(job_id=job.job_id, status=JobStatus.CANCELLED)

    def _sweep(self, job_id: str, sf: str) -> None:
        """Cancel one PENDING run of a cancelled job, the write retried while the store fails
        (CANCEL_SWEEP_TRIES). A row no worker will settle otherwise may wait on it: a one-off's row
        written PENDING by a hand-over that failed before its send, the job's next_run_at cleared by
        the cancel, so no pass sends it again (tests/sim seed 2973: the sweep's write throttled, the
        client answered 503 and never came back, and the run stayed PENDING). A retry after a
        timeout that applied is refused (the row is CANCELLED already): harmless."""
        for left in range(CANCEL_SWEEP_TRIES - 1, -1, -1):
            try:
                self.runs.cancel(job_id, sf, now=self.clock.now())
                return
            except TransientStoreError:
                if not left:
                    raise

    @staticmethod
    def _started_runs(job: Job) -> set[str]:
        """The runs (stored ticks) whose start marker is still on the job: the slot's holder, and
        every run with an in-flight entry (a counted run: allow, backfill, dependant). After a cancel
        went through, each such marker has lapsed: a receive got past it and died, maybe after the
        handler ran. A PENDING row says nothing about that (a backfill's row is written PENDING before
        its run, a retry's is re-armed PENDING, and the fast path writes its row only at its end), so
        the sweep leaves these rows to their redeliveries, which see the marker and record the run LOST
        (tests/sim seeds 1370, 3707, 7879, 9167: backfills and a retry whose workers died after the
        handler, swept CANCELLED, and their redeliveries found them finished)."""
        return started_runs(job)

    def _in_progress(self, job: Job, now: datetime) -> str | None:
        """Raise 409 if a run of the job is in progress; else the slot's finished holder, if any."""
        busy = Conflict(f"job {job.job_id} has a run in progress; it cannot be cancelled mid-flight")
        if any(until >= now for until in job.in_flight.values()):
            raise busy
        if job.active_run is None or job.active_until is None or job.active_until < now:
            return None
        holder = self.runs.get(job.job_id, times.parse_stored(job.active_run))
        if holder is None or holder.status in (RunStatus.PENDING, *HELD):
            raise busy  # no row, or PENDING: a run on the fast path writes its row when it ends
        return job.active_run  # finished; a healthy skip run leaves its slot to lapse

    # -- helpers ----------------------------------------------------------------------------------------
    def owned(self, job_id: str, tenant: str) -> Job:
        if self.packed is not None and self.packed.foreign(job_id, tenant):
            raise NotFound(f"job '{job_id}' not found", field="job_id")  # (copied out for its tenant only)
        job = self.jobs.get_job(job_id) if job_id.startswith("job_") and len(job_id) <= 64 else None
        if job is None or job.tenant != tenant:
            raise NotFound(f"job '{job_id}' not found", field="job_id")
        return job

    @staticmethod
    def _idempotency_key(raw: str | None) -> str | None:
        if raw is None or raw == "":
            return None
        if len(raw) > IDEMPOTENCY_KEY_MAX or not raw.isprintable():
            raise ValidationFailed(
                f"Idempotency-Key must be 1..{IDEMPOTENCY_KEY_MAX} printable characters",
                field="Idempotency-Key",
            )
        return raw

    def _first_tick(self, request: CreateJobRequest, now: datetime) -> datetime:
        if request.type == "one_off":
            assert request.run_at is not None  # guaranteed by CreateJobRequest
            run_at = times.truncate_ms(request.run_at)
            if run_at < now - RUN_AT_PAST_TOLERANCE:
                raise ValidationFailed(
                    f"run_at: {times.iso(run_at)} is more than "
                    f"{int(RUN_AT_PAST_TOLERANCE.total_seconds())} s in the past",
                    field="run_at",
                )
            if run_at > now + RUN_AT_FUTURE_LIMIT:
                raise ValidationFailed("run_at: more than 10 years ahead", field="run_at")
            return run_at
        assert request.cron_expr is not None
        policy = request.schedule_policy()
        schedule = self.validate_schedule(request.cron_expr, request.timezone, policy)
        after = max(now, policy.start_at - timedelta(milliseconds=1)) if policy.start_at else now
        tick = schedule.next_after(after)
        if policy.end_at and tick > policy.end_at:
            raise ValidationFailed("end_at: the schedule has no tick before end_at", field="end_at")
        return tick

    def _check_quotas(
        self,
        request: CreateJobRequest,
        *,
        tenant: str,
        key: str | None,
        live: list[int] | None = None,
        adding: int = 0,
    ) -> None:
        """429 over the tenant's max_jobs, or a schedule more frequent than its min_cron_interval.

        A create retried with its Idempotency-Key (its job exists: the id derives from the key) is
        no new job: it answers what the first one did, at the quota or not. `live`: the count of a
        batch's pack, read once (for its first item) and kept there; `adding`: the pack's jobs so far."""
        if self.quotas is None:
            return
        if request.type == "recurring" and request.cron_expr:
            self.quotas.check_cron_interval(tenant, cron.parse(request.cron_expr, request.timezone))

        def count(stop_at: int) -> int:
            if live is None:
                return self.jobs.count_jobs(tenant, statuses=LIVE_STATUSES, stop_at=stop_at)
            if not live:
                live.append(self.jobs.count_jobs(tenant, statuses=LIVE_STATUSES, stop_at=stop_at))
            return live[0] + adding

        try:
            self.quotas.check_jobs(tenant, count)
        except QuotaExceeded:
            if key is None or self.jobs.get_job(job_id_for_key(tenant, key)) is None:
                raise

    @staticmethod
    def validate_schedule(cron_expr: str, timezone: str, policy: SchedulePolicy) -> cron.CronSchedule:
        """The parsed schedule; a 400 naming the field if it or the policy cannot be used."""
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValidationFailed(
                f"timezone: '{timezone}' is not an IANA timezone", field="timezone"
            ) from None
        try:
            schedule = cron.parse(cron_expr, timezone)
        except cron.CronError as exc:
            raise ValidationFailed(f"{exc.field}: {exc}", field=exc.field) from exc
        if policy.jitter_seconds and policy.jitter_seconds >= schedule.min_interval_seconds():
            raise ValidationFailed(
                f"jitter_seconds: {policy.jitter_seconds} s is not shorter than the schedule's interval "
                f"({schedule.min_interval_seconds()} s)",
                field="jitter_seconds",
            )
        if policy.start_at and policy.end_at and policy.end_at <= policy.start_at:
            raise ValidationFailed("end_at: must be after start_at", field="end_at")
        return schedule

    def _due_soon(self, job: Job) -> bool:
        """Whether the job's pending tick is within the look-ahead: the next pass may be too late."""
        until = self.clock.now() + timedelta(seconds=self.dispatcher.settings.lookahead_seconds)
        return job.next_run_at is not None and job.status == JobStatus.SCHEDULED and job.next_run_at <= until

    def hand_over_if_due_soon(
        self,
        job: Job,
        *,
        missed_before: datetime | None = None,
        queued_before: datetime | None = None,
        resend_before: datetime | None = None,
    ) -> None:
        """Hand a tick the next dispatcher pass may not reach in time to the queue now."""
        if not self._due_soon(job):
            return
        now = self.clock.now()
        until = now + timedelta(seconds=self.dispatcher.settings.lookahead_seconds)
        self.dispatcher.hand_over(
            [DueEntry.of(job)],
            now=now,
            until=until,
            missed_before=missed_before,
            queued_before=queued_before,
            resend_before=resend_before,
        )


def next_run_shown(job: Job, *, now: datetime) -> datetime | None:
    """The next_run_at a view of the job shows: its next firing, not the dispatcher's cursor."""
    return next_fire(job, now=now, jitter_offset_seconds=jitter_offset(job.job_id, job.policy.jitter_seconds))
