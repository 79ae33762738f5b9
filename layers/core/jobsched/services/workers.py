"""External worker pools: registration, heartbeats, placement with reservations, and the worker's
reports on its runs as conditional transitions of the run row.

Every step is one conditional write, and each crash between two leaves state that the next sweep
(run at every heartbeat and poll of the pool's workers) finishes; nothing lives only in a process:

    handoff   run row PENDING (put_pending)    crash: the SQS message is redelivered; both
              -> queue entry (enqueue)          writes are at most once per run
    sweep     dead workers: mark_dead (CAS, drops holds) -> their runs re-queued or LOST
                                                crash after mark_dead: the run row stays held by the
                                                dead worker; ack by the next worker takes it over
                                                once the dead one's lease (DEAD_AFTER) lapsed, and
                                                the run is re-queued by the sweep that finds it so
              lapsed reservations: release that very hold + enqueue again, one transaction
                                                (two sweeps that read the same lapsed hold: the
                                                second is refused, so it can neither release the
                                                reservation the first one's placement made since
                                                nor queue the run twice)
              placement: reserve (CAS) -> dequeue (conditional)
                                                crash between: queued and held; the next sweep sees
                                                the live hold and drops the queue entry
                                                dequeue refused (another placer took the entry):
                                                release this reservation, so a run has one
                                                a stale hold on a finished run: released at poll
    ack       run PENDING -> LEASED (owner = the worker) -> hold confirmed
                                                crash between: the reservation lapses, the run is
                                                re-queued, and the next ack takes the lapsed lease
    started / heartbeat / finished: the run row's own conditional edges, owner = the worker, and
              only while the worker is ALIVE and holds the run: a worker declared dead that comes
              back has its stale runs refused (its holds were dropped when it was declared dead)
    finished  record -> settle -> the job's markers freed -> the worker's hold released
                                                crash before the release: the hold stays, and the
                                                retried report, the worker's next heartbeat without
                                                the run, or the sweep that buries the worker settles
                                                it again (idempotent), then releases

The job's markers (its overlap slot, its concurrency-key slots) are the worker function's, taken
before the hand-off and held until the run is settled or LOST: every report and the queue's reads
renew them (RunMarkers), so a pool run never runs beside the job's next tick.

A refused report changes nothing and answers the run as it stands (the duplicate `finished`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from jobsched.domain import cursors, times
from jobsched.domain.keys import parse_run_id, pool_queue_pk, run_id_for
from jobsched.domain.models import Execution, Job
from jobsched.domain.placement import Request, Resources, Slot, best_fit
from jobsched.domain.records import AttemptEnd, Lease
from jobsched.domain.status import TERMINAL, JobStatus, RunStatus
from jobsched.domain.targets import WorkerTarget
from jobsched.domain.workers import (
    DEAD_AFTER_SECONDS,
    RESERVATION_SECONDS,
    Hold,
    QueuedRun,
    Worker,
)
from jobsched.errors import Conflict, NotFound, ValidationFailed
from jobsched.ports import Clock, CrashPoints, JobStore, RunStore, WorkerStore, no_crash
from jobsched.services.settle import settle_recorded

if TYPE_CHECKING:
    from jobsched.services.dag import DagService
    from jobsched.services.failures import FailureService

PLACE_BATCH = 100
"""Waiting runs one sweep considers, oldest first."""
RESERVE_TRIES = 3
"""Compare-and-set attempts per run and sweep before it waits for the next sweep."""
SWEEP_EVERY_SECONDS = 1.0
"""A process sweeps a pool at most this often from its heartbeats and polls: a long poll's steps
(every 0.5 s) in between read their own worker only. Placement waits at most this long for a sweep
of a process that serves the pool (any worker's heartbeat or poll sweeps for all of them)."""
NOTHING_TO_RUN = TERMINAL | {RunStatus.FAILED, RunStatus.LOST, RunStatus.SKIPPED, RunStatus.UPSTREAM_FAILED}
"""Run states an ack cannot claim: a hold on such a run is a stale placement, released at the poll,
or a recorded run (SUCCEEDED, FAILED: it awaits its retry's hand-off) settled before its release."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """A run placed on a worker, as its poll answers it: enough to run the handler."""

    run_id: str
    job_id: str
    tenant: str
    scheduled_for: datetime
    handler: str
    payload: dict[str, Any]
    attempt: int
    effect_key: str
    resources: Resources
    last_checkpoint: Any = None
    """The state the run's last ctx.checkpoint() stored (None: none yet), as the poll read the row:
    a retried or re-placed attempt resumes from it (the handler's ctx.last_checkpoint)."""


class RunMarkers(Protocol):
    """The job's markers a handed-off run holds (its overlap slot, its concurrency-key slots), as
    the worker function took them before the hand-off (services.run.Worker)."""

    def hold_seconds(self) -> int:
        """How long a renewal keeps them."""
        ...

    def renew_handed_off(self, job: Job, sf: str) -> None:
        """Push them a hold's length from now."""
        ...

    def release_handed_off(self, job: Job, sf: str) -> None:
        """Free them (and wake the tick buffered behind the run)."""
        ...


MAX_QUEUE_PAGE = 100
"""The most waiting runs one page of GET /api/workers/queue lists."""


@dataclass(frozen=True, slots=True)
class QueuePage:
    """A page of a pool's waiting runs, oldest first, and the cursor after it (None: no more)."""

    items: list[QueuedRun]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Report:
    """What a worker's report did: whether it changed the run, and the run as it stands."""

    applied: bool
    run: Execution | None


@dataclass
class WorkerPools:
    """The worker API's service; every method is scoped to the caller's tenant."""

    workers: WorkerStore
    jobs: JobStore
    runs: RunStore
    clock: Clock
    # What follows a recorded outcome, as for a run of the worker function: a failure handed to the
    # failure workflow (a retry, placed again, or a dead letter), a success settled (dependants
    # signalled, a one-off's job COMPLETED). None (a test of placement alone): the outcome only.
    failures: FailureService | None = None
    dag: DagService | None = None
    # The job's slot and key slots a handed-off run holds from hand-off until it is settled: renewed
    # at the pool's reports, released after the settling (or a LOST end). None (a test of placement
    # alone): no markers are kept.
    markers: RunMarkers | None = None
    crash: CrashPoints = no_crash
    # run_id -> when this process last renewed the run's markers: a renewal is written at most
    # every third of a hold per process (each process renews on its own, so never less often).
    _renewed: dict[str, datetime] = field(default_factory=dict, init=False, repr=False)
    # (tenant, pool) -> when this process last swept it, and last read its queue.
    _swept: dict[tuple[str, str], datetime] = field(default_factory=dict, init=False, repr=False)
    _queue_read: dict[tuple[str, str], datetime] = field(default_factory=dict, init=False, repr=False)

    # -- workers -----------------------------------------------------------------------------------

    def register(self, *, tenant: str, pool: str, capacity: Resources, labels: Mapping[str, str]) -> Worker:
        """A new worker of `pool`, ALIVE, its first heartbeat now."""
        now = self.clock.now()
        worker = Worker(
            worker_id=f"w-{uuid.uuid4().hex[:16]}",
            tenant=tenant,
            pool=pool,
            capacity=capacity,
            labels=dict(labels),
            registered_at=now,
            last_heartbeat=now,
        )
        if not self.workers.register(worker):  # a uuid collision: say so rather than share an id
            raise Conflict("worker id taken; register again")
        self._swept.pop((tenant, pool), None)  # new capacity: its first poll sweeps at once
        return worker

    def get(self, *, tenant: str, worker_id: str) -> Worker:
        """The tenant's worker; NotFound for an unknown id or another tenant's."""
        worker = self.workers.get_worker(tenant, worker_id)
        if worker is None:
            raise NotFound(f"no worker {worker_id}")
        return worker

    def listing(self, *, tenant: str, pool: str | None) -> list[Worker]:
        """The tenant's workers (of `pool`), each with its status as of now."""
        now = self.clock.now()
        listed = self.workers.list_workers(tenant, pool=pool)
        return [
            w.model_copy(update={"status": "DEAD"}) if w.status == "ALIVE" and w.is_late(now) else w
            for w in listed
        ]

    def heartbeat(
        self, *, tenant: str, worker_id: str, free: Resources | None, runs: Mapping[str, str]
    ) -> tuple[Worker, list[str]]:
        """Record a heartbeat, then sweep the pool; answers the worker and the reported runs it no
        longer holds (refused: a dead worker's, or a run placed elsewhere since)."""
        now = self.clock.now()
        worker = self.workers.heartbeat(tenant, worker_id, now=now, free=free, runs=runs)
        if worker is None:
            raise NotFound(f"no worker {worker_id}")
        if worker.status == "ALIVE":
            ended = self._heard(worker, runs)
            if worker_id in self._sweep_due(tenant, worker.pool) or ended:
                worker = self.get(tenant=tenant, worker_id=worker_id)
        stale = sorted(run_id for run_id in runs if run_id not in worker.holds)
        return worker, stale

    def poll(self, *, tenant: str, worker_id: str) -> list[Assignment]:
        """Sweep the worker's pool (at most every SWEEP_EVERY_SECONDS per process), then answer the
        runs reserved on it (not yet acknowledged). An idle poll step reads the worker only, or, when
        it sweeps, the worker, the pool's workers and (if a worker has room) the pool's queue."""
        worker = self.get(tenant=tenant, worker_id=worker_id)
        if worker.status != "ALIVE":
            raise Conflict(f"worker {worker_id} was declared dead: register again")
        if worker_id in self._sweep_due(tenant, worker.pool):  # this sweep changed it: read it again
            worker = self.get(tenant=tenant, worker_id=worker_id)
            if worker.status != "ALIVE":  # this very sweep found it three heartbeats late
                raise Conflict(f"worker {worker_id} was declared dead: register again")
        now = self.clock.now()
        out: list[Assignment] = []
        for hold in sorted(worker.holds.values(), key=lambda h: (h.enqueued_at, h.run_id)):
            if hold.state != "reserved" or hold.until < now:
                continue
            job = self.jobs.get_job(hold.job_id)
            if job is None or not isinstance(job.target, WorkerTarget):
                continue
            row = self.runs.get(hold.job_id, hold.scheduled_for)
            if row is not None and row.status in NOTHING_TO_RUN:
                # A stale placement (a crash between reserve and a refused dequeue): nothing to run.
                # Its outcome is settled first (idempotent), in case the api that recorded it died
                # before it settled it: released first, nothing would find the run again.
                self._settle(hold.job_id, row, now)
                if row.status != RunStatus.FAILED:  # over for good (a FAILED one's recorder frees it)
                    self._free(hold.run_id, job, hold.scheduled_for)
                self.workers.release(tenant, worker_id, run_id=hold.run_id, only=hold)
                continue
            out.append(
                Assignment(
                    run_id=hold.run_id,
                    job_id=hold.job_id,
                    tenant=tenant,
                    scheduled_for=times.parse_stored(hold.scheduled_for),
                    handler=job.target.handler,
                    payload=job.payload,
                    attempt=(row.attempt if row else 0) + 1,
                    effect_key=hold.run_id,
                    resources=hold.resources,
                    last_checkpoint=row.checkpoint if row else None,
                )
            )
        return out

    # -- the pool's queue and placement ------------------------------------------------------------

    def hand_off(self, job: Job, scheduled_for: str, kind: str = "scheduled") -> bool:
        """Put a due worker-pool run in its pool's queue (its row PENDING); False if it was already
        handed off (a redelivery), or is past PENDING."""
        if not isinstance(job.target, WorkerTarget):
            raise ValidationFailed("not a worker-pool job", field="target")
        now = self.clock.now()
        at = times.parse_stored(scheduled_for)
        made = self.runs.put_pending(
            job_id=job.job_id, tenant=job.tenant, scheduled_for=at, now=now, kind=kind
        )
        row = made.row
        if row is not None and row.status != RunStatus.PENDING:
            return False
        return self.workers.enqueue(
            self._queued(job, scheduled_for, enqueued_at=row.created_at if row and row.created_at else now)
        )

    def still_holds(self, job: Job, scheduled_for: str) -> bool:
        """Whether the run `scheduled_for` of a worker-pool job is still its pool's, so the job's
        slot it holds must not be taken over however long ago it was renewed: its row is not over
        (PENDING, LEASED, RUNNING) and the run waits in the pool's queue, or is held by a worker that
        is alive (or late and not yet buried, if the sweep that buries it will queue the run again).

        The worker function asks only when it met the slot lapsed (an unswept pool renews nothing:
        a pool with no worker polling or heartbeating): a consistent read of the row, then of the
        queue entry, then of the pool's workers, stopping at the first that answers."""
        if not isinstance(job.target, WorkerTarget) or job.status == JobStatus.CANCELLED:
            return False
        row = self.runs.get(job.job_id, scheduled_for)
        if row is None or row.status not in (RunStatus.PENDING, RunStatus.LEASED, RunStatus.RUNNING):
            return False  # never handed off (its receive died first), or over: the takeover goes on
        if row.created_at is not None and self.workers.is_queued(
            self._queued(job, scheduled_for, enqueued_at=row.created_at)
        ):
            return True
        run_id = run_id_for(job.job_id, times.parse_stored(scheduled_for))
        now = self.clock.now()
        for worker in self.workers.list_workers(job.tenant, pool=job.target.pool):
            hold = worker.holds.get(run_id)
            if hold is None or worker.status != "ALIVE":
                continue
            # A late worker's sweep re-queues a reservation, and an idempotent job's confirmed run;
            # it records a non-idempotent one LOST (over: its slot is free then).
            if not worker.is_late(now) or hold.state == "reserved" or job.idempotent:
                return True
        return False

    @staticmethod
    def _queued(job: Job, scheduled_for: str, *, enqueued_at: datetime) -> QueuedRun:
        assert isinstance(job.target, WorkerTarget)
        return QueuedRun(
            tenant=job.tenant,
            pool=job.target.pool,
            run_id=run_id_for(job.job_id, times.parse_stored(scheduled_for)),
            job_id=job.job_id,
            scheduled_for=scheduled_for,
            resources=Resources(**job.resources.model_dump()) if job.resources else Resources(),
            labels=dict(job.target.labels),
            enqueued_at=enqueued_at,
        )

    def sweep(self, *, tenant: str, pool: str) -> dict[str, str]:
        """Declare late workers dead, re-queue lapsed reservations, then place the waiting runs by
        best fit, oldest first; answers run_id -> worker_id of what this sweep placed."""
        return self._sweep(tenant, pool, set())

    def _sweep_due(self, tenant: str, pool: str) -> set[str]:
        """Sweep the pool unless this process did within SWEEP_EVERY_SECONDS; answers the workers
        the sweep changed (none when it did not sweep)."""
        now = self.clock.now()
        last = self._swept.get((tenant, pool))
        if last is not None and now - last < timedelta(seconds=SWEEP_EVERY_SECONDS):
            return set()
        self._swept[(tenant, pool)] = now
        touched: set[str] = set()
        self._sweep(tenant, pool, touched)
        return touched

    def _sweep(self, tenant: str, pool: str, touched: set[str]) -> dict[str, str]:
        now = self.clock.now()
        alive: dict[str, Worker] = {}
        for worker in self.workers.list_workers(tenant, pool=pool):
            if worker.status != "ALIVE":
                continue
            if worker.is_late(now):
                touched.add(worker.worker_id)
                self._bury(worker)
                continue
            for hold in worker.holds.values():
                if hold.state == "reserved" and hold.until < now:
                    # (this sweep still counts the hold on this worker: the run goes elsewhere if
                    # it fits, or waits for the next sweep)
                    touched.add(worker.worker_id)
                    self.workers.requeue_lapsed(
                        tenant, worker.worker_id, hold=hold, run=self._queued_again(worker, hold)
                    )
            alive[worker.worker_id] = worker
        return self._place(tenant, pool, alive, now, touched)

    def _bury(self, worker: Worker) -> None:
        before = self.workers.mark_dead(worker.tenant, worker.worker_id, expected_version=worker.version)
        if before is None:
            return  # another sweep buried it, or it changed: the next sweep decides
        now = self.clock.now()
        for hold in before.holds.values():
            job = self.jobs.get_job(hold.job_id)
            row = self.runs.get(hold.job_id, hold.scheduled_for)
            if row is not None and row.status in NOTHING_TO_RUN:
                # Over already: recorded by this worker's `finished` in an api process that died
                # before it settled the outcome (its hold is released only after the settling),
                # or a stray placement. Settled here (each step is idempotent), then its markers
                # are freed (a FAILED run only by its recorder: it may be re-armed, its slot taken
                # again by its retry); it is not queued again.
                self._settle(hold.job_id, row, now)
                if row.worker == worker.worker_id or row.status != RunStatus.FAILED:
                    self._free(hold.run_id, job, hold.scheduled_for)
                continue
            if hold.state == "confirmed" and job is not None and not job.idempotent:
                # It may have run: an operator decides (LOST), as for a non-idempotent takeover.
                lost = self.runs.lose(
                    hold.job_id,
                    hold.scheduled_for,
                    owner=worker.worker_id,
                    now=now,
                    error=("WorkerLost", f"worker {worker.worker_id} missed three heartbeats"),
                )
                if lost.applied:
                    self._free(hold.run_id, job, hold.scheduled_for)  # a LOST run is over
                continue
            # Back to the queue: it has not finished, so it keeps the job's slot and key slots.
            self._requeue(worker, hold)

    def _requeue(self, worker: Worker, hold: Hold) -> None:
        self.workers.enqueue(self._queued_again(worker, hold))

    @staticmethod
    def _queued_again(worker: Worker, hold: Hold) -> QueuedRun:
        """The queue entry of a released hold: back at its old place, oldest first."""
        return QueuedRun(
            tenant=worker.tenant,
            pool=worker.pool,
            run_id=hold.run_id,
            job_id=hold.job_id,
            scheduled_for=hold.scheduled_for,
            resources=hold.resources,
            labels=hold.labels,
            enqueued_at=hold.enqueued_at,
        )

    def _place(
        self, tenant: str, pool: str, alive: dict[str, Worker], now: datetime, touched: set[str]
    ) -> dict[str, str]:
        if not self._queue_worth_reading(tenant, pool, alive, now):
            return {}
        held = {
            run_id
            for w in alive.values()
            for run_id, h in w.holds.items()
            if h.state == "confirmed" or h.until >= now
        }
        placed: dict[str, str] = {}
        for queued in self.workers.waiting(tenant, pool, limit=PLACE_BATCH):
            if queued.run_id in held:
                self.workers.dequeue(queued)  # a placement that crashed before its dequeue
                continue
            request = Request(queued.run_id, queued.resources, queued.labels)
            self._keep(queued.run_id, queued.job_id, queued.scheduled_for, since=queued.enqueued_at)
            for _ in range(RESERVE_TRIES):
                chosen = best_fit(request, [Slot(w.worker_id, w.free(), w.labels) for w in alive.values()])
                if chosen is None:
                    break  # it waits, oldest first, for capacity
                hold = Hold(
                    run_id=queued.run_id,
                    job_id=queued.job_id,
                    scheduled_for=queued.scheduled_for,
                    resources=queued.resources,
                    until=now + timedelta(seconds=RESERVATION_SECONDS),
                    enqueued_at=queued.enqueued_at,
                    labels=queued.labels,
                )
                worker = alive[chosen]
                if self.workers.reserve(tenant, chosen, hold=hold, expected_version=worker.version):
                    touched.add(chosen)
                    alive[chosen] = worker.model_copy(
                        update={"holds": {**worker.holds, hold.run_id: hold}, "version": worker.version + 1}
                    )
                    if self.workers.dequeue(queued):
                        placed[queued.run_id] = chosen
                    else:  # another placer took this entry first: one reservation per run
                        self.workers.release(tenant, chosen, run_id=hold.run_id, only=hold)
                    break
                fresh = self.workers.get_worker(tenant, chosen)  # another placer won: read it again
                if fresh is None or fresh.status != "ALIVE":
                    alive.pop(chosen, None)
                else:
                    alive[chosen] = fresh
        return placed

    def _queue_worth_reading(self, tenant: str, pool: str, alive: dict[str, Worker], now: datetime) -> bool:
        """Whether this sweep reads the pool's queue (a Query): when an alive worker has room (CPU and
        memory free: a job's resources ask for some of both), or this process has not read it for a
        third of a hold (the waiting runs' markers are renewed as it is read). A run that asks for
        nothing waits for a worker with room, or that read."""
        room = any(w.free().cpu > 0 and w.free().memory_mib > 0 for w in alive.values())
        last = self._queue_read.get((tenant, pool))
        every = self.markers.hold_seconds() / 3 if self.markers is not None else None
        if not room and last is not None and (every is None or now - last < timedelta(seconds=every)):
            return False
        if not room and last is None and every is None:
            return False
        self._queue_read[(tenant, pool)] = now
        return True

    def waiting(self, *, tenant: str, pool: str) -> list[QueuedRun]:
        """The pool's waiting runs, oldest first."""
        return self.workers.waiting(tenant, pool, limit=PLACE_BATCH)

    def queue(self, *, tenant: str, pool: str, cursor: str | None, limit: int) -> QueuePage:
        """A page of the tenant's pool's waiting runs (placed on no worker yet), oldest first; an
        opaque cursor continues after the previous page's last run. Another tenant's pool of the same
        name is another queue (this one's is empty), and a cursor of another pool or tenant is a 400.

        A run placed since the previous page (out of the queue) or queued again behind the cursor
        (a lapsed reservation keeps its first enqueued_at) may be missed by a pager: it is a glance."""
        if not 1 <= limit <= MAX_QUEUE_PAGE:
            raise ValidationFailed(f"limit: must be between 1 and {MAX_QUEUE_PAGE}", field="limit")
        start = (
            cursors.decode(cursor, keys={"PK", "SK"}, pinned={"PK": pool_queue_pk(tenant, pool)})
            if cursor
            else None
        )
        runs, last = self.workers.waiting_page(tenant, pool, start=start, limit=limit)
        return QueuePage(items=runs, next_cursor=cursors.encode(last) if last else None)

    # -- the worker's reports on a run -------------------------------------------------------------

    def _held(self, tenant: str, worker_id: str, run_id: str) -> tuple[Worker, Hold | None]:
        worker = self.get(tenant=tenant, worker_id=worker_id)
        hold = worker.holds.get(run_id) if worker.status == "ALIVE" else None
        return worker, hold

    def _row(self, tenant: str, run_id: str) -> tuple[str, str, Execution]:
        try:
            job_id, at = parse_run_id(run_id)
        except ValueError:
            raise NotFound(f"no run {run_id}") from None
        sf = times.stored(at)
        row = self.runs.get(job_id, sf)
        if row is None or row.tenant != tenant:
            raise NotFound(f"no run {run_id}")
        return job_id, sf, row

    def ack(self, *, tenant: str, worker_id: str, run_id: str) -> Report:
        """PENDING -> LEASED by the worker holding the run's reservation, then the hold confirmed."""
        job_id, sf, row = self._row(tenant, run_id)
        _, hold = self._held(tenant, worker_id, run_id)
        if hold is None:
            return Report(False, row)  # not placed here, placed elsewhere since, or a dead worker's
        now = self.clock.now()
        lease = Lease(
            owner=worker_id,
            message=f"pool:{worker_id}",
            worker=worker_id,
            until=now + timedelta(seconds=DEAD_AFTER_SECONDS),
        )
        moved = self.runs.claim(job_id, sf, lease=lease, now=now)
        if not moved.applied:
            return Report(False, moved.row)  # a repeated ack, or a run that moved on
        self.workers.confirm(tenant, worker_id, run_id=run_id, now=now)
        self._keep(run_id, job_id, sf)
        return Report(True, self.runs.get(job_id, sf))

    def started(self, *, tenant: str, worker_id: str, run_id: str) -> Report:
        """LEASED -> RUNNING, only for the ALIVE worker holding the run."""
        job_id, sf, row = self._row(tenant, run_id)
        _, hold = self._held(tenant, worker_id, run_id)
        if hold is None or hold.state != "confirmed":
            return Report(False, row)
        moved = self.runs.start(job_id, sf, owner=worker_id, now=self.clock.now())
        if moved.applied:
            self._keep(run_id, job_id, sf)
        return Report(moved.applied, self.runs.get(job_id, sf) if moved.applied else moved.row)

    def beat(
        self,
        *,
        tenant: str,
        worker_id: str,
        run_id: str,
        progress: str | None = None,
        checkpoint: str | None = None,
    ) -> Report:
        """Extend the worker's lease on a LEASED|RUNNING run it holds, then keep the handler's
        `progress` and/or `checkpoint` (JSON texts, sized by the caller; None: left as is) on the
        run's row as the worker function does (RunStore.save_progress, owner = the worker). Applied
        only if both writes were; a worker that does not hold the run changes nothing. The run
        answers its cancel mark.

            extend the lease ──> save progress/checkpoint (only if the lease was extended)
            crash between: the lease is renewed and nothing is kept; the worker's ctx.checkpoint()
                got no answer, raises, and the handler may checkpoint again
        """
        job_id, sf, row = self._row(tenant, run_id)
        _, hold = self._held(tenant, worker_id, run_id)
        if hold is None or hold.state != "confirmed":
            return Report(False, row)
        now = self.clock.now()
        until = now + timedelta(seconds=DEAD_AFTER_SECONDS)
        applied = self.runs.extend_lease(job_id=job_id, scheduled_for=sf, owner=worker_id, until=until)
        if applied and (progress is not None or checkpoint is not None):
            applied = self.runs.save_progress(
                job_id, sf, owner=worker_id, now=now, progress=progress, checkpoint=checkpoint
            )
        if applied:
            self._keep(run_id, job_id, sf)
        return Report(applied, self.runs.get(job_id, sf))

    def finished(
        self,
        *,
        tenant: str,
        worker_id: str,
        run_id: str,
        result: str | None,
        error: tuple[str, str] | None,
    ) -> Report:
        """RUNNING -> SUCCEEDED (result) | FAILED (error) by the worker holding the run, settled,
        then the job's markers and the worker's hold released. A duplicate or a stale report changes
        nothing.

            record ──> settle ──> free the job's slot and key slots ──> release the worker's hold
            crash after the record: the hold is still on the worker; the worker's retry of its
                report, or the sweep that buries the worker (heartbeats stopped), or the heartbeat
                that no longer reports the run, settles it again (idempotent) and releases
            crash after the markers are freed: the same; a second free is a refused no-op
        """
        job_id, sf, row = self._row(tenant, run_id)
        reporter, hold = self._held(tenant, worker_id, run_id)
        now = self.clock.now()
        if hold is None or hold.state != "confirmed" or row.status != RunStatus.RUNNING:
            if row.worker == worker_id and row.status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
                # The recording worker's report again: a retry after an answer it never got, maybe
                # from a process that died before it settled the outcome. Settling again is a no-op.
                self._settle(job_id, row, now)
                if hold is not None:  # still held (that process died before the releases): now
                    self._end(reporter, hold, job_id, sf)
            return Report(False, row)
        end = AttemptEnd(
            attempt=row.attempt,
            started_at=row.started_at or now,
            finished_at=now,
            result=result if error is None else None,
            error=error,
            worker=worker_id,
        )
        moved = self.runs.record(job_id, sf, owner=worker_id, end=end)
        if moved.applied:
            self.crash("pools.finished.before_settle")
            recorded = self.runs.get(job_id, sf)
            self._settle(job_id, recorded, now)
            self.crash("pools.finished.before_release")
            self._end(reporter, hold, job_id, sf)
            return Report(True, recorded)
        return Report(False, moved.row)

    def _end(self, worker: Worker, hold: Hold, job_id: str, sf: str) -> None:
        """A settled run's last steps: the job's markers freed, then the worker's hold released
        (last: while the hold is there, a sweep or a retried report can still settle the run). The
        capacity it frees is placed at this process's next poll or heartbeat of the pool, at once."""
        if self.markers is not None:
            self._free(hold.run_id, self.jobs.get_job(job_id), sf)
        self.workers.release(worker.tenant, worker.worker_id, run_id=hold.run_id)
        self._swept.pop((worker.tenant, worker.pool), None)

    # -- the job's markers a handed-off run holds ------------------------------------------------

    def _keep(self, run_id: str, job_id: str, sf: str, *, since: datetime | None = None) -> None:
        """Renew the run's markers unless this process renewed them (or, `since`, they were known
        renewed) within a third of a hold: a live run's markers never lapse, at a write per run
        per third of a hold at most."""
        if self.markers is None:
            return
        now = self.clock.now()
        last = self._renewed.get(run_id, since)
        if last is not None and now - last < timedelta(seconds=self.markers.hold_seconds() / 3):
            return
        job = self.jobs.get_job(job_id)
        if job is None:
            return
        self.markers.renew_handed_off(job, sf)
        self._renewed[run_id] = now

    def _free(self, run_id: str, job: Job | None, sf: str) -> None:
        self._renewed.pop(run_id, None)
        if self.markers is not None and job is not None:
            self.markers.release_handed_off(job, sf)

    def _heard(self, worker: Worker, runs: Mapping[str, str]) -> bool:
        """At a heartbeat: renew the markers of the runs the worker holds and reports; settle and
        release a confirmed hold it no longer reports whose run it recorded (the api that recorded
        it died before settling, and the worker does not retry its report). True if it released one."""
        ended = False
        for hold in worker.holds.values():
            if hold.state != "confirmed":
                continue
            if hold.run_id in runs:
                self._keep(hold.run_id, hold.job_id, hold.scheduled_for)
                continue
            row = self.runs.get(hold.job_id, hold.scheduled_for)
            if (
                row is not None
                and row.worker == worker.worker_id
                and row.status in (RunStatus.SUCCEEDED, RunStatus.FAILED)
            ):
                self._settle(hold.job_id, row, self.clock.now())
                self._end(worker, hold, hold.job_id, hold.scheduled_for)
                ended = True
        return ended

    def _settle(self, job_id: str, row: Execution | None, now: datetime) -> None:
        job = self.jobs.get_job(job_id)
        if job is None or row is None:
            return
        settle_recorded(job, row, failures=self.failures, dag=self.dag, now=now)
