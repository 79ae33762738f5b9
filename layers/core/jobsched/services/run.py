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
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from aws_lambda_powertools import Logger

from jobsched.adapters.dynamodb import JobStore, RunStore, execution_from_item, run_id_for
from jobsched.adapters.sqs import RunQueue
from jobsched.domain import times
from jobsched.domain.models import Execution, Job, RunError, RunMessage
from jobsched.domain.status import HELD, TERMINAL, JobStatus, RunStatus
from jobsched.handlers import HandlerRegistry, RunContext
from jobsched.ports import Clock, CrashPoints, no_crash
from jobsched.services.dag import ONCE, DagService, root_schedule_of
from jobsched.services.dispatch import jitter_offset
from jobsched.services.failures import LEASE_EXPIRED, FailureService
from jobsched.settings import Settings

logger = Logger(child=True)

# How long a worker that received a message early waits for its second (messages are delayed
# in whole seconds, rounded down); a longer gap means clock skew, and waiting longer would only
# hold the lease idle.
MAX_EARLY_WAIT_SECONDS = 2.0
MAX_RESULT_BYTES = 16 * 1024
MAX_ERROR_CHARS = 2000
LOST_MESSAGE = "a worker died holding this run and the job is not idempotent: not re-run automatically"


class Outcome(StrEnum):
    """What processing one message did."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DUPLICATE = "duplicate"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    LOST = "lost"
    SKIPPED = "skipped"


class InFlightElsewhere(Exception):
    """This very message is being processed by another receive; leave it in the queue."""


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
    registry: HandlerRegistry
    settings: Settings
    clock: Clock
    failures: FailureService
    dag: DagService
    worker_id: str = field(default_factory=lambda: f"worker-{uuid.uuid4().hex[:12]}")
    crash: CrashPoints = no_crash
    sleep: object = time.sleep

    def process(self, delivery: Delivery) -> Outcome:
        """Run the message's run at most to one recorded result; raise to leave the message queued."""
        message = RunMessage.model_validate_json(delivery.body)
        sf = message.scheduled_for
        job = self.jobs.get_job(message.job_id)
        if job is None or job.status == JobStatus.CANCELLED:
            self.runs.transition(
                job_id=message.job_id, scheduled_for=sf, target=RunStatus.CANCELLED, now=self.clock.now()
            )
            return Outcome.CANCELLED
        # Backfills are an operator's explicit, rate-limited request for past ticks: no gate. A manual
        # run honours the overlap policy only.
        gate = (
            None
            if message.kind == "backfill"
            else self._gate(job, sf, delivery, manual=message.kind == "manual")
        )
        if gate is not None:
            return gate
        holds = self._guards_overlap(job) and message.kind != "backfill"
        # Released on every way out but a process death (BaseException: Crash, SystemExit), which
        # releases nothing: the hold then expires with its lease, as it would on AWS.
        try:
            outcome = self._run(job, sf, delivery)
        except Exception:
            if holds:
                self.jobs.release_job(job.job_id, run=sf)
            raise
        if holds:
            self.jobs.release_job(job.job_id, run=sf)
        return outcome

    def _guards_overlap(self, job: Job) -> bool:
        return job.type == "recurring" and job.policy.overlap_policy != "allow"

    def _gate(self, job: Job, sf: str, delivery: Delivery, *, manual: bool) -> Outcome | None:
        """Whether the tick may start now: paused job, starting deadline, overlap policy.

        The overlap check is a compare-and-set on the job at the moment the run is about to be
        leased (ticks are handed over ahead of time, so this is the only moment that knows).
        """
        now = self.clock.now()
        if job.status == JobStatus.PAUSED and not manual:
            return self._skip(job, sf, "paused", first_attempt_only=False)
        policy = job.policy
        late = (now - times.parse_stored(sf)).total_seconds()
        deadline = policy.starting_deadline_seconds
        if (
            not manual
            and deadline is not None
            and late > deadline + jitter_offset(job.job_id, policy.jitter_seconds)
        ):
            skipped = self._skip(job, sf, "deadline", first_attempt_only=True)
            if skipped is not None:
                return skipped
        if not self._guards_overlap(job):
            return None
        until = now + timedelta(seconds=self.settings.lease_seconds)
        if self.jobs.hold_job(job.job_id, run=sf, until=until, now=now, was_buffered=job.buffered_run == sf):
            return None
        if policy.overlap_policy == "buffer_one" and self.jobs.buffer_behind(
            job.job_id, run=sf, until=until, now=now
        ):
            raise WaitBehind(delivery.message_id)
        skipped = self._skip(job, sf, "overlap", first_attempt_only=True)
        if skipped is not None:
            return skipped
        # A retry of a run that already started once is not dropped for overlap: it waits.
        raise WaitBehind(delivery.message_id)

    def _skip(self, job: Job, sf: str, reason: str, *, first_attempt_only: bool) -> Outcome | None:
        done = self.runs.transition(
            job_id=job.job_id,
            scheduled_for=sf,
            target=RunStatus.SKIPPED,
            now=self.clock.now(),
            set_values={"reason": reason},
            first_attempt_only=first_attempt_only,
        )
        if done.applied:
            return Outcome.SKIPPED
        row = done.execution
        if row is None or row.status in TERMINAL:
            return Outcome.DUPLICATE  # finished, cancelled or skipped already: nothing to do
        if row.status == RunStatus.PENDING:
            return None  # a retry of a run that started before: it is not skipped
        # LEASED, RUNNING or FAILED: the run started and its holder died (or it awaits a retry).
        # Never drop its message: for overlap it waits for the job; otherwise the claim decides.
        if reason == "overlap":
            raise WaitBehind(f"run {sf} already started; waiting for the job")
        return None

    def _run(self, job: Job, sf: str, delivery: Delivery) -> Outcome:
        now = self.clock.now()
        owner = f"{self.worker_id}/{uuid.uuid4().hex[:8]}"
        claim = self.runs.transition(
            job_id=job.job_id,
            scheduled_for=sf,
            target=RunStatus.LEASED,
            now=now,
            set_values={
                "lease_owner": owner,
                "lease_message": delivery.message_id,
                "lease_until": times.stored(now + timedelta(seconds=self.settings.lease_seconds)),
                "worker": self.worker_id,
            },
            increment_attempt=True,
            takeover_expired_lease=True,
            create_if_missing={
                "run_id": run_id_for(job.job_id, times.parse_stored(sf)),
                "job_id": job.job_id,
                "tenant": job.tenant,
                "scheduled_for": sf,
            },
        )
        if not claim.applied:
            return self._refused(job, claim.item, delivery)
        previous = claim.previous or {}
        attempt = int(previous.get("attempt", {}).get("N", "0")) + 1
        took_over = previous.get("status", {}).get("S") in {s.value for s in HELD}
        if took_over:
            logger.warning(
                "a worker died holding this run; taking it over", extra={"job_id": job.job_id, "sf": sf}
            )
            if not job.idempotent:
                # Re-running a job that declared its effect unsafe to repeat is an operator's call.
                self.runs.transition(
                    job_id=job.job_id,
                    scheduled_for=sf,
                    target=RunStatus.LOST,
                    now=self.clock.now(),
                    owner=owner,
                    set_values={"error_type": "LeaseLost", "error_message": LOST_MESSAGE},
                )
                return Outcome.LOST
        self.crash("run.after_lease")

        scheduled_for = times.parse_stored(sf)
        early = (scheduled_for - self.clock.now()).total_seconds()
        if early > 0:
            self.sleep(min(early, MAX_EARLY_WAIT_SECONDS))  # type: ignore[operator]

        started = self.clock.now()
        start = self.runs.transition(
            job_id=job.job_id,
            scheduled_for=sf,
            target=RunStatus.RUNNING,
            now=started,
            owner=owner,
            set_values={"started_at": times.stored(started)},
        )
        if not start.applied:
            return Outcome.LEASE_LOST

        context = RunContext(
            job_id=job.job_id,
            run_id=run_id_for(job.job_id, scheduled_for),
            tenant=job.tenant,
            scheduled_for=scheduled_for,
            attempt=attempt,
            effect_key=run_id_for(job.job_id, scheduled_for),
        )
        if took_over and attempt > job.retry.max_attempts:
            # Every attempt died with its worker: running it again would only kill another.
            result: object = None
            error: tuple[str, str] | None = (
                LEASE_EXPIRED,
                f"workers died holding this run {attempt - 1} time(s)",
            )
        else:
            heartbeat = _Heartbeat(
                self,
                delivery,
                owner=owner,
                job_id=job.job_id,
                scheduled_for=sf,
                holds_job=self._guards_overlap(job),
            )
            heartbeat.start()
            try:
                result, error = self._invoke(
                    job.handler, job.payload, context, timeout=job.retry.timeout_seconds
                )
            finally:
                heartbeat.stop()
        self.crash("run.after_handler")

        finished = self.clock.now()
        values: dict[str, str | int] = {
            "finished_at": times.stored(finished),
            "duration_ms": max(0, int((finished - started).total_seconds() * 1000)),
        }
        record: dict[str, str | int] = {
            "attempt": attempt,
            "worker": self.worker_id,
            "started_at": times.stored(started),
            "finished_at": times.stored(finished),
        }
        if error is None:
            values["result"] = _bounded_json(result)
            target = RunStatus.SUCCEEDED
        else:
            values["error_type"], values["error_message"] = error
            record["error_type"], record["error_message"] = error
            target = RunStatus.FAILED
        record["outcome"] = target.value
        done = self.runs.transition(
            job_id=job.job_id,
            scheduled_for=sf,
            target=target,
            now=finished,
            owner=owner,
            set_values=values,
            append_attempt=record,
        )
        if not done.applied:
            return Outcome.LEASE_LOST
        self.crash("run.after_record")
        if error is not None:
            failed = Execution(
                run_id=context.run_id,
                job_id=job.job_id,
                tenant=job.tenant,
                scheduled_for=scheduled_for,
                status=RunStatus.FAILED,
                attempt=attempt,
                error=RunError(type=error[0], message=error[1]),
                replays=int(previous.get("replays", {}).get("N", "0")),
            )
            retryable = None if error[0] != LEASE_EXPIRED else False
            self.failures.hand_over(job, failed, retryable=retryable)
            return Outcome.FAILED
        self.crash("run.before_signal")
        succeeded = Execution(
            run_id=context.run_id,
            job_id=job.job_id,
            tenant=job.tenant,
            scheduled_for=scheduled_for,
            status=RunStatus.SUCCEEDED,
            attempt=attempt,
            replays=int(previous.get("replays", {}).get("N", "0")),
        )
        if root_schedule_of(job) == ONCE:
            # Read the dependants again, after the success is recorded: one that joined while this
            # run ran is either seen here or sees the success itself (DagService.join).
            job = self.jobs.get_job(job.job_id) or job
        self.dag.signal_success(job, succeeded)
        if root_schedule_of(job) == ONCE:  # a one-off, or a dependant in a one-off chain: done
            self.jobs.set_job_status(
                job.job_id,
                target=JobStatus.COMPLETED,
                sources=[JobStatus.SCHEDULED],
                now=finished,
                leave_index=True,
            )
        return Outcome.SUCCEEDED

    def _refused(self, job: Job, row: dict[str, Any] | None, delivery: Delivery) -> Outcome:
        status = (row or {}).get("status", {})
        if (
            row
            and isinstance(status, dict)
            and status.get("S") == RunStatus.SUCCEEDED.value
            and job.dependants
        ):
            # A worker died between recording the success and signalling the dependants (or this is
            # a duplicate): signal; the execution name makes a second signal of one run a no-op.
            self.dag.signal_success(job, execution_from_item(row))
        if row and isinstance(status, dict) and status.get("S") == RunStatus.FAILED.value:
            # A worker died between recording the failure and handing it to the workflow (or this is
            # a duplicate of a message whose failure was handed over): start it; the execution name
            # makes a second start a no-op.
            self.failures.hand_over(job, execution_from_item(row))
        held_by = (row or {}).get("lease_message", {})
        held = isinstance(status, dict) and status.get("S") in {s.value for s in HELD}
        if held and isinstance(held_by, dict) and held_by.get("S") == delivery.message_id:
            raise InFlightElsewhere(delivery.message_id)
        return Outcome.DUPLICATE

    def _invoke(
        self, name: str, payload: dict[str, Any], ctx: RunContext, *, timeout: int | None
    ) -> tuple[object, tuple[str, str] | None]:
        if timeout is None:
            return self._call(name, payload, ctx)
        # Python cannot kill a thread: a handler past its timeout is failed and left to finish in
        # the background (its late result is discarded: the run has moved on). Handlers that must
        # stop should poll their own deadline.
        box: dict[str, tuple[object, tuple[str, str] | None]] = {}
        thread = threading.Thread(
            target=lambda: box.update(out=self._call(name, payload, ctx)),
            name="jobsched-handler",
            daemon=True,
        )
        thread.start()
        thread.join(timeout)
        if thread.is_alive() or "out" not in box:
            return None, ("Timeout", f"attempt {ctx.attempt} ran longer than timeout_seconds={timeout}")
        return box["out"]

    def _call(
        self, name: str, payload: dict[str, Any], ctx: RunContext
    ) -> tuple[object, tuple[str, str] | None]:
        try:
            handler = self.registry.get(name)
            return handler(payload, ctx), None
        except Exception as exc:  # a handler's failure is data about the run, not a worker fault
            logger.info("handler failed", extra={"job_id": ctx.job_id, "error": repr(exc)})
            message = (str(exc) or type(exc).__name__)[:MAX_ERROR_CHARS]
            return None, (type(exc).__name__, message)


def _bounded_json(value: object) -> str:
    text = json.dumps(value, default=str, separators=(",", ":"))
    if len(text.encode()) > MAX_RESULT_BYTES:
        return json.dumps({"truncated": True, "bytes": len(text.encode())})
    return text


class _Heartbeat:
    """Extends the message's visibility and the row's lease while a handler runs long."""

    def __init__(
        self,
        worker: Worker,
        delivery: Delivery,
        *,
        owner: str,
        job_id: str,
        scheduled_for: str,
        holds_job: bool,
    ) -> None:
        self._worker, self._delivery = worker, delivery
        self._owner, self._job_id, self._sf = owner, job_id, scheduled_for
        self._holds_job = holds_job
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobsched-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        lease = self._worker.settings.lease_seconds
        while not self._stop.wait(lease / 3):
            now = self._worker.clock.now()
            self._worker.queue.extend(self._delivery.receipt_handle, seconds=lease)
            self._worker.runs.extend_lease(
                job_id=self._job_id,
                scheduled_for=self._sf,
                owner=self._owner,
                until=now + timedelta(seconds=lease),
            )
            if self._holds_job:
                self._worker.jobs.extend_hold(
                    self._job_id, run=self._sf, until=now + timedelta(seconds=lease)
                )
