"""Run: a worker takes one queue message and moves its run PENDING -> LEASED -> RUNNING -> done.

The SQS visibility timeout is the lease; the run row mirrors it (lease_owner, lease_until) so a
state change is a compare-and-set that only the current holder can win:

    receive msg ──> job still scheduled? ──no──> run PENDING -> CANCELLED, ack
                        │ yes
                        v
    claim: PENDING -> LEASED (or LEASED/RUNNING whose lease expired: the holder died)
        │ refused: finished, or held by a live lease      -> a duplicate: ack, do nothing
        │ refused: held by a live lease of THIS message   -> SQS delivered it twice at once:
        │                                                    leave it, its visibility governs
        v
    LEASED -> RUNNING (holder only) ──> handler (heartbeat extends message + row lease)
        v
    RUNNING -> SUCCEEDED | FAILED (holder only) ──> ack (delete the message)

    crash after claim / mid-handler / before the result is written -> the message is not deleted,
        it surfaces again after the visibility timeout, the row's lease has expired with it, and
        the next receive takes the run over (attempt + 1): no lost run
    crash after the result is written, before the ack -> the message surfaces again, finds the
        run finished and is dropped: no second effect

A job with a concurrency key takes a slot of (tenant, key) once past its gate, before the handler
(LimitStore: a holder set, each holder "<scheduled_for>#<message id>" with its own expiry, renewed
by the heartbeat):

    gate passed ──> acquire ──full──> note the wait on the run row (PENDING, its reason), send a
        │                             copy of the message delayed 1, 2, 4 .. 30 s, ack this one
        │ taken                       (a new message: its receive count starts again, so a wait
        v                             never pushes a run toward the redrive queue)
    run ──> release the slot at the outcome (an error too)

    crash after the copy is sent, before the ack -> two messages of one run: the second finds the
        run finished (or held) and is dropped, as any duplicate
    crash holding a slot -> nothing renews it: it lapses within the hold (lease / 2), and the
        message's redelivery (same message id, same holder) takes it again

A run placed on ECS Fargate reserves its placed size's vCPU (FargateVcpuStore: the account's quota,
and its tenant's max_fargate_cpu when set) once its keys are taken, before it starts, keyed by its
run id so a redelivery of the run keeps the reservation it had:

    keys taken ──> reserve ──full──> give the keys and the slot back, note the wait on the run row,
        │                            send a delayed copy, ack this one (as for a full key)
        │ reserved
        v
    run ──> release the reservation at the outcome (an error too); a second release is a no-op

    crash holding a reservation -> its redelivery (same run id) keeps it; a run that never comes
        back leaves it to lapse at its timeout + slack, released by the next reserver that finds
        a scope full

On the ECS worker, a Python run placed bigger than the worker's own task (domain.compute
needs_own_task) leases first, then runs as a container run of the worker's own task definition at its
placed size (TargetSource.for_worker_task), whose task runs the handler and records the attempt under
this worker's lease (Worker.run_in_own_task: its timeline and crash points).

Over 600 lines on purpose: this is one multi-step path (gate, start markers, fast or leased
path, heartbeat, record, hand-over) whose crash points are read against the timeline above;
split, each half would need the other's docstring. The target call goes behind ports.Target.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from aws_lambda_powertools import Logger

from jobsched import cron, telemetry
from jobsched.domain import times
from jobsched.domain.alerts import LateWatch, is_late_watch
from jobsched.domain.compute import needs_own_task
from jobsched.domain.ecs_tasks import RAN_UNRECORDED
from jobsched.domain.fargate_vcpu import LAPSE_SLACK_SECONDS, MAX_RUN_SECONDS
from jobsched.domain.fargate_vcpu import scopes as vcpu_scopes
from jobsched.domain.fargate_vcpu import wait_reason as vcpu_wait_reason
from jobsched.domain.keys import parse_run_id, run_id_for
from jobsched.domain.limits import TENANT_KEY, key_wait_seconds, tenant_wait_reason, wait_reason
from jobsched.domain.models import Execution, Job, RunError, RunMessage, in_flight_key, live_runs, takes_slot
from jobsched.domain.packs import PackedDefinition
from jobsched.domain.records import AttemptEnd, Lease, NewRun, Outgoing, Transition
from jobsched.domain.status import HELD, TERMINAL, UNSTARTED_RECORDS, JobStatus, RunStatus
from jobsched.domain.targets import PythonTarget, TargetFailed, WorkerTarget
from jobsched.domain.workers import pool_key_holder
from jobsched.errors import JobschedError, StoreError, StoreUnreachable, TransientStoreError
from jobsched.handlers import RunContext
from jobsched.logcontext import run_scope
from jobsched.ports import (
    Clock,
    CrashPoints,
    FargateVcpuStore,
    JobStore,
    LimitStore,
    Metrics,
    NoMetrics,
    RunQueue,
    RunStore,
    Target,
    Targets,
    TargetSource,
    no_crash,
)
from jobsched.services.alerts import AlertService
from jobsched.services.dag import ONCE, DagService, root_schedule_of
from jobsched.services.dispatch import MAX_DELAY_SECONDS, jitter_offset
from jobsched.services.failures import LEASE_EXPIRED, FailureService
from jobsched.services.late import LateWatcher
from jobsched.services.limits import TenantQuotas
from jobsched.services.settle import settle_recorded
from jobsched.settings import Settings

logger = Logger(child=True)

# How long a worker that received a message early waits for its second (messages are delayed
# in whole seconds, rounded down); a longer gap means clock skew, and waiting longer would only
# hold the lease idle.
MAX_EARLY_WAIT_SECONDS = 2.0
MAX_RESULT_BYTES = 16 * 1024
MAX_ERROR_CHARS = 2000
# The skips the "skipped" alert reports (a "rescheduled" tick is an edit's doing, not a missed run).
ALERTED_SKIPS = {
    "overlap": "the previous run still held the job (overlap_policy skip)",
    "deadline": "it could not start within starting_deadline_seconds",
}
# A buffered tick's message sleeps at most this long before it looks again (its holder wakes it).
MAX_BUFFER_WAIT_SECONDS = 840
# A tick that finds the slot free but a sleeping buffered tick ahead of it wakes that one and looks
# again after this long.
WAKE_RETRY_SECONDS = 2
# How many times a worker writes an attempt's outcome before it leaves the record to a redelivery (the
# store failed each time: a throttle, a 500, a timeout). boto3 retries each call already; these are
# the calls that failed through that.
RECORD_TRIES = 4
# The lease owner and worker written on a run whose holder's start marker a later run took over
# (Worker._keep_dead_holders_start): its worker is not known, only that it died or stalled.
DEAD_HOLDER = "dead-holder"
# run_in_own_task's exit code when its attempt is not there to run (recorded, taken over, gone).
NOTHING_TO_RUN = 3
LOST_MESSAGE = "a worker died holding this run and the job is not idempotent: not re-run automatically"
CANCELLED_LOST = (
    "a worker died after this run started, before recording it; the job was cancelled since: not re-run"
)
CANCEL_REQUESTED_LOST = (
    "this run's cancel was asked after it started, and its worker ended before recording it: not re-run"
)


class Outcome(StrEnum):
    """What processing one message did."""

    PAUSED = "paused"  # a tick of a pause: acknowledged, nothing written; the resume decides its fate
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DUPLICATE = "duplicate"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    LOST = "lost"
    SKIPPED = "skipped"
    REFUSED = "refused"  # from a sender the stack does not trust (domain.senders): nothing ran or was written
    WAITING = "waiting"  # its concurrency key was full: a delayed copy of the message carries the run
    SPARE = "spare"  # another message of the run holds it: a copy delayed past that hold stands by (_spare)
    FORWARDED = "forwarded"  # an ECS-placed run reached the Lambda worker: sent on to the ECS queue
    HANDED_OFF = "handed_off"  # a worker-pool run, queued in its pool (services/workers.py runs it)
    WATCHED = "watched"  # a LateWatch: "late" raised if its run had not started (services/late.py)


class InFlightElsewhere(Exception):
    """This very message is being processed by another receive; leave it in the queue."""


class LeaseLost(InFlightElsewhere):
    """Another worker took this run over (this one's lease had expired): leave the message alone.

    Acknowledging it would delete the message the taker is working on (SQS message ids survive
    redelivery), and a taker that then died would leave the run held with no message to revive it.
    """


class WaitBehind(InFlightElsewhere):
    """The tick waits behind the job's running run (overlap policy buffer_one); leave it queued."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One received SQS message."""

    message_id: str
    receipt_handle: str
    body: str


@dataclass
class Worker:
    """Executes runs from the execution queue."""

    jobs: JobStore
    runs: RunStore
    queue: RunQueue
    registry: Targets
    """The python target's handlers (TargetFactory.for_spec resolves a python spec the same way)."""
    settings: Settings
    clock: Clock
    failures: FailureService
    dag: DagService
    worker_id: str = field(default_factory=lambda: f"worker-{uuid.uuid4().hex[:12]}")
    crash: CrashPoints = no_crash
    sleep: object = time.sleep
    # Record a healthy run's outcome in one write (see _run_fast); False leases every run first,
    # as the worker always does for non-idempotent jobs and for takeovers (tests run both ways).
    fast_path: bool = True
    # Beat on a thread every lease/3 s of real time while a handler runs; False: only the handler's
    # ctx.heartbeat() beats (a simulation that plays time on its own clock drives it: tests/sim).
    heartbeat_thread: bool = True
    # Call a target with a timeout on a thread of its own, failed with Timeout past it; False: on the
    # calling thread, the timeout left to the target itself (a simulation whose processes are tasks
    # of its own loop: a thread of their own would leave the loop, and a crash there is no crash).
    timeout_thread: bool = True
    # Every other kind of target (http, lambda, sqs, sns, eventbridge, stepfunctions): the composition
    # root's TargetFactory. None: python targets only (an attempt of another kind fails, visibly).
    targets: TargetSource | None = None
    alerts: AlertService | None = None
    # Lateness, duration and outcome of each run (jobsched.telemetry): EMF on AWS.
    metrics: Metrics = field(default_factory=NoMetrics)
    # Concurrency-key slots (jobs with `concurrency` only). None: such a job's runs cannot start
    # here, so they wait (the composition root always gives one).
    limits: LimitStore | None = None
    # The tenants' quotas (cached): a tenant whose quota an operator set has its max_concurrent_runs
    # held as the tenant-wide key TENANT_KEY. None, or no quota set: no tenant-wide key (the fleet's
    # own limit, the worker mapping's MaximumConcurrency, bounds the tenant's runs with everyone's).
    quotas: TenantQuotas | None = None
    # False once this process counts as dead (the local stack's Lambda timeout): the heartbeat stops.
    alive: Callable[[], bool] = field(default=lambda: True)
    # Fargate vCPU reserved before an ECS-placed run starts (jobsched.domain.fargate_vcpu). None: no
    # reservation (a Lambda worker's runs never need one).
    fargate_vcpu: FargateVcpuStore | None = None
    # A worker-pool run (WorkerTarget) is not run here: it joins its pool's queue, where an external
    # worker takes it (services/workers.py WorkerPools.hand_off). None: such a run fails, visibly.
    hand_off: Callable[[Job, str, str], bool] | None = None
    # Whether a worker-pool run still holds its job's slot however long ago it was renewed (queued in
    # its pool, or on a live worker: WorkerPools.still_holds). None: a lapsed slot is taken over.
    pool_holds: Callable[[Job, str], bool] | None = None

    def process(self, delivery: Delivery) -> Outcome:
        """Run the message's run at most to one recorded result; raise to leave the message queued.

        First of all the run marks its start on its job, in one conditional write that also reads
        the job (see JobStore's start markers): the slot for one-offs and guarded recurring jobs,
        the count for every other run. A cancel is a compare-and-set on the same item, so either
        it sees this run and answers 409, or it won first and this run never starts.
        """
        if is_late_watch(delivery.body):  # not a run: a look at one (services/late.py)
            watch = LateWatch.model_validate_json(delivery.body)
            LateWatcher(self.jobs, self.runs, self.queue, self.alerts, self.clock).check(watch)
            return Outcome.WATCHED
        message = RunMessage.model_validate_json(delivery.body)
        if message.packed is not None:  # a packed job: no item of its own (jobsched.domain.packs)
            return self._process_packed(message, delivery)
        sf = message.scheduled_for
        now = self.clock.now()
        until = now + timedelta(seconds=self.hold_seconds())
        held = counted = started = False
        found_until: datetime | None = None  # a started run's marker's until, as this receive found it
        if message.guard and message.kind != "backfill":
            held, job = self.jobs.hold_and_read(
                message.job_id, run=sf, message=delivery.message_id, until=until, now=now
            )
            if not held and job is not None and sf in job.cancelled_runs:
                return self._run_cancelled(message, job, delivery)
            # The slot held by this very message already: a receive of it got past the hold and
            # died (a crash after the handler ran leaves no other trace on the fast path). The run
            # started: its gate (pause, edit, deadline, cancel) was passed then, and is not asked
            # again (see _process).
            started = job is not None and job.active_run == sf and job.active_message == delivery.message_id
            found_until = job.active_until if started and job is not None else None
            if started and job is not None and _live(job.active_until, now):
                if self._pool_took(job, sf):
                    # A worker-pool run's message whose receive handed it off and died before the
                    # ack: its pool renews the marker while the run lives, so it would bounce here
                    # until the run ended (toward the redrive queue). Its pool acknowledged the run
                    # (or recorded it): nothing is left for the message; the marker stays the pool's.
                    return Outcome.DUPLICATE
                # Not a dead receive's marker: a live one's (a heartbeat renews it; a dead receive's
                # lapses before its message surfaces again). SQS handed this very message out twice
                # at once: leave this copy to its visibility. Run beside its twin, its end freed the
                # slot while the twin ran (an overlap; a cancel answered 200 mid-run: seed 24).
                raise InFlightElsewhere(delivery.message_id)
            if held and job is not None and job.active_run not in (None, sf):
                if self._pool_keeps(job, taker=(sf, delivery.message_id)):
                    held = False  # the slot is its pool run's again: this tick meets it busy
                elif not self._keep_dead_holders_start(job):
                    self._hand_back(job, sf, delivery)
            if job is not None and not started:
                started = self._displaced(job, sf, delivery, held=held)
            elif started and held and job is not None and job.displaced_run not in (None, sf):
                # An earlier receive of this message took the slot over from that holder and died
                # before keeping its start, or its answer failed (a timeout after the write): keep it
                # now, the trace is gone once this hold's write records the message itself.
                self._keep_start(job, job.displaced_run or "", job.displaced_message, renewed=None)
        else:
            counted, job = self.jobs.count_and_read(
                message.job_id, run=sf, message=delivery.message_id, until=until, now=now
            )
            if not counted and job is not None and sf in job.cancelled_runs:
                return self._run_cancelled(message, job, delivery)
            # The same for a counted run: its own in-flight entry, left by a receive that got past
            # the count and died (lapsed), or by a twin that runs now (live: leave this copy).
            entry = job.in_flight.get(in_flight_key(sf, delivery.message_id)) if job else None
            started = entry is not None
            found_until = entry
            if entry is not None and _live(entry, now):
                raise InFlightElsewhere(delivery.message_id)
        if job is not None and not started:
            started = self._copy_started(job, sf, delivery, now=now, held=held, counted=counted)
        if job is not None and not started and self._placed_elsewhere(job):
            return self._forward(message, job, held=held, counted=counted, message_id=delivery.message_id)
        scope = run_scope(
            job_id=message.job_id,
            run_id=run_id_for(message.job_id, times.parse_stored(sf)),
            tenant=job.tenant if job else None,
        )
        try:
            with scope:  # every line logged during the run carries its keys
                outcome, settled = self._process(message, job, delivery, held=held, started=started)
        except InFlightElsewhere:
            # Another receive of this very message (SQS redelivers one whose visibility ran out),
            # or the worker that took the run over, holds the run and its slot: the slot stays.
            self._give_back(
                job, sf, delivery, held=False, counted=counted, started=started, until=found_until
            )
            raise
        except Exception:
            # Held up front, then an error (or a wait): give it back. (A run that got past its gate
            # released it already; a second release is a refused no-op.) A process death, a
            # BaseException, gives nothing back: the markers lapse with their leases, as on AWS.
            self._give_back(job, sf, delivery, held=held, counted=counted, started=started, until=found_until)
            raise
        if held and job is not None and not settled:
            self._release(job, sf)  # held for a tick that did not start
        if counted:
            self.jobs.uncount(message.job_id, run=sf, message=delivery.message_id)
        self.metrics.emit(telemetry.runs(outcome.value), 1, telemetry.COUNT)
        return outcome

    # -- packed one-offs (jobsched.domain.packs) ------------------------------------------------------
    def _process_packed(self, message: RunMessage, delivery: Delivery) -> Outcome:
        """A packed job's run: its definition rides in the message, and its run row is its only state.

        The start is one conditional write on the run row (PersistRunning: no row or a PENDING one ->
        RUNNING under this worker's lease), before the handler: it is the run's start marker, which a
        cancel sees (a cancel copies the job out first, and flags this row: the write is then refused,
        and the job item's path takes the run), and one run per (job, tick) whatever the copies. The
        outcome is the second write. A job copied out since its message was sent is run by the job
        item's path: the message is handled as an ordinary one.

            wait for the second ── start: PENDING|none -> RUNNING ── refused ──> _packed_refused
                                        │ applied
                                        v
            handler (heartbeat: the message, the lease) ── record ── FAILED: the failure workflow
        """
        definition = PackedDefinition.model_validate(message.packed)
        job = definition.job()
        sf = message.scheduled_for
        scope = run_scope(
            job_id=job.job_id, run_id=run_id_for(job.job_id, times.parse_stored(sf)), tenant=job.tenant
        )
        with scope:
            keys = self._keys(job, message.cap)
            reason = self._take_keys(job, keys, sf, delivery)
            if reason is not None:
                return self._wait_for_key(message, job, delivery, reason=reason)
            try:
                outcome = self._run_packed(message, job, delivery)
            finally:
                self._free_keys(job, [k for k, _, _ in keys], sf, delivery)
        self.metrics.emit(telemetry.runs(outcome.value), 1, telemetry.COUNT)
        return outcome

    def _run_packed(self, message: RunMessage, job: Job, delivery: Delivery) -> Outcome:
        sf = message.scheduled_for
        created = NewRun(job.job_id, job.tenant, sf, message.kind)
        self._wait_for_second(sf)
        started = self.clock.now()
        lease = self._lease(delivery, now=started)
        owner = lease.owner
        start = self.runs.persist_running(
            job.job_id, sf, lease=lease, started_at=started, now=started, create=created, packed=True
        )
        if not start.applied:
            return self._packed_refused(message, job, start.row, delivery, created)
        previous = start.previous
        attempt = (previous.attempt if previous else 0) + 1
        replays = previous.replays if previous else 0
        self.crash("run.after_lease")
        self._started(sf, started, attempt=attempt, kind=message.kind)
        error, result, beat = self._execute(
            job, sf, delivery, attempt=attempt, owner=owner, persist=None, kind=message.kind, resume=previous
        )
        end = self._outcome(started, self.clock.now(), attempt, result, error)
        return self._record_held(
            job, sf, delivery, owner=owner, end=end, replays=replays, retry_after=beat.retry_after
        )

    def _lease(self, delivery: Delivery, *, now: datetime) -> Lease:
        """A lease on a run for this attempt (an owner of its own) and this delivery, for lease_seconds."""
        return Lease(
            owner=f"{self.worker_id}/{uuid.uuid4().hex[:8]}",
            message=delivery.message_id,
            worker=self.worker_id,
            until=now + timedelta(seconds=self.settings.lease_seconds),
        )

    def _packed_refused(
        self, message: RunMessage, job: Job, row: Execution | None, delivery: Delivery, created: NewRun
    ) -> Outcome:
        """The packed start was refused: the row as it stood says why.

        - flagged `materialized`: the job has an item of its own now; its path runs the message;
        - held under a lapsed lease (its worker died): taken over, as any run (_run_leased);
        - held live: by another copy of this message (left for its visibility), or by another
          message of the run (this copy is spare: _refused);
        - recorded: a duplicate; a recorded failure or a success of a copied-out job is settled."""
        if row is not None and row.materialized:
            ordinary = message.model_copy(update={"packed": None})
            return self.process(
                Delivery(
                    message_id=delivery.message_id,
                    receipt_handle=delivery.receipt_handle,
                    body=ordinary.model_dump_json(),
                )
            )
        now = self.clock.now()
        if row is not None and row.status in HELD and row.lease_until is not None and row.lease_until < now:
            return self._run_leased(job, message.scheduled_for, delivery, created, kind=message.kind, keys=[])
        return self._refused(job, row, delivery)

    def _settle_packed(self, job: Job, row: Execution) -> None:
        """A packed job's recorded run settled: a job copied out meanwhile through its item (its
        dependants, its policy, its status); otherwise a failure handed to the workflow, and a success
        left as it is (an unmaterialized packed job's status is its run row's: domain.packs.status_of)."""
        stored = self.jobs.get_job(job.job_id) if row.materialized else None
        if stored is not None:  # copied out: its item is the job (its dependants, its policy)
            settle_recorded(stored, row, failures=self.failures, dag=self.dag, now=self.clock.now())
        elif row.status == RunStatus.FAILED:
            self.failures.hand_over(job, row)

    def _give_back(
        self,
        job: Job | None,
        sf: str,
        delivery: Delivery,
        *,
        held: bool,
        counted: bool,
        started: bool,
        until: datetime | None,
    ) -> None:
        """Give back the slot (`held`) or the count (`counted`) this receive took, on its way out
        without a settled run.

        A run that started already (`started`: an earlier receive of this message got past its gate
        and died) keeps its marker, the only trace that the handler may have run on the fast path;
        given back, the next receive would meet the tick's gate as a fresh tick and could record
        SKIPPED a run that executed (tests/sim seeds 319, 1708). This receive renewed the marker, so
        it is put back lapsed (`until`, as found): left live, each receive would renew it again and
        leave the message for good. Best effort: a failure leaves it to lapse with its until."""
        if job is None or not (held or counted):
            return
        if not started:
            if held:
                self._release(job, sf)
            if counted:
                self.jobs.uncount(job.job_id, run=sf, message=delivery.message_id)
            return
        lapsed = until if until is not None else self.clock.now()
        try:
            if counted:
                self.jobs.extend_count(job.job_id, run=sf, message=delivery.message_id, until=lapsed)
            else:
                self.jobs.extend_hold(job.job_id, run=sf, until=lapsed)
        except JobschedError as exc:
            logger.warning(
                "could not lapse a started run's marker",
                extra={"job_id": job.job_id, "sf": sf, "error": repr(exc)},
            )

    def _pool_keeps(self, old: Job, *, taker: tuple[str, str] | None = None) -> bool:
        """Whether the lapsed slot's holder is a worker-pool run its pool still has (queued, or on a
        live worker): then its markers are renewed and the slot stays the holder's, and this tick
        meets it busy (the overlap path), never beside it. `taker`: (run, message) of this receive,
        which took the slot over already (hold_and_read): it hands it back first.

            pool run A handed off (slot A, renewed only at the pool's reports and sweeps)
            no worker polls or heartbeats: the slot lapses after one hold
            tick B: hold_and_read takes the lapsed slot ──> ask the pool: A still queued?
                yes: restore_hold(A, taker B) ──> renew A's markers ──> B skipped / buffered
                no (A over, LOST, cancelled, never handed off): the takeover stands

        Cost per tick: nothing while the slot is live or free, or the job is not a pool job; at a
        lapsed pool holder (at most once per hold and job: the renewal makes it live again) the pool's
        reads (WorkerPools.still_holds: 1 to 3) and 1 to 3 conditional writes (the hand-back, the
        slot's and the key slots' renewal)."""
        holder = old.active_run
        if (
            self.pool_holds is None
            or holder is None
            or not isinstance(old.target, WorkerTarget)
            or _live(old.active_until, self.clock.now())
            or not self.pool_holds(old, holder)
        ):
            return False
        if taker is not None:
            run, message = taker
            until = self.clock.now() + timedelta(seconds=self.hold_seconds())
            if not self.jobs.restore_hold(
                old.job_id,
                run=holder,
                message=old.active_message or "",
                taker=run,
                taker_message=message,
                until=until,
            ):
                return False  # no longer this receive's to give back: the gate reads the slot again
        self.renew_handed_off(old, holder)
        return True

    def _displaced(self, job: Job, sf: str, delivery: Delivery, *, held: bool) -> bool:
        """Whether this message held the slot before a later tick took it over (Job.displaced_run,
        as the taker's write recorded it): a receive of it got past its hold and died, maybe after
        its fast-path handler ran, so the run started (see `started` in process).

        The taker keeps that start on the run's row (_keep_dead_holders_start), unless its receive
        failed first: a hold whose answer timed out after the write, and the redelivery, finding the
        slot live in the taker's hands and a PENDING row, wrote SKIPPED "overlap" over a run that
        executed (tests/sim seeds 603, 5978, 6757, 8442). Keep it here then, when the slot is not this
        receive's again: the row, RUNNING under a lapsed lease, makes the overlap gate leave the
        message waiting, and the run is taken over once the slot is free. Taken again (`held`), the
        slot is this run's start marker, as for a redelivery of a holder nobody displaced."""
        if job.displaced_run != sf or job.displaced_message != delivery.message_id:
            return False
        if not held and job.status != JobStatus.CANCELLED:
            self._keep_start(job, sf, delivery.message_id, renewed=None)
        return True

    def _copy_started(
        self, job: Job, sf: str, delivery: Delivery, *, now: datetime, held: bool, counted: bool
    ) -> bool:
        """Whether another message of this run (the dispatcher's second send, a wake-up copy, a
        copy of a run waiting for a key) left a lapsed start marker: the slot, or an in-flight
        entry. A receive of it got past its marker and died, maybe after its fast-path handler ran:
        the run started, as for a marker of this very message (see `started` in process).

        Only this message's own marker counted: the copy, meeting the tick's gate as a fresh tick
        (an edit, the starting deadline), wrote SKIPPED over a run that executed (tests/sim seeds
        533, 2486, 5660). A live marker of another message is a receive that runs now, and is left
        to the gate (a spare copy of the slot's holder is dropped there). When this receive holds
        no marker of its own after all (the slot is another tick's, or a buffered tick's turn), the
        start is kept on the run's row (RUNNING under a lapsed lease, as _keep_dead_holders_start
        writes it), so the overlap gate leaves the message waiting instead of skipping the run."""
        lapsed: list[tuple[str, datetime | None]] = []
        other_holder = job.active_run == sf and job.active_message not in (None, delivery.message_id)
        if other_holder and not _live(job.active_until, now):
            lapsed.append((job.active_message or "", job.active_until))
        for key, entry_until in job.in_flight.items():
            run, _, message = key.rpartition("#")
            if run == sf and message != delivery.message_id and not _live(entry_until, now):
                lapsed.append((message, entry_until))
        if not lapsed:
            return False
        if not (held or counted) and job.status != JobStatus.CANCELLED:
            message, renewed = lapsed[0]
            self._keep_start(job, sf, message, renewed=renewed)
        return True

    def _keep_dead_holders_start(self, old: Job) -> bool:
        """This run took over a slot that its holder never released, so the holder's start marker is
        gone: keep it on the holder's run row, if the holder did not record its run.

        A healthy run leaves its hold to lapse (a release would cost a write) and has recorded its
        end: nothing to do. A holder whose worker died, or stalled past its leases, before recording
        its run has its message redelivered later; with its marker replaced by this hold, that
        redelivery could not tell its run started, and met the tick's gate as a fresh tick: the next
        tick in the slot (SKIPPED), an edit (SKIPPED "rescheduled"), a cancel (CANCELLED), over a run
        that may have executed (tests/sim seeds 82, 114). Its row is moved PENDING (or absent) ->
        RUNNING under a lease that has lapsed already, as the holder's first heartbeat would have
        written it, so its redelivery takes it over as a retry, or records it LOST, like any run
        whose worker died. One eventually consistent read per takeover of an unreleased slot; the
        write only for a dead holder (a stale read of a finished row makes the write lose, harmless).
        True: the holder's start is safe (its row recorded, or kept now); False: both tries failed.
        """
        assert old.active_run is not None
        holder, message = old.active_run, old.active_message
        return self._keep_start(old, holder, message, renewed=old.active_until, revive=True)

    def _hand_back(self, old: Job, sf: str, delivery: Delivery) -> None:
        """This receive took over a dead holder's slot and could not keep the holder's start on its
        row (the store failed both tries): give the slot back to the holder, lapsed as it was, and
        leave this message for a later receive. Going on would leave the displaced record
        (Job.displaced_run) as the one trace of the holder's start, and the next takeover overwrites
        it (tests/sim seed 3369):

            12:03:00 runs its handler, dies ── 12:03:50 takes its slot, its keep fails twice
            ── 12:04:00 takes the slot from 12:03:50 (displaced: 12:03:50), its answer times out
            ── 12:03:00's redelivery finds no marker of its own: SKIPPED "overlap" over a run that ran

        Given back, the slot is the holder's marker again, and the next taker keeps its start anew.
        A failed hand-back leaves the displaced record as the one trace, as before."""
        holder = old.active_run or ""
        with contextlib.suppress(JobschedError):
            self.jobs.restore_hold(
                old.job_id,
                run=holder,
                message=old.active_message or "",
                taker=sf,
                taker_message=delivery.message_id,
                until=old.active_until or self.clock.now(),
            )
        raise TransientStoreError(f"could not keep the start of run {holder}, whose slot this tick took")

    def _keep_start(
        self, job: Job, holder: str, message: str | None, *, renewed: datetime | None, revive: bool = False
    ) -> bool:
        """The run `holder` (carried by `message`) started and its worker died or stalled: unless its
        row is recorded, move it PENDING (or absent) -> RUNNING under a lapsed lease (see
        _keep_dead_holders_start). `renewed`: its hold's last until, when known. True: its start is
        safe (its row recorded, or RUNNING now); False: the store failed both tries.

        `revive`: this receive carries another run, so the holder's own message is the only one that
        can finish the kept run, and it may be gone: a twin receive of it (SQS handed it out twice)
        stopped at the run's gate and acknowledged it, while the other's hold outlived it (its
        release failed, or its hold's answer timed out after the write). The kept row then stayed
        RUNNING with nothing to take it over (tests/sim seeds 2521, 5050). So the kept start gets a
        copy of the holder's message, delayed past the visibility timeout: the holder's own
        redelivery, if it comes, settles the run first and the copy is a duplicate; else the copy
        takes the run over (or records it LOST). One send, only where the row was kept now."""
        now = self.clock.now()
        owner = f"{DEAD_HOLDER}/{message}"
        for attempt in (1, 2):  # best effort: a failed try is tried once more, then logged
            try:
                row = self.runs.get(job.job_id, holder, consistent=False)
                if row is not None and row.status != RunStatus.PENDING:
                    # Recorded: its row tells its redelivery how it ended, or that it started. (Or
                    # this receive's first try kept it, and its answer was lost: revive it now.)
                    if revive and attempt == 2 and _held_by(row, owner) is not None:
                        self._revive(job, holder, row.kind)
                    return True
                # When it was last seen alive: the hold's last renewal (its start is not known).
                seen = now if renewed is None else renewed - timedelta(seconds=self.hold_seconds())
                lease = Lease(owner=owner, message=message or "", worker=DEAD_HOLDER, until=now)
                kept = self.runs.persist_running(
                    job.job_id,
                    holder,
                    lease=lease,
                    started_at=min(seen, now),
                    now=now,
                    create=NewRun(job.job_id, job.tenant, holder),
                )
                if revive and kept.applied:
                    self._revive(job, holder, row.kind if row is not None else "scheduled")
                return True
            except JobschedError as exc:
                if attempt == 2:
                    logger.warning(
                        "could not keep a dead holder's start on its run",
                        extra={"job_id": job.job_id, "sf": holder, "error": repr(exc)},
                    )
        return False

    def _revive(self, job: Job, sf: str, kind: str) -> None:
        """A copy of the message of the run `sf`, whose start was kept on its row (see _keep_start),
        delayed past the visibility timeout. Sent after the row's write, so the copy always finds
        the run RUNNING (as a copy sent first could find it PENDING and skip a run that executed)."""
        self.crash("run.before_revive_send")
        guard = takes_slot(job.type, job.policy.overlap_policy)
        fields = {"job_id": job.job_id, "scheduled_for": sf, "kind": kind, "guard": guard}
        copy = RunMessage.model_validate(fields)
        self.queue.send([Outgoing(copy, min(MAX_DELAY_SECONDS, self.settings.lease_seconds))])

    def _process(
        self, message: RunMessage, job: Job | None, delivery: Delivery, *, held: bool, started: bool
    ) -> tuple[Outcome, bool]:
        """(what happened, whether the run got past its gate: then its hold is dealt with here).

        `started`: a receive of this message held the slot and died. A run that executed is recorded
        as executed, so its redelivery never writes SKIPPED or CANCELLED over it: it runs again (at
        least once, under the same effect key) on a live job; on a job cancelled since (the cancel
        went through once the dead receive's marker lapsed) it is recorded LOST, as for a
        non-idempotent takeover: it may have run, and a cancelled job starts nothing.
        """
        sf = message.scheduled_for
        if job is None or job.status == JobStatus.CANCELLED:
            if started and job is not None:
                return self._lost_to_cancel(job, sf, delivery, kind=message.kind), False
            return self._cancelled(message, job, delivery), False
        # Backfills are an operator's explicit, rate-limited request for past ticks: no gate. A manual
        # run honours the overlap policy only.
        kind = message.kind
        gate = (
            None
            if kind == "backfill"
            else self._gate(job, sf, delivery, kind=kind, held=held, started=started)
        )
        if gate is not None:
            return gate, False
        holds = self._holds_slot(job, kind)
        keys = self._keys(job, message.cap)
        full = self._take_keys(job, keys, sf, delivery)
        if full is None:
            full = self._reserve_vcpu(job, sf)
            if full is not None:
                self._free_keys(job, [k for k, _, _ in keys], sf, delivery)
        if full is not None:
            # A receive of this run got past its gate and died, maybe after its handler ran: its
            # proof is a marker of this message (or a lapsed one of another), and the wait's
            # delayed copy is a new message, whose receive would meet no marker of its own and
            # pass the gate as a fresh tick: it wrote SKIPPED (an edit) or a run cancel wrote
            # CANCELLED over a run that executed (tests/sim KEY_SEEDS 128, 137, 530). Keep the
            # start on the row first (RUNNING under a lapsed lease, as _keep_dead_holders_start
            # writes it): the copy then takes the run over, or records it LOST, like any run
            # whose worker died. Not kept (the store failed both tries), the wait would drop the
            # receive's marker, the one proof of the start, and a cancel wrote CANCELLED over the
            # run that executed (tests/sim seed 5797): leave the message, its marker kept lapsed.
            if started and not self._keep_start(job, sf, delivery.message_id, renewed=None):
                raise TransientStoreError(f"could not keep the start of run {sf} before its key wait")
            if holds:
                self._release(job, sf)
            return self._wait_for_key(message, job, delivery, reason=full), holds
        # Released on a failure and on every way out but a process death (BaseException: Crash,
        # SystemExit), which releases nothing: the hold then expires with its lease, as on AWS. A
        # success releases when a tick may be waiting for the slot (buffer_one always; skip when the
        # hold would still be live at the job's next tick); a one-off's completion frees it.
        try:
            outcome = self._run(job, sf, delivery, kind=message.kind, keys=[k for k, _, _ in keys])
        except InFlightElsewhere:
            raise  # the run's holder keeps the slot (see process), and its keys' (the same holder)
        except Exception:
            self._free_keys(job, [k for k, _, _ in keys], sf, delivery)
            self._release_vcpu(job, sf)
            if holds and not started:  # a started run's hold is its start marker (see process)
                self._release(job, sf)
            raise
        if outcome == Outcome.HANDED_OFF:
            # The run is its pool's now: its slot and key slots stay held until the pool settles it
            # (WorkerPools renews them at its reports and releases them after settling).
            return outcome, True
        self._free_keys(job, [k for k, _, _ in keys], sf, delivery)
        self._release_vcpu(job, sf)
        if holds and outcome == Outcome.SUCCEEDED and job.type == "one_off":
            return outcome, True  # the job's COMPLETED write freed the slot
        if holds and (
            outcome != Outcome.SUCCEEDED
            or job.policy.overlap_policy == "buffer_one"
            or self._next_tick_within_hold(job, sf)
        ):
            self._release(job, sf)
        return outcome, holds

    def _cancelled(self, message: RunMessage, job: Job | None, delivery: Delivery) -> Outcome:
        """The job was cancelled before this run started: the run never starts, and says so.

        A run whose worker died mid-run (LEASED/RUNNING, its lease expired: the cancel could then go
        through) is recorded LOST (_lost_to_cancel): it may have run. (It used to stay RUNNING forever,
        its message acknowledged, since RUNNING -> CANCELLED is no edge; then it was swept CANCELLED.)
        """
        kind = message.kind
        row = self.runs.get(message.job_id, message.scheduled_for) if job is not None else None
        if job is not None and row is not None and row.status in HELD:
            # RUNNING: its worker passed LEASED -> RUNNING and called the handler, then died (its
            # lease lapsed, so the cancel went through). It may have run: LOST, not CANCELLED.
            # LEASED as well: a claim got past the run's gate, and the row cannot tell whether a
            # handler ran before it. The claim may be a takeover of a RUNNING run that never recorded
            # (a dead or stalled fast-path holder: its start kept on the row), or a redelivery of a
            # message whose earlier receive ran the handler on the fast path, that one's only trace
            # (its slot marker) taken by a later tick since; the claimant then died or left before
            # its start (tests/sim seeds 83, 1422, 8173, 8765, 9573: such rows written CANCELLED).
            return self._lost_to_cancel(job, message.scheduled_for, delivery, kind=kind)
        if job is not None and row is not None and row.status == RunStatus.FAILED:
            # Its failure recorded, its worker died before handing it to the workflow, and a later
            # run took the slot where its start marker was: hand it over here, as _refused does
            # (nothing else would: stuck FAILED, tests/sim seed 4).
            return self._refused(job, row, delivery)
        done = self.runs.cancel(
            message.job_id,
            message.scheduled_for,
            now=self.clock.now(),
            create=None if job is None else NewRun(job.job_id, job.tenant, message.scheduled_for, kind),
        )
        if job is not None and not done.applied and done.row is not None and done.row.status in HELD:
            # LEASED under a live lease: a receive that claimed the run, then failed before the
            # handler (its claim's answer timed out, and its slot was given back, so the cancel went
            # through). Acknowledged here, the message would leave the row LEASED for good (tests/sim
            # seed 6879): left to its visibility if the lease is this message's (its next receive
            # finds it lapsed and cancels the run), else a spare (_spare).
            return self._refused(job, done.row, delivery)
        return Outcome.CANCELLED

    def _run_cancelled(self, message: RunMessage, job: Job, delivery: Delivery) -> Outcome:
        """A run cancel of this run (POST /api/runs/{id}/cancel) came first: its start marker's write
        was refused (Job.cancelled_runs), so it never starts here.

        The cancel found no marker of it: it is CANCELLED (the cancel writes that row too, but may die
        before: this is the write that no cancel answered 200 without). It found one (a receive of
        the run had got past its marker: the row is PENDING and marked, or held): that receive's
        outcome, or LOST when it died (its markers lapsed), as a redelivery of a marked run records.
        A cancel answered CANCELLED used to be met by a receive that wrote its marker between the
        cancel's read of the job and its write of the row, or read that row stale, and ran the
        handler (tests/sim seed 80): both now write on the job item, where one of them wins."""
        sf = message.scheduled_for
        row = self.runs.get(job.job_id, sf)
        if row is not None and row.status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
            # The receive that got past its marker before the cancel recorded the run, and may have
            # died before settling it: settle it (idempotent), as a duplicate of a recorded run does.
            # Answered CANCELLED instead, a success's dependants were never signalled and a one-off
            # never COMPLETED (tests/sim KEY_SEEDS 165: a DAG's dependant left without a run).
            settle_recorded(job, row, failures=self.failures, dag=self.dag, now=self.clock.now())
            return Outcome.DUPLICATE
        if row is not None and row.status == RunStatus.PENDING and row.cancel_requested_at is not None:
            if sf in live_runs(job, self.clock.now()):
                raise InFlightElsewhere(delivery.message_id)  # it runs: its receive records it
            return self._lost_to_cancel(job, sf, delivery, kind=message.kind)
        if job.buffered_run == sf and _live(job.buffered_until, self.clock.now()):
            # A buffered tick (buffer_one) gives its turn up, its wait ended: left live, the next
            # tick would wait behind a run that never starts until that wait ran out.
            ended = self.clock.now() - timedelta(milliseconds=1)
            kind = job.buffered_kind or message.kind
            try:
                self.jobs.buffer_behind(job.job_id, run=sf, kind=kind, until=ended, now=self.clock.now())
            except JobschedError as exc:
                logger.warning("could not end a cancelled run's wait", extra={"sf": sf, "error": repr(exc)})
        return self._cancelled(message, job, delivery)

    def _lost_to_cancel(self, job: Job, sf: str, delivery: Delivery, *, kind: str) -> Outcome:
        """A run that started, whose worker died before recording it, on a job cancelled since:
        LEASED (a claim: no row, PENDING, or a dead holder's lapsed lease) -> LOST. Not run again."""
        now = self.clock.now()
        lease = self._lease(delivery, now=now)
        owner = lease.owner
        claim = self.runs.claim(
            job.job_id, sf, lease=lease, now=now, create=NewRun(job.job_id, job.tenant, sf, kind)
        )
        if not claim.applied:
            # Recorded already: finished, lost by another copy, or FAILED by the dead receive before
            # it handed the failure over (then hand it over here: nothing else would, seed 48).
            return self._refused(job, claim.row, delivery)
        self.runs.lose(job.job_id, sf, owner=owner, now=self.clock.now(), error=("LeaseLost", CANCELLED_LOST))
        return Outcome.LOST

    @staticmethod
    def _key_holder(job: Job, sf: str, delivery: Delivery) -> str:
        """The run's holder in its key's set: a redelivery of the message (a dead receive's) is the
        same holder, so it takes its own slot back instead of a second one. A worker-pool run's
        holder names no message: its pool renews and releases the slot (pool_key_holder), and a
        retry's new message takes the same slot back."""
        if isinstance(job.target, WorkerTarget):
            return pool_key_holder(sf)
        return f"{sf}#{delivery.message_id}"

    def _keys(self, job: Job, cap: int | None = None) -> list[tuple[str, int, str]]:
        """(key, limit, wait reason) of each key the run needs a slot of: its job's concurrency key,
        then the tenant-wide TENANT_KEY (max_concurrent_runs) when an operator set the tenant's quota:
        as the dispatcher's message carries it (`cap`, RunMessage.cap: no read here), else as
        TenantQuotas' cached read has it (one read per tenant per 30 s per warm worker)."""
        keys = []
        if job.concurrency is not None:
            keys.append((job.concurrency.key, job.concurrency.limit, wait_reason(job.concurrency)))
        if cap is not None:
            limit = cap
        else:
            quota = self.quotas.set_for(job.tenant) if self.quotas is not None else None
            limit = 0 if quota is None else quota.max_concurrent_runs
        if limit:
            keys.append((TENANT_KEY, limit, tenant_wait_reason(limit)))
        return keys

    def _take_keys(
        self, job: Job, keys: list[tuple[str, int, str]], sf: str, delivery: Delivery
    ) -> str | None:
        """A slot of every key for this run, until the hold's end (renewed by beats); None when all
        are taken, else the first full key's wait reason (the slots taken before it are given back)."""
        taken: list[str] = []
        for key, limit, reason in keys:
            now = self.clock.now()
            if self.limits is None or not self.limits.acquire(
                job.tenant,
                key,
                holder=self._key_holder(job, sf, delivery),
                limit=limit,
                until=now + timedelta(seconds=self.hold_seconds()),
                now=now,
            ):
                self._free_keys(job, taken, sf, delivery)
                return reason
            taken.append(key)
        return None

    def _free_keys(self, job: Job, keys: list[str], sf: str, delivery: Delivery) -> None:
        if self.limits is not None:
            for key in keys:
                self.limits.release(job.tenant, key, holder=self._key_holder(job, sf, delivery))

    def _reserves_vcpu(self, job: Job) -> bool:
        """Whether this worker reserves Fargate vCPU for the job's runs: it is the ECS worker and the
        job is placed on ECS (domain.compute)."""
        return (
            self.fargate_vcpu is not None
            and self.settings.worker_lane == "ecs"
            and job.placement().runs_on == "ecs"
        )

    def _reserve_vcpu(self, job: Job, sf: str) -> str | None:
        """Reserve the run's placed CPU in the account's and the tenant's scopes; None when reserved
        (or none is needed), else the wait reason of the first full scope."""
        if not self._reserves_vcpu(job):
            return None
        assert self.fargate_vcpu is not None
        quota = self.quotas.set_for(job.tenant) if self.quotas is not None else None
        chosen = vcpu_scopes(
            self.settings.fargate_vcpu_quota, job.tenant, quota.max_fargate_cpu if quota else None
        )
        now = self.clock.now()
        # Lapses once the run's timeout has passed (its task is stopped by then), with slack.
        lasts = (job.retry.timeout_seconds or MAX_RUN_SECONDS) + LAPSE_SLACK_SECONDS
        full = self.fargate_vcpu.reserve(
            run_id_for(job.job_id, times.parse_stored(sf)),
            cpu=job.placement().resources.cpu,
            scopes=chosen,
            until=now + timedelta(seconds=lasts),
            now=now,
        )
        return None if full is None else vcpu_wait_reason(full)

    def _release_vcpu(self, job: Job, sf: str) -> None:
        """Give the run's reservation back (a run that holds none: nothing happens). Best effort: a
        failure leaves it to lapse at its timeout."""
        if not self._reserves_vcpu(job):
            return
        assert self.fargate_vcpu is not None
        try:
            self.fargate_vcpu.release(run_id_for(job.job_id, times.parse_stored(sf)))
        except JobschedError as exc:
            logger.warning(
                "could not release a vCPU reservation", extra={"job_id": job.job_id, "error": repr(exc)}
            )

    def _wait_for_key(self, message: RunMessage, job: Job, delivery: Delivery, *, reason: str) -> Outcome:
        """A key is full: the wait goes on the run's row, and a delayed copy of the message carries
        the run (this one is acknowledged: waits use up no receives toward the redrive queue)."""
        sf = message.scheduled_for
        waits = self.runs.note_wait(
            job.job_id,
            sf,
            reason=reason,
            now=self.clock.now(),
            create=NewRun(job.job_id, job.tenant, sf, message.kind),
        )
        if waits is None:
            # The run is over (recorded by another copy of its message): this copy is spare, and
            # leaves none behind. Before, a finished run's copies waited on for as long as its key
            # stayed full (tests/sim KEY_SEEDS 890). It settles the record first (_settle_found).
            self._settle_found(job, self.runs.get(job.job_id, sf))
            return Outcome.DUPLICATE
        self.crash("run.before_key_wait_send")
        self.queue.send([Outgoing(message, key_wait_seconds(waits))])
        self.crash("run.after_key_wait_send")
        return Outcome.WAITING

    def _placed_elsewhere(self, job: Job) -> bool:
        """Whether this is the Lambda worker and the job's runs belong on the ECS worker (domain.compute).

        The dispatcher sends such runs to the ECS queue itself; every other sender (a run-now, a
        retry or a DAG release from a workflow, a wake-up) sends to the execution queue, and the
        Lambda worker passes them on here rather than run what Lambda would kill at its timeout.
        """
        lane = self.settings.worker_lane
        return lane == "lambda" and bool(self.settings.ecs_queue_url) and job.placement().runs_on != lane

    def _in_own_task(self, job: Job) -> bool:
        """Whether this is the ECS worker and the job is a Python run placed bigger than its task
        (domain.compute.needs_own_task): it runs in a Fargate task of its own (run_in_own_task)."""
        if self.settings.worker_lane != "ecs" or not isinstance(job.target, PythonTarget):
            return False
        placement = job.placement()
        return placement.runs_on == "ecs" and needs_own_task(placement.resources)

    def run_in_own_task(self, run_id: str, attempt: int) -> int:
        """Run one attempt of a Python run in this process, a task of its own that the ECS worker
        holding the run's lease started (`python -m jobsched.ecsworker --run`); answers the exit code.

            read the job and the run row (consistent): RUNNING on `attempt`, under a lease?
                │ no ──> exit NOTHING_TO_RUN: recorded already, taken over, or gone; nothing ran
                v
            the handler, through the run path's _call, with a RunContext on that lease (progress and
                checkpoints written under it, ctx.last_checkpoint from the row, ctx.cancelled read
                at each ctx.heartbeat()); the lease itself is the ECS worker's to renew
                v
            record the attempt under that lease (its real result or error), then settle it (a
                failure handed to the failure workflow, a success settled): as a task's stop event
                records (services/task_events.py), the first recorder wins
                │ the store failed through every try ──> exit RAN_UNRECORDED: its readers record
                │     TaskLost (the outcome is unknown: retried only for an idempotent job)
                v
            exit 0 if the handler succeeded, else 1

        Who records: this process, first, with the handler's own result or error. The ECS worker's
        poll (or the task's stop event) sees the task STOPPED and records from its exit code only if
        this record did not apply (it died before it, or the store failed): its own record is then
        refused, and it finds the attempt recorded under its lease (_recorded_for_us), settles again
        (a no-op) and frees the run's markers and vCPU. One record per attempt, whoever writes it.

        Crash points:
            the task dies before its record -> STOPPED with no exit code (TaskLost) or a code: the
                worker's poll or the stop event records that, and the job's policy retries it
            the task dies after its record, before settling -> the worker settles it when it finds
                the attempt recorded (or the redelivery's _refused hands it over)
            the worker dies while the task runs -> the task still records under the dead worker's
                lease unless a takeover leased the run since (then its record is refused and the
                takeover's attempt, a task of its own, stands): at least once, under one effect key
        """
        job_id, scheduled_for = parse_run_id(run_id)
        sf = times.stored(scheduled_for)
        job = self.jobs.get_job(job_id)
        row = self.runs.get(job_id, sf, consistent=True)
        if (
            job is None
            or row is None
            or row.status != RunStatus.RUNNING
            or row.attempt != attempt
            or row.lease_owner is None
            or not isinstance(job.target, PythonTarget)
        ):
            logger.warning("nothing to run in this task", extra={"run_id": run_id, "attempt": attempt})
            return NOTHING_TO_RUN
        owner = row.lease_owner
        cancel = {"requested": row.cancel_requested_at is not None}

        def beat() -> None:  # the lease is the ECS worker's; a beat here reads the cancel mark
            try:
                cancel["requested"] = cancel_marked(self.runs, job_id, sf)
            except JobschedError as exc:  # the beat's failure, not the handler's: the next one reads again
                logger.warning("could not read the cancel mark", extra={"run_id": run_id, "error": repr(exc)})

        def note(progress: str | None, checkpoint: str | None) -> bool:
            return self.runs.save_progress(
                job_id, sf, owner=owner, now=self.clock.now(), progress=progress, checkpoint=checkpoint
            )

        context = RunContext(
            job_id=job_id,
            run_id=run_id,
            tenant=job.tenant,
            scheduled_for=scheduled_for,
            attempt=attempt,
            effect_key=run_id,
            beat=beat,
            cancel_requested=lambda: cancel["requested"],
            note=note,
            last_checkpoint=row.checkpoint,
        )
        started = row.started_at or self.clock.now()
        result, error, _ = self._call(job, context, self.registry.target(job.target.handler))
        self.crash("run.own_task_after_handler")
        end = self._outcome(started, max(started, self.clock.now()), attempt, result, error)
        try:
            done = self._record(lambda: self.runs.record(job_id, sf, owner=owner, end=end), end)
        except StoreError as exc:
            # The handler ran: exit 1 would read as ExitCode, and the retry policy would run a job
            # that is not idempotent again after its effect. Its readers record this code TaskLost.
            logger.error("the handler ran and its attempt could not be recorded", extra={"error": repr(exc)})
            return RAN_UNRECORDED
        if done.applied:
            self.crash("run.own_task_after_record")
            recorded = self.runs.get(job_id, sf, consistent=True)
            if recorded is not None:
                settle_recorded(job, recorded, failures=self.failures, dag=self.dag, now=end.finished_at)
        return 0 if error is None else 1

    def _forward(
        self, message: RunMessage, job: Job, *, held: bool, counted: bool, message_id: str
    ) -> Outcome:
        """Give back the start marker, then send the run on to the ECS queue; the caller acknowledges.

            release the slot / uncount ──> send to the ECS queue ──> ack this message
            crash before the send: this message comes back (lease) and is forwarded again
            crash after the send, before the ack: two copies on the ECS queue, the second a duplicate

        The marker goes first: the ECS worker's copy is another message, and a slot still held by
        this one would make that copy look like a spare duplicate of a live holder (and be dropped).
        """
        sf = message.scheduled_for
        if held:
            self._release(job, sf)
        if counted:
            self.jobs.uncount(message.job_id, run=sf, message=message_id)
        self.queue.send([Outgoing(message, 0, lane=job.placement().runs_on)])
        self.metrics.emit(telemetry.runs(Outcome.FORWARDED.value), 1, telemetry.COUNT)
        return Outcome.FORWARDED

    def hold_seconds(self) -> int:
        return hold_seconds(self.settings.lease_seconds)

    def _pool_took(self, job: Job, sf: str) -> bool:
        """Whether `sf` is a worker-pool run its pool acknowledged or recorded (so its hand-off is
        done). PENDING is no proof: a twin receive may be between its hold and its hand-off."""
        if self.hand_off is None or not isinstance(job.target, WorkerTarget):
            return False
        row = self.runs.get(job.job_id, sf)
        return row is not None and row.status in (*HELD, RunStatus.SUCCEEDED, RunStatus.FAILED)

    def renew_handed_off(self, job: Job, sf: str) -> None:
        """Push the slot and the key slots a handed-off run holds to a hold's end from now (its
        pool's reports: a pool run holds them while its worker lives). A marker the run does not
        hold is left alone (the store refuses the write)."""
        until = self.clock.now() + timedelta(seconds=self.hold_seconds())
        if self.limits is not None:
            for key, _, _ in self._keys(job):
                self.limits.extend(job.tenant, key, holder=pool_key_holder(sf), until=until)
        if self._holds_slot(job, "scheduled"):
            self.jobs.extend_hold(job.job_id, run=sf, until=until)

    def release_handed_off(self, job: Job, sf: str) -> None:
        """Free the key slots and the slot of a handed-off run its pool settled (or lost), and wake
        the tick buffered behind it."""
        if self.limits is not None:
            for key, _, _ in self._keys(job):
                self.limits.release(job.tenant, key, holder=pool_key_holder(sf))
        if self._holds_slot(job, "scheduled"):
            self._release(job, sf)

    def _next_tick_within_hold(self, job: Job, sf: str) -> bool:
        """Whether the job's next tick may start while this run's (unreleased) hold is still live."""
        if job.cron_expr is None:
            return True
        following = cron.parse(job.cron_expr, job.timezone).next_after(times.parse_stored(sf))
        return following <= self.clock.now() + timedelta(seconds=self.hold_seconds())

    @staticmethod
    def _holds_slot(job: Job, kind: str) -> bool:
        """Whether this run holds the job's slot (else it is counted): see models.takes_slot."""
        return kind != "backfill" and takes_slot(job.type, job.policy.overlap_policy)

    def _release(self, job: Job, sf: str) -> None:
        """Free the slot `sf` holds, and wake the tick buffered behind it, if one waits."""
        old = self.jobs.release_job(job.job_id, run=sf)
        if old is None or old.buffered_run in (None, sf) or not _live(old.buffered_until, self.clock.now()):
            return
        assert old.buffered_run is not None
        self._wake(job.job_id, old.buffered_run, old.buffered_kind)

    def _wake(self, job_id: str, run: str, kind: str | None) -> None:
        """Send the buffered tick `run` a copy of its message, due now: the slot is free for it.

        The sleeping original stays queued (the durable carrier if this copy is lost); whichever
        copy comes second finds the run holding the slot or finished and is dropped.
        """
        message = RunMessage(job_id=job_id, scheduled_for=run, kind=kind or "scheduled", guard=True)
        self.queue.send([Outgoing(message, 0)])

    def _buffer_wait(self, job: Job) -> int:
        """How long a buffered tick's message sleeps: its holder wakes it on release, so this only
        bounds the wait when the waker died in between (the next tick to arrive wakes it, too)."""
        timeout = job.retry.timeout_seconds
        bound = MAX_BUFFER_WAIT_SECONDS if timeout is None else min(MAX_BUFFER_WAIT_SECONDS, timeout)
        return max(self.settings.lease_seconds, bound + self.settings.lease_seconds)

    def _gate(
        self, job: Job, sf: str, delivery: Delivery, *, kind: str, held: bool, started: bool = False
    ) -> Outcome | None:
        """Whether the tick may start now: paused job, rescheduled job, starting deadline, the slot.

        The overlap check is a compare-and-set on the job at the moment the run is about to start
        (ticks are handed over ahead of time, so this is the only moment that knows). A run that
        `started` (its dead receive passed this gate) only re-takes its slot.
        """
        now = self.clock.now()
        if not started:
            carrier = self._live_copy(job, sf, delivery, now=now)
            if carrier is not None:
                # Another message of this run carries it now (its live marker): this copy is spare,
                # whatever the tick's gate would say. Asked first, the gate's deadline wrote SKIPPED
                # over the run that other message was running (tests/sim KEY_SEEDS 83: a receive on
                # a clock behind met the live marker of a copy that ran the handler and died).
                return self._spare(delivery, until=carrier)
            decided = self._tick_gate(job, sf, delivery, kind=kind, held=held)
            if decided is not None:
                return decided
        policy = job.policy
        if not self._holds_slot(job, kind):
            return None
        until = now + timedelta(seconds=self.hold_seconds())
        buffered = job.buffered_run == sf
        if held and not buffered:
            return None
        msg = delivery.message_id
        if self.jobs.hold_job(job.job_id, run=sf, message=msg, until=until, now=now, was_buffered=buffered):
            return None
        current = self.jobs.get_job(job.job_id)
        if current is None or current.status == JobStatus.CANCELLED:
            cancelled = RunMessage(job_id=job.job_id, scheduled_for=sf, kind=kind)
            return self._cancelled(cancelled, current, delivery)
        if sf in current.cancelled_runs:  # a run cancel of it since its first hold: see process
            cancelled = RunMessage(job_id=job.job_id, scheduled_for=sf, kind=kind)
            return self._run_cancelled(cancelled, current, delivery)
        holder_live = current.active_run is not None and _live(current.active_until, now)
        if not holder_live and current.active_run not in (None, sf) and self._pool_keeps(current):
            holder_live = True  # a lapsed pool run's slot, renewed: busy (an unswept pool's run)
        if holder_live and current.active_run == sf and current.active_message != delivery.message_id:
            # Another copy of this very run's message holds the slot (a wake-up and its sleeping
            # original, a retry's message and a late receive of the deleted one): that copy carries
            # the run while it lives; this one is spare, and leaves a delayed copy behind in case the
            # holder's own message is gone (_spare: tests/sim seed 6925). (Never this message itself:
            # acknowledging it would leave the run with no message to finish or revive it.)
            return self._spare(delivery, until=current.active_until)
        stale = self._finished_holder(current) if holder_live else None
        if stale is not None and self.jobs.hold_job(
            job.job_id, run=sf, message=msg, until=until, now=now, was_buffered=buffered, stale=stale
        ):
            return None
        if job.type == "one_off":
            raise WaitBehind(delivery.message_id)  # nothing but its own copies holds a one-off's slot
        if policy.overlap_policy == "buffer_one":
            waiting = current.buffered_run
            if (
                waiting not in (None, sf)
                and _live(current.buffered_until, now)
                and (not holder_live or stale is not None)
            ):
                # The slot is free, but the tick buffered before this one owns the next turn and
                # sleeps (its waker died): wake it, and look again once it holds the slot.
                finished = self._finished(job, sf)
                if finished is not None:
                    self._settle_found(job, finished)
                    return Outcome.DUPLICATE
                assert waiting is not None
                self._wake(job.job_id, waiting, current.buffered_kind)
                self.queue.extend(delivery.receipt_handle, seconds=WAKE_RETRY_SECONDS)
                raise WaitBehind(delivery.message_id)
            wait = self._buffer_wait(job)
            claim_until = now + timedelta(seconds=wait + self.settings.lease_seconds)
            if self.jobs.buffer_behind(job.job_id, run=sf, kind=kind, until=claim_until, now=now):
                # The message sleeps until the holder's release wakes a copy of it (or `wait` ends).
                self.queue.extend(delivery.receipt_handle, seconds=wait)
                raise WaitBehind(delivery.message_id)
        skipped = self._skip(job, sf, "overlap", kind=kind, first_attempt_only=True)
        if skipped is not None:
            return skipped
        # A retry of a run that already started once is not dropped for overlap: it waits.
        raise WaitBehind(delivery.message_id)

    @staticmethod
    def _live_copy(job: Job, sf: str, delivery: Delivery, *, now: datetime) -> datetime | None:
        """The until of a live start marker of this run left by another of its messages (the slot,
        or an in-flight entry), as this receive read the job; None: there is none."""
        other = job.active_run == sf and job.active_message not in (None, delivery.message_id)
        if other and _live(job.active_until, now):
            return job.active_until
        for key, until in job.in_flight.items():
            run, _, message = key.rpartition("#")
            if run == sf and message != delivery.message_id and _live(until, now):
                return until
        return None

    def _tick_gate(self, job: Job, sf: str, delivery: Delivery, *, kind: str, held: bool) -> Outcome | None:
        """The tick's own gate, before the slot: a pause, an edit that moved the schedule, the
        starting deadline (an outcome that ends the message here), or None: it may start."""
        now = self.clock.now()
        manual = kind == "manual"
        if job.status == JobStatus.PAUSED and not manual and self._new_tick_of_pause(job, sf):
            early = (times.parse_stored(sf) - now).total_seconds()
            if early > 0:
                # Not due yet (SQS delays round down: a message surfaces up to a second early). A
                # resume before its second replans only the ticks already missed and counts on this
                # very message for this one: leave it queued until it is due (acknowledged, the
                # tick would be lost).
                if held:
                    self._release(job, sf)
                self.queue.extend(delivery.receipt_handle, seconds=math.ceil(early))
                raise WaitBehind(delivery.message_id)
            # Not written: the resume decides the fate of every tick of the pause by the catch-up
            # policy, handed over or not (services/schedule.py resume).
            return Outcome.PAUSED
        if kind == "scheduled" and not self._still_a_tick(job, sf):
            # Handed over before an edit moved the schedule: the edited schedule has its own ticks.
            return self._skip(job, sf, "rescheduled", kind=kind, first_attempt_only=True)
        policy = job.policy
        late = (now - times.parse_stored(sf)).total_seconds()
        deadline = policy.starting_deadline_seconds
        if (
            not manual
            and deadline is not None
            and late > deadline + jitter_offset(job.job_id, policy.jitter_seconds)
        ):
            skipped = self._skip(job, sf, "deadline", kind=kind, first_attempt_only=True)
            if skipped is not None:
                return skipped
        return None

    def _new_tick_of_pause(self, job: Job, sf: str) -> bool:
        """Whether `sf` came due during the job's pause and has not started (then it waits for the
        resume); a tick due before the pause, or a retry of a run that started, goes on."""
        if job.paused_at is not None and times.parse_stored(sf) <= job.paused_at:
            return False
        row = self.runs.get(job.job_id, sf)
        return row is None or row.attempt == 0

    def _finished(self, job: Job, sf: str) -> Execution | None:
        """The run's row if it is over (SUCCEEDED, DEAD_LETTER, CANCELLED), else None."""
        row = self.runs.get(job.job_id, sf)
        return row if row is not None and row.status in TERMINAL else None

    def _finished_holder(self, current: Job) -> str | None:
        """The run holding the job, if its row says it is over (it was not released: see hold_job)."""
        holder = current.active_run
        if holder is None:
            return None
        row = self.runs.get(current.job_id, holder)
        # No row, or PENDING: the holder is running on the fast path (it writes once, at the end).
        if row is None or row.status == RunStatus.PENDING or row.status in HELD:
            return None
        if row.status in UNSTARTED_RECORDS and row.attempt == 0:
            # "Never started" is no proof here: another copy of the holder's message, late past the
            # starting deadline, may have written it SKIPPED while the holder runs on the fast path
            # (its record replaces that row). A live holder renews its hold; a dead one's lapses.
            return None
        return holder

    @staticmethod
    def _still_a_tick(job: Job, sf: str) -> bool:
        if job.type != "recurring" or job.cron_expr is None:
            return True
        tick = times.parse_stored(sf)
        policy = job.policy
        if (policy.start_at and tick < policy.start_at) or (policy.end_at and tick > policy.end_at):
            return False
        return cron.parse(job.cron_expr, job.timezone).fires_at(tick)

    def _skip(self, job: Job, sf: str, reason: str, *, kind: str, first_attempt_only: bool) -> Outcome | None:
        done = self.runs.skip(
            job.job_id,
            sf,
            reason=reason,
            now=self.clock.now(),
            create=NewRun(job.job_id, job.tenant, sf, kind),
            first_attempt_only=first_attempt_only,
        )
        row = done.row
        # This skip, or the same one a delivery before this one wrote (and died before alerting).
        ours = done.applied or (row is not None and row.status == RunStatus.SKIPPED and row.reason == reason)
        if self.alerts is not None and reason in ALERTED_SKIPS and ours:
            self.alerts.raise_alert(
                job, "skipped", scheduled_for=times.parse_stored(sf), detail=ALERTED_SKIPS[reason]
            )
        if done.applied:
            return Outcome.SKIPPED
        if row is None or row.status in TERMINAL:
            self._settle_found(job, row)  # finished, cancelled or skipped already: nothing to run
            return Outcome.DUPLICATE
        if row.status == RunStatus.PENDING:
            return None  # a retry of a run that started before: it is not skipped
        # LEASED, RUNNING or FAILED: the run started and its holder died (or it awaits a retry).
        # Never drop its message: for overlap it waits for the job; otherwise the claim decides.
        if reason == "overlap":
            raise WaitBehind(f"run {sf} already started; waiting for the job")
        return None

    def _run(self, job: Job, sf: str, delivery: Delivery, *, kind: str, keys: list[str]) -> Outcome:
        if self.hand_off is not None and isinstance(job.target, WorkerTarget):
            # At most once per run: a redelivery changes nothing. Refused, the run is its pool's
            # still (PENDING, LEASED, RUNNING: it keeps the markers this receive renewed), or over
            # (a duplicate: its markers are released as for any duplicate).
            if self.hand_off(job, sf, kind):
                return Outcome.HANDED_OFF
            row = self.runs.get(job.job_id, sf)
            if row is not None and row.status in (RunStatus.PENDING, *HELD):
                return Outcome.HANDED_OFF
            return Outcome.DUPLICATE
        # Which path, and the attempt number. An eventually consistent read (half the price) is
        # enough where it only picks the path; the conditional write decides. A stale "absent/PENDING"
        # for a run another worker holds or finished makes the fast path's write lose, and the
        # run is dropped as a duplicate, as it would have been. But a run that holds the job's slot
        # reads consistently: a stale read of its own finished row would run the handler again
        # under the slot, and the next tick, seeing the holder's row finished, would start beside it
        # (tests/sim seed 86, buffer_one).
        row = self.runs.get(job.job_id, sf, consistent=self._holds_slot(job, kind))
        created = NewRun(job.job_id, job.tenant, sf, kind)
        # A run in a task of its own leases first: the task records its outcome under that lease
        # (run_in_own_task), so the lease row must exist before RunTask.
        if (
            self.fast_path
            and job.idempotent
            and not self._in_own_task(job)
            and (row is None or row.status == RunStatus.PENDING)
            and (row is None or row.cancel_requested_at is None)  # a cancel asked: see _run_leased
        ):
            return self._run_fast(job, sf, delivery, row, created, kind=kind, keys=keys)
        return self._run_leased(job, sf, delivery, created, kind=kind, keys=keys)

    def _run_fast(
        self,
        job: Job,
        sf: str,
        delivery: Delivery,
        row: Execution | None,
        created: NewRun,
        *,
        kind: str,
        keys: list[str],
    ) -> Outcome:
        """The healthy path: run, then record the outcome in ONE conditional write.

        PENDING -> LEASED -> RUNNING -> SUCCEEDED|FAILED is written as one step (legal edges,
        checked by RunStore.transition) when nothing could have observed the steps between: the
        lease is the message's visibility timeout, and a run that lasts past the first heartbeat
        persists LEASED -> RUNNING with its lease then, so it is visible (and cancel answers 409)
        while it runs long. A duplicate delivery running at the same time loses the final
        compare-and-set and is dropped; its handler ran twice, under one effect key (at least once,
        one effect). Jobs declared idempotent: false never take this path: they lease first.
        """
        attempt = (row.attempt if row else 0) + 1
        replays = row.replays if row else 0
        owner = f"{self.worker_id}/{uuid.uuid4().hex[:8]}"
        self.crash("run.after_lease")
        self._wait_for_second(sf)
        started = self.clock.now()
        self._started(sf, started, attempt=attempt, kind=kind)

        # The (attempt, replays) the first beat's lease write counted, when it applied: see below.
        counted: list[tuple[int, int]] = []

        def persist_lease(until: datetime) -> bool:
            lease = Lease(owner=owner, message=delivery.message_id, worker=self.worker_id, until=until)
            done = self.runs.persist_running(
                job.job_id, sf, lease=lease, started_at=started, now=self.clock.now(), create=created
            )
            if done.applied:
                before = done.previous  # None: the write created the row
                counted.append(((before.attempt if before else 0) + 1, before.replays if before else 0))
                return True
            mine = _held_by(done.row, owner)
            if mine is not None:
                # Refused because an earlier try of this very write applied, its answer lost (a
                # timeout after the write, tried again by the beat): the row is RUNNING under this
                # attempt's own lease (its owner names this attempt alone). Read as another holder's,
                # the beat let the lease go, the outcome's one write was refused by that RUNNING row,
                # the message was left, and the takeover after the lease ran the handler again as
                # attempt 2: attempt 1 ran unrecorded, and a run cancel of the re-armed retry wrote
                # CANCELLED over it (tests/sim seed 6505).
                counted.append((mine.attempt, mine.replays))
                return True
            return False

        # A retried run (re-armed PENDING) resumes from the checkpoint on the row read above: an
        # eventually consistent read, which may show an older one (the re-arm came backoff seconds
        # after it was written): resumed from a checkpoint, at worst not the very last.
        error, result, heartbeat = self._execute(
            job,
            sf,
            delivery,
            attempt=attempt,
            owner=owner,
            persist=persist_lease,
            kind=kind,
            resume=row,
            keys=keys,
        )
        if heartbeat.persisted and counted:
            # The attempt is the one the lease write counted (attempt + 1 over the row it found), not
            # the one the eventually consistent read above suggested: that read may have shown an older
            # row (a retry's re-armed row read as absent), or another delivery's failure may have been
            # recorded and re-armed while this handler ran before its first beat. The record keeps the
            # lease row's attempt, and a failure handed over under an attempt already handed over
            # starts no workflow: the run stayed FAILED for good (tests/sim seeds 49, 1260, 2059, 2962).
            attempt, replays = counted[0]
        end = self._outcome(started, self.clock.now(), attempt, result, error)
        finished = end.finished_at
        self.metrics.emit(telemetry.DURATION, _ms(finished - started), telemetry.MILLISECONDS)
        persisted = heartbeat.persisted
        if persisted:
            done = self._record(lambda: self.runs.record(job.job_id, sf, owner=owner, end=end), end)
        else:
            done = self._record(
                lambda: self.runs.record_unleased(
                    job.job_id, sf, worker=self.worker_id, end=end, create=created
                ),
                end,
            )
            mine = None if done.applied else _held_by(done.row, owner)
            if mine is not None:
                # The first beat's lease write applied, but every answer of it was lost (a timeout
                # after the write, then a failed try): the run is RUNNING under this attempt's own
                # lease. Its outcome is recorded under that lease, as the attempt that write counted.
                persisted, attempt, replays = True, mine.attempt, mine.replays
                end = self._outcome(started, finished, attempt, result, error)
                done = self._record(lambda: self.runs.record(job.job_id, sf, owner=owner, end=end), end)
        if not done.applied:
            ours = self._recorded_for_us(job, done.row, owner=owner)
            if ours is not None:
                return ours
            # Someone else recorded this run meanwhile (a duplicate delivery, or a retry's
            # takeover): theirs stands; finish what a dead recorder may have left undone.
            refused = self._refused(job, done.row, delivery)
            if refused == Outcome.DUPLICATE and persisted:
                raise LeaseLost(delivery.message_id)
            return refused
        if not persisted:
            # The attempt is the one the write counted: the read that picked this path is eventually
            # consistent and may have shown an older row (a retry's re-armed row read as absent),
            # and a failure handed over under an attempt already handed over starts no workflow.
            attempt = (
                done.row.attempt
                if done.row is not None
                else (done.previous.attempt if done.previous else 0) + 1
            )
            # and the replay series too: a stale read of a replayed run shows the series before it,
            # whose attempt's workflow exists already by name (tests/sim seed 174).
            written = done.row if done.row is not None else done.previous
            replays = written.replays if written is not None else 0
        return self._recorded(job, sf, attempt, error, replays, finished, retry_after=heartbeat.retry_after)

    def _run_leased(
        self, job: Job, sf: str, delivery: Delivery, created: NewRun, *, kind: str, keys: list[str]
    ) -> Outcome:
        """Lease first, then run: for takeovers of a dead worker's run and non-idempotent jobs."""
        now = self.clock.now()
        lease = self._lease(delivery, now=now)
        owner = lease.owner
        claim = self.runs.claim(job.job_id, sf, lease=lease, now=now, create=created, packed=job.packed)
        if not claim.applied:
            if job.packed and claim.row is not None and claim.row.materialized:
                raise InFlightElsewhere(delivery.message_id)  # copied out meanwhile: the next receive's
            return self._refused(job, claim.row, delivery)
        previous = claim.previous
        attempt = (previous.attempt if previous else 0) + 1
        replays = previous.replays if previous else 0
        took_over = previous is not None and previous.status in HELD
        if previous is not None and previous.cancel_requested_at is not None:
            # Its cancel was asked (POST /api/runs/{id}/cancel) while it was held or had started: a
            # run cancel marks such a run instead of cancelling it, as its worker may have run the
            # handler (a dead or stalled holder under a lapsed lease, a dead fast-path receive whose
            # start marker is left on the job). Not run again: it may have run, and its cancel was
            # asked, so LOST (tests/sim seeds 1, 4, 6: the cancel wrote such a run CANCELLED).
            self.runs.lose(
                job.job_id, sf, owner=owner, now=self.clock.now(), error=("LeaseLost", CANCEL_REQUESTED_LOST)
            )
            return Outcome.LOST
        if took_over:
            logger.warning(
                "a worker died holding this run; taking it over", extra={"job_id": job.job_id, "sf": sf}
            )
            if not job.idempotent:
                # Re-running a job that declared its effect unsafe to repeat is an operator's call.
                self.runs.lose(
                    job.job_id, sf, owner=owner, now=self.clock.now(), error=("LeaseLost", LOST_MESSAGE)
                )
                return Outcome.LOST
        self.crash("run.after_lease")
        self._wait_for_second(sf)
        started = self.clock.now()
        start = self.runs.start(job.job_id, sf, owner=owner, now=started)
        if not start.applied:
            raise LeaseLost(delivery.message_id)
        self._started(sf, started, attempt=attempt, kind=kind)
        if took_over and attempt > job.retry.max_attempts:
            # Every attempt died with its worker: running it again would only kill another.
            result: object = None
            retry_after: float | None = None
            error: tuple[str, str] | None = (
                LEASE_EXPIRED,
                f"the worker of attempt {attempt - 1} died holding this run, and max_attempts"
                f" ({job.retry.max_attempts}) is used up",
            )
            self.crash("run.after_handler")
        else:
            # A takeover (or a retry) resumes from the checkpoint on the row the claim moved: its
            # ALL_OLD answer, the row as it stood at the claim.
            error, result, beat = self._execute(
                job,
                sf,
                delivery,
                attempt=attempt,
                owner=owner,
                persist=None,
                kind=kind,
                resume=previous,
                keys=keys,
            )
            retry_after = beat.retry_after
        end = self._outcome(started, self.clock.now(), attempt, result, error)
        return self._record_held(
            job, sf, delivery, owner=owner, end=end, replays=replays, retry_after=retry_after
        )

    def _record_held(
        self,
        job: Job,
        sf: str,
        delivery: Delivery,
        *,
        owner: str,
        end: AttemptEnd,
        replays: int,
        retry_after: float | None,
    ) -> Outcome:
        """An attempt that held its lease from its start (the leased path, a packed start): its outcome
        recorded under that lease, then settled; a record refused is another recorder's (ours: settled),
        or the lease was lost."""
        self.metrics.emit(telemetry.DURATION, _ms(end.finished_at - end.started_at), telemetry.MILLISECONDS)
        done = self._record(lambda: self.runs.record(job.job_id, sf, owner=owner, end=end), end)
        if not done.applied:
            ours = self._recorded_for_us(job, done.row, owner=owner)
            if ours is not None:
                return ours
            raise LeaseLost(delivery.message_id)
        error = end.error
        return self._recorded(
            job,
            sf,
            end.attempt,
            error,
            replays,
            end.finished_at,
            retry_after=retry_after,
            materialized=_flagged(done),
        )

    def _recorded_for_us(self, job: Job, row: Execution | None, *, owner: str) -> Outcome | None:
        """The attempt this worker holds, recorded under its own lease by another recorder (a
        container task's stop event: services/task_events.py) before this worker's own record: that
        record stands, is settled again (idempotent: the recorder may have died before settling),
        and the run ends here as if this worker had recorded it. A failure the recorder handed over
        may be dead-lettered already (the workflow's DeadLetter keeps the lease's owner): it is ours
        too, and settled (before, the worker took it for a lost lease, and the message came back
        for a redelivery that had nothing to do). None: not so."""
        if (
            row is None
            or row.lease_owner != owner
            or row.status not in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.DEAD_LETTER)
        ):
            return None
        self._settle_found(job, row)
        return Outcome.SUCCEEDED if row.status == RunStatus.SUCCEEDED else Outcome.FAILED

    def _record(self, write: Callable[[], Transition], end: AttemptEnd) -> Transition:
        """The attempt's outcome written, the write retried while the store fails (RECORD_TRIES).

        The handler has run: a record left to the message's redelivery may never come, as the
        redelivery meets the tick's gate first (a pause, an edit, the next tick in the slot, a
        cancel) and skips or cancels a run that executed. So the worker keeps trying here.

            write ──500/throttle (nothing written)──> write again
              └──timeout (it may have applied)──> write again ──refused, the row holds this very
                                                     attempt (its start and end)──> it was ours: applied
        """
        unsure = False
        for left in range(RECORD_TRIES - 1, -1, -1):
            try:
                done = write()
            except StoreUnreachable:
                if not left:
                    raise
                unsure = True
                continue
            except TransientStoreError:
                if not left:
                    raise
                continue
            if not done.applied and unsure and _records(done.row, end):
                # Our own earlier try applied: the row is this attempt's record.
                return Transition(applied=True, row=done.row)
            return done
        raise AssertionError("unreachable")  # pragma: no cover

    def _started(self, sf: str, started: datetime, *, attempt: int, kind: str) -> None:
        """A run's lateness, at its first attempt's start; a backfill's tick is in the past by design."""
        if attempt == 1 and kind != "backfill":
            lateness = _ms(started - times.parse_stored(sf))
            self.metrics.emit(telemetry.LATENESS, max(0, lateness), telemetry.MILLISECONDS)

    def _wait_for_second(self, sf: str) -> None:
        early = (times.parse_stored(sf) - self.clock.now()).total_seconds()
        if early > 0:
            self.sleep(min(early, MAX_EARLY_WAIT_SECONDS))  # type: ignore[operator]

    def _execute(
        self,
        job: Job,
        sf: str,
        delivery: Delivery,
        *,
        attempt: int,
        owner: str,
        persist: Callable[[datetime], bool] | None,
        kind: str,
        resume: Execution | None = None,
        keys: list[str] | None = None,
    ) -> tuple[tuple[str, str] | None, object, _Heartbeat]:
        """Call the handler under a heartbeat; (error or None, result, the heartbeat). `resume`: the
        run's row as this attempt found it (its checkpoint is the handler's ctx.last_checkpoint)."""
        scheduled_for = times.parse_stored(sf)
        key = run_id_for(job.job_id, scheduled_for)
        heartbeat = _Heartbeat(
            self,
            delivery,
            owner=owner,
            job_id=job.job_id,
            scheduled_for=sf,
            # A packed job has no item: its run row's lease is its only start marker.
            claim="none" if job.packed else "slot" if self._holds_slot(job, kind) else "count",
            persist=persist,
            keys=[(job.tenant, k, self._key_holder(job, sf, delivery)) for k in keys or ()],
        )
        context = RunContext(
            job_id=job.job_id,
            run_id=key,
            tenant=job.tenant,
            scheduled_for=scheduled_for,
            attempt=attempt,
            effect_key=key,
            beat=heartbeat.beat,
            cancel_requested=lambda: heartbeat.cancel_requested,
            note=heartbeat.note,
            task_noted=heartbeat.note_task,
            last_checkpoint=resume.checkpoint if resume is not None else None,
        )
        if self.alerts is not None and attempt == 1 and kind == "scheduled":
            # The run's start is its first attempt's (a retry's start is late by its backoff).
            self.alerts.late_start(job, scheduled_for=scheduled_for, started_at=self.clock.now())
        heartbeat.start()
        try:
            result, error, heartbeat.retry_after = self._invoke(
                job, context, timeout=job.retry.timeout_seconds
            )
        finally:
            heartbeat.stop()
        self.crash("run.after_handler")
        return error, result, heartbeat

    @staticmethod
    def _outcome(
        started: datetime, finished: datetime, attempt: int, result: object, error: tuple[str, str] | None
    ) -> AttemptEnd:
        """How one attempt ended: its bounded result, or its error."""
        return AttemptEnd(
            attempt=attempt,
            started_at=started,
            finished_at=finished,
            result=_bounded_json(result) if error is None else None,
            error=error,
        )

    def _recorded(
        self,
        job: Job,
        sf: str,
        attempt: int,
        error: tuple[str, str] | None,
        replays: int,
        finished: datetime,
        *,
        retry_after: float | None = None,
        materialized: bool = False,
    ) -> Outcome:
        """After the outcome is written: hand a failure to the workflow, or signal a success.

        `retry_after`: the target's own hint (HTTP Retry-After) for the re-arm delay, handed over in
        this process only. A worker that dies between the record and the hand-over leaves the run
        FAILED; whoever hands it over then (a redelivery, the reconciler) uses the policy's backoff:
        the hint is lost, never the retry, and the wait stays within the backoff's bounds either way.
        """
        self.crash("run.after_record")
        scheduled_for = times.parse_stored(sf)
        run_id = run_id_for(job.job_id, scheduled_for)
        if job.packed and materialized:
            # Copied out while it ran: its item is the job now (a dependant may name it, its policy may
            # have been edited), for the failure's workflow as for the success's settle.
            job = self.jobs.get_job(job.job_id) or job
        if error is not None:
            failed = Execution(
                run_id=run_id,
                job_id=job.job_id,
                tenant=job.tenant,
                scheduled_for=scheduled_for,
                status=RunStatus.FAILED,
                attempt=attempt,
                error=RunError(type=error[0], message=error[1]),
                replays=replays,
            )
            retryable = None if error[0] != LEASE_EXPIRED else False
            self.failures.hand_over(job, failed, retryable=retryable, retry_after=retry_after)
            return Outcome.FAILED
        self.crash("run.before_signal")
        succeeded = Execution(
            run_id=run_id,
            job_id=job.job_id,
            tenant=job.tenant,
            scheduled_for=scheduled_for,
            status=RunStatus.SUCCEEDED,
            attempt=attempt,
            replays=replays,
            materialized=materialized,
        )
        if job.packed:  # not copied out: its run row is its status (COMPLETED)
            return Outcome.SUCCEEDED
        self.dag.settle(job, succeeded, now=finished)
        return Outcome.SUCCEEDED

    def _settle_found(self, job: Job, row: Execution | None) -> None:
        """A copy of a run's message that finds the run recorded settles it, as its recorder would
        have: a worker may have died, or failed (a 500 on the job's read), between the record and
        the settling. Each step is idempotent (the execution's name is the key, the COMPLETED write
        is conditioned on SCHEDULED), so a duplicate of a settled run changes nothing.

        A failure is handed to its workflow; a success signals its dependants and completes a
        one-off. (Before, a copy that found the success recorded signalled dependants only, and
        a key wait's copy not even that: the one-off said SCHEDULED for good, its run still to come:
        tests/e2e/test_restart.py, tests/sim seeds 2 and 383.) Nothing is read or written for a
        recurring run without dependants, or a one-off the job we hold shows settled."""
        if job.packed:
            if row is not None:
                self._settle_packed(job, row)
            return
        settled = row is None or (
            row.status == RunStatus.SUCCEEDED
            and not job.dependants
            and not (job.status in (JobStatus.SCHEDULED, JobStatus.PAUSED) and root_schedule_of(job) == ONCE)
        )
        if not settled:
            assert row is not None
            settle_recorded(job, row, failures=self.failures, dag=self.dag, now=self.clock.now())

    def _refused(self, job: Job, row: Execution | None, delivery: Delivery) -> Outcome:
        self._settle_found(job, row)
        if row is not None and row.status in HELD:
            if row.lease_message == delivery.message_id:
                raise InFlightElsewhere(delivery.message_id)
            if row.worker == DEAD_HOLDER:
                # A start kept for a dead holder (_keep_start), refused only because it was kept in
                # this very instant (its lease ends as it is written): no receive holds it. Leave the
                # message: it takes the run over after its visibility timeout. (A spare's copy, as
                # below, would meet the same instant again on a clock that does not move.)
                raise WaitBehind(delivery.message_id)
            # Another message's receive holds the run: it carries the run while it lives; this copy
            # is spare, and leaves a delayed copy behind in case that receive's message is gone
            # (_spare: tests/sim seeds 5924, 5109).
            return self._spare(delivery, until=row.lease_until)
        return Outcome.DUPLICATE

    def _spare(self, delivery: Delivery, *, until: datetime | None) -> Outcome:
        """This message meets another message of its run holding the run (its slot marker, or its
        row's lease, until `until`): send a copy of this message delayed to just past that hold, then
        this one is acknowledged. The copy finds the run finished (dropped), still held (a long run:
        another copy, one per hold), or its holder dead (its lapsed hold taken over: the run goes on).

        Acknowledging the spare is safe only while the holder's own message is still queued, and a
        late receive of a message that another receive has deleted holds the run with none:

            message A received twice (SQS), or reached in its batch after its visibility ran out
            A#2 records attempt 1 FAILED, acks A (deleted) ──> the workflow re-arms, sends retry B
            A#1 (late, its message gone) takes the run: the re-armed retry on the fast path, or a
                lapsed lease by a claim ──> dies (a crash after the handler, a timeout after the claim)
            B meets A#1's live slot marker or lease: before, acknowledged as a spare: no message of
                the run was left, and it stayed RUNNING, LEASED or PENDING for good (tests/sim seeds
                6925, 5924, 5109); now B leaves B' (delayed past A#1's hold), then is acknowledged
            B' surfaces: A#1's hold has lapsed ──> B' takes the run over (at least once)

        Cost: one message per spare that meets a live holder (duplicate deliveries, wake-ups, retries
        racing a late copy), nothing on the healthy path. The holder cannot tell that its receipt went
        stale without a visibility call per run (and SQS answers an old receipt loosely); leaving the
        spare queued would spend its receives (maxReceiveCount) behind a long run and redrive a live
        run to the reconciler; the copy is a new message, its receive count starts again, as for a
        key wait (_wait_for_key).
        """
        message = RunMessage.model_validate_json(delivery.body)
        left = 0.0 if until is None else (until - self.clock.now()).total_seconds()
        # Past the hold by a second (workers' clocks differ a little; a copy that comes early only
        # meets the hold once more and leaves another copy).
        delay = min(MAX_DELAY_SECONDS, max(1, math.ceil(left) + 1))
        self.queue.send([Outgoing(message, delay)])
        return Outcome.SPARE

    def _invoke(
        self, job: Job, ctx: RunContext, *, timeout: int | None
    ) -> tuple[object, tuple[str, str] | None, float | None]:
        """Call the job's target once: (result, error or None, the target's Retry-After hint)."""
        if timeout is None or not self.timeout_thread:
            return self._call(job, ctx)
        # Python cannot kill a thread: a target past its timeout is failed and left to finish in
        # the background (its late result is discarded: the run has moved on). Handlers that must
        # stop should poll their own deadline; a waiting stepfunctions target stops its execution
        # before it (see _target).
        box: dict[str, tuple[object, tuple[str, str] | None, float | None]] = {}
        context = contextvars.copy_context()  # the run's log keys follow the handler onto its thread
        thread = threading.Thread(
            target=lambda: box.update(out=context.run(self._call, job, ctx)),
            name="jobsched-handler",
            daemon=True,
        )
        thread.start()
        thread.join(timeout)
        if thread.is_alive() or "out" not in box:
            return None, ("Timeout", f"attempt {ctx.attempt} ran longer than timeout_seconds={timeout}"), None
        return box["out"]

    def _target(self, job: Job) -> Target:
        """The adapter of the job's target: the registry's handler, or TargetFactory.for_spec's."""
        spec = job.target
        # A stepfunctions target that waits stops its execution a little before the job's timeout
        # (so does a container's task), so the run path's own Timeout (above) is the backstop.
        timeout = job.retry.timeout_seconds
        if isinstance(spec, PythonTarget) and self._in_own_task(job):
            if self.targets is None:
                raise TargetFailed("no ECS tasks in this process", error_type="TargetUnavailable")
            return self.targets.for_worker_task(
                timeout_seconds=None if timeout is None else timeout * 0.95,
                resources=job.placement().resources,
            )
        if isinstance(spec, PythonTarget):
            return self.registry.target(spec.handler)
        if self.targets is None:
            raise TargetFailed(f"no {spec.type} targets in this process", error_type="TargetUnavailable")
        return self.targets.for_spec(
            spec,
            timeout_seconds=None if timeout is None else timeout * 0.95,
            resources=job.placement().resources,
        )

    def _call(
        self, job: Job, ctx: RunContext, target: Target | None = None
    ) -> tuple[object, tuple[str, str] | None, float | None]:
        envelope = {
            "job_id": ctx.job_id,
            "run_id": ctx.run_id,
            "tenant": ctx.tenant,
            "scheduled_for": times.iso(ctx.scheduled_for),
            "attempt": ctx.attempt,
            "effect_key": ctx.effect_key,
            "payload": job.payload,
        }
        try:
            return (target or self._target(job)).invoke(envelope, ctx), None, None
        except Exception as exc:  # a target's failure is data about the run, not a worker fault
            logger.info("target failed", extra={"job_id": ctx.job_id, "error": repr(exc)})
            message = (str(exc) or type(exc).__name__)[:MAX_ERROR_CHARS]
            # A target names its failure (HTTP404, a Lambda's errorType); a handler's is its class.
            if isinstance(exc, TargetFailed):
                return None, (exc.error_type, message), exc.retry_after
            return None, (type(exc).__name__, message), None


def _records(row: Execution | None, end: AttemptEnd) -> bool:
    """Whether `row` holds the attempt `end` as its last record (the same start and end instants)."""
    if row is None or row.status != end.status or not row.attempts:
        return False
    last = row.attempts[-1]
    return (
        last.started_at is not None
        and last.finished_at is not None
        and times.stored(last.started_at) == times.stored(end.started_at)
        and times.stored(last.finished_at) == times.stored(end.finished_at)
    )


def _flagged(done: Transition) -> bool:
    """Whether a packed run's recorded row says its job was copied out (the row before the record, or,
    when a retried record's first try applied unseen, the row after it: _record)."""
    return any(r is not None and r.materialized for r in (done.previous, done.row))


def _held_by(row: Execution | None, owner: str) -> Execution | None:
    """`row` if it is RUNNING under the lease `owner` (one attempt's own: a worker id and a nonce)."""
    return row if row is not None and row.status == RunStatus.RUNNING and row.lease_owner == owner else None


def hold_seconds(lease_seconds: int) -> int:
    """How long a taken or renewed slot hold lasts, for a worker whose lease is `lease_seconds`.

    The heartbeat renews the hold every lease/3 s. A beat whose renewal fails on both tries (a
    throttle burst) leaves the hold 2·lease/3 s old at the next beat: the hold outlasts that, with
    lease/6 s to spare for the workers' clock skew, so a live holder never lets it lapse (at lease/2
    one failed beat opened the slot mid-run, and the next tick ran beside it: the chaos harness).
    """
    return max(2, lease_seconds - lease_seconds // 6)


def _ms(span: timedelta) -> int:
    return round(span.total_seconds() * 1000)


def cancel_marked(runs: RunStore, job_id: str, sf: str) -> bool:
    """Whether a cancel has marked the run's row (RunStore.request_cancel): what a beat reads for the
    handler's ctx.cancelled, eventually consistent (a mark seconds old is seen at the next beat)."""
    row = runs.get(job_id, sf, consistent=False)
    return row is not None and row.cancel_requested_at is not None


def _live(until: datetime | None, now: datetime) -> bool:
    return until is not None and until >= now


def _bounded_json(value: object) -> str:
    text = json.dumps(value, default=str, separators=(",", ":"))
    if len(text.encode()) > MAX_RESULT_BYTES:
        return json.dumps({"truncated": True, "bytes": len(text.encode())})
    return text


class _Heartbeat:
    """Extends the message's visibility, the run's lease and the job's hold while a handler runs long.

    On the fast path the run has no lease row yet: the first beat writes it (`persist`), so a run
    that lasts is visible as RUNNING and its lease can be taken over if its worker dies.
    """

    def __init__(
        self,
        worker: Worker,
        delivery: Delivery,
        *,
        owner: str,
        job_id: str,
        scheduled_for: str,
        claim: str,
        persist: Callable[[datetime], bool] | None,
        keys: list[tuple[str, str, str]] | None = None,
    ) -> None:
        self._worker, self._delivery = worker, delivery
        self._keys = keys or []  # (tenant, key, holder) of each key slot the run holds, to renew
        self._owner, self._job_id, self._sf = owner, job_id, scheduled_for
        self._claim = claim  # the start marker on the job to renew: "slot" or "count"
        self._lock = threading.Lock()
        self._persist = persist
        self.persisted = False  # the first beat wrote the fast path's lease row
        self.retry_after: float | None = None  # the failed target's Retry-After hint (seconds)
        self.cancel_requested = False  # a beat found the run row marked cancel-requested
        self._leased = persist is None  # this worker holds a lease row to extend
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobsched-heartbeat", daemon=True)

    def start(self) -> None:
        if self._worker.heartbeat_thread:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._worker.settings.lease_seconds / 3):
            self.beat()

    def beat(self) -> None:
        """Renew every lease this run holds now (also what a handler's ctx.heartbeat() does)."""
        with self._lock:
            self._beat()

    def _beat(self) -> None:
        # A killed process beats no more (the local stack kills a Lambda invocation past its timeout
        # so, as Lambda kills the sandbox: its leases lapse and the message is redelivered).
        if not self._worker.alive():
            return
        # Each lease is renewed on its own, and a failed renewal is tried once more at once: one
        # throttle or timeout must neither skip the other renewals nor end the heartbeat (a dead
        # heartbeat lets the run's slot lapse mid-run, and the job's next tick would start beside it).
        lease = self._worker.settings.lease_seconds
        now = self._worker.clock.now()
        until = now + timedelta(seconds=lease)
        worker = self._worker
        self._renew("message", lambda: worker.queue.extend(self._delivery.receipt_handle, seconds=lease))
        if self._persist is not None:
            # Refused: another delivery recorded or holds the run; this one's result will lose.
            persist = self._persist
            persisted = self._renew("run row", lambda: persist(until))
            if persisted is not None:  # tried again at the next beat if both tries failed
                self.persisted = bool(persisted)
                self._persist = None
                self._leased = self.persisted
        elif self._leased:
            self._renew(
                "run lease",
                lambda: self._worker.runs.extend_lease(
                    job_id=self._job_id, scheduled_for=self._sf, owner=self._owner, until=until
                ),
            )
        if self._leased and not self.cancel_requested:
            # A cancel of a running run marks its row (RunStore.request_cancel); a beat reads it for
            # the handler's ctx.cancelled. Only a run with a lease row can have been marked.
            self._renew("cancel mark", self._read_cancel_mark)
        hold_until = now + timedelta(seconds=self._worker.hold_seconds())
        limits = worker.limits
        if limits is not None:
            for tenant, key, holder in self._keys:
                renew = functools.partial(limits.extend, tenant, key, holder=holder, until=hold_until)
                self._renew("key", renew)
        if self._claim == "slot":
            self._renew("slot", lambda: worker.jobs.extend_hold(self._job_id, run=self._sf, until=hold_until))
        elif self._claim == "count":
            self._renew(
                "count",
                lambda: worker.jobs.extend_count(
                    self._job_id, run=self._sf, message=self._delivery.message_id, until=hold_until
                ),
            )

    def note(self, progress: str | None, checkpoint: str | None) -> bool:
        """Keep the handler's progress and/or checkpoint on the run's row (ctx.heartbeat(progress),
        ctx.checkpoint); False if the row is not this worker's. On the fast path the run has no lease
        row before its first beat: that beat is taken first, so the row exists and is leased to it.

        Only runs that call the helpers write here: a run that never does costs nothing more. A store
        error is raised to the handler (nothing was kept; it may try again)."""
        with self._lock:
            if self._persist is not None:
                self._beat()
            if not self._leased:
                return False
            return self._worker.runs.save_progress(
                self._job_id,
                self._sf,
                owner=self._owner,
                now=self._worker.clock.now(),
                progress=progress,
                checkpoint=checkpoint,
            )

    def note_task(self, task_arn: str) -> None:
        """Keep on the run's row the ECS task this attempt runs (ctx.note_task: the ecs target's,
        once its task started or was adopted). Like note(), a fast-path run's first beat is taken
        first. Never raises: a note that cannot be written (tried twice) is logged, and the run goes
        on; only its output is left out of GET /api/runs/{id}/logs."""
        with self._lock:
            if self._persist is not None:
                self._beat()
            if not self._leased:
                return
            self._renew(
                "task note",
                lambda: self._worker.runs.note_task(
                    self._job_id, self._sf, owner=self._owner, task_arn=task_arn
                ),
            )

    def _read_cancel_mark(self) -> bool:
        self.cancel_requested = cancel_marked(self._worker.runs, self._job_id, self._sf)
        return True

    def _renew(self, what: str, call: Callable[[], bool]) -> bool | None:
        """call(), tried twice; None if both tries raised (logged: the next beat tries again)."""
        for attempt in (1, 2):
            try:
                return call()
            # Any error: this thread is the run's only lease keeper, and it must outlive a fault.
            except Exception as exc:
                if attempt == 2:
                    logger.warning(
                        "heartbeat renewal failed",
                        extra={"job_id": self._job_id, "lease": what, "error": repr(exc)},
                    )
        return None
