"""The bad path: hand failed runs to the failure workflow, reconcile poison messages, list and replay
dead letters. Healthy runs never come here."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from jobsched import telemetry
from jobsched.asl_inputs import Alert, FailureInput, JobKeys, ReplayInput
from jobsched.domain import cursors, times
from jobsched.domain.ecs_tasks import TASK_LOST
from jobsched.domain.keys import execution_name, job_pk, parse_run_id, run_sk
from jobsched.domain.models import Execution, Job, RunMessage, takes_slot
from jobsched.domain.packs import PackedDefinition
from jobsched.domain.results import DeadLetterPage, Replay
from jobsched.domain.status import RunStatus
from jobsched.domain.targets import describe, final_error_type
from jobsched.errors import Conflict, NotFound, ValidationFailed
from jobsched.ports import Clock, JobStore, Metrics, NoMetrics, RunStore, StateMachines
from jobsched.services.alerts import AlertService, policy_of
from jobsched.services.dag import ONCE, DagService, root_schedule_of
from jobsched.services.packs import PackedJobs
from jobsched.settings import Settings

MAX_PAGE = 100
POISON = "PoisonMessage"
LEASE_EXPIRED = "LeaseExpired"


def unknown_outcome(error_type: str) -> bool:
    """Whether an attempt that failed with `error_type` may have had its effect: its task stopped with
    no exit code (TaskLost), or its worker died holding it (LeaseExpired, a takeover's record). Such
    an attempt of a job that is not idempotent is never run again by the retry policy (a replay is
    the user's call), and its run may show no effect or one."""
    return error_type in (TASK_LOST, LEASE_EXPIRED)


@dataclass
class FailureService:
    """Retries, dead letters and replays, through the failure workflow."""

    jobs: JobStore
    runs: RunStore
    state_machines: StateMachines
    settings: Settings
    clock: Clock
    dag: DagService
    rng: random.Random = random.Random()  # noqa: RUF009 - one generator per process is the point
    alerts: AlertService | None = None
    # Retries and dead letters, counted where the failure workflow starts (jobsched.telemetry).
    metrics: Metrics = field(default_factory=NoMetrics)
    # Packed one-offs (services/packs.py): a replay reads its job by id, which copies a packed one out,
    # for its own tenant only.
    packed: PackedJobs | None = None

    # -- a failed attempt -> the workflow ----------------------------------------------------------
    def hand_over(
        self,
        job: Job,
        run: Execution,
        *,
        retryable: bool | None = None,
        retry_after: float | None = None,
        origin: str = "fail",
    ) -> bool:
        """Start the workflow for run's failed attempt (once per attempt and origin: the name is the key).

        `retryable` None: decided by the job's retry policy from the attempt and error type.
        `retry_after`: the target's hint (HTTP 429/503 Retry-After, seconds): the re-arm waits at
        least that long, and never longer than the backoff's max_seconds.
        `origin` "poison": the reconciler's failure of an attempt whose own failure may have been
        handed over already (a re-armed run whose message was then redriven): its own execution.
        """
        error_type = run.error.type if run.error else "Unknown"
        policy = job.retry
        if retryable is None:
            # A target's final answer (a 4xx, a refused address) is never retried, whatever the policy;
            # nor is a lost task of a job that is not idempotent: like a run whose worker died (LOST),
            # it may have had its effect, so running it again is the user's call (a replay).
            retryable = (
                policy.retries_after(run.attempt, error_type)
                and not final_error_type(error_type)
                and not (unknown_outcome(error_type) and not job.idempotent)
            )
        now = self.clock.now()
        sf = times.stored(run.scheduled_for)
        message = run.error.message if run.error else ""
        if self.alerts is not None:
            # "failed": once per run and replay series (the first failed attempt raises it).
            self.alerts.raise_alert(
                job,
                "failed",
                scheduled_for=run.scheduled_for,
                series=run.replays,
                detail=f"attempt {run.attempt} failed: {error_type}: {message}"
                + (" (retried)" if retryable and run.attempt < policy.max_attempts else ""),
            )
        payload = FailureInput(
            retryable=retryable,
            attempt=run.attempt,
            max_attempts=policy.max_attempts,
            wait_seconds=policy.wait_before(
                max(1, run.attempt), unit_random=self.rng.random(), retry_after=retry_after
            ),
            runs_table=self.settings.runs_table,
            pk=job_pk(job.job_id),
            sk=run_sk(sf),
            queue_url=self.settings.execution_queue_url,
            message=RunMessage(
                job_id=job.job_id,
                scheduled_for=sf,
                guard=takes_slot(job.type, job.policy.overlap_policy),
                # A packed job's retry carries its definition, as its first message did.
                packed=PackedDefinition.of(job).compact() if job.packed else None,
            ).model_dump_json(),
            topic_arn=self.settings.alert_topic_arn,
            dl_key=dead_letter_key(job.tenant),
            dl_sk=f"{times.stored(now)}#{run.run_id}",
            dead_at=times.stored(now),
            # Its job ends with it (SCHEDULED -> FAILED) if this is the one run the job lives for.
            **_job_keys(self.settings, job, run),
            # Every transitive dependant's run of this period, marked UPSTREAM_FAILED if it dead-letters.
            propagate=self.dag.failed_dependants(job, run),
            **self._dead_letter_alert(job, run, error_type=error_type, error_message=message),
        )
        # One execution per (run, replay series, attempt): a duplicate start of the same failure is a
        # no-op, and a replayed run's attempt 1 is a new failure, not the first series' attempt 1.
        name = execution_name(origin, run.run_id, f"r{run.replays}", f"a{run.attempt}")
        started = self.state_machines.start_failure(name, payload.model_dump(mode="json"))
        if started:  # a repeated hand-over of one failure starts nothing and counts nothing
            # The workflow's CanRetry choice, read the same way: retry, or dead-letter.
            retry = payload.retryable and payload.attempt < payload.max_attempts
            self.metrics.emit(
                telemetry.RETRIES if retry else telemetry.runs("dead_letter"), 1, telemetry.COUNT
            )
        return started

    def _dead_letter_alert(
        self, job: Job, run: Execution, *, error_type: str, error_message: str
    ) -> dict[str, Any]:
        """The failure workflow's alert fields: the message it publishes if it dead-letters the run,
        whether the job wants that, and the alert item it records first (conditionally: one per run
        and replay series, so a retried workflow step publishes nothing twice)."""
        wanted = policy_of(job).wants("dead_letter")
        detail = f"dead-lettered after {run.attempt} attempt(s): {error_type}: {error_message}"
        kept = (
            self.alerts.make(
                job, "dead_letter", scheduled_for=run.scheduled_for, detail=detail, series=run.replays
            )
            if self.alerts is not None
            else None
        )
        alert = Alert(
            alert_id=kept.alert_id if kept else "",
            kind="dead_letter",
            at=times.iso(kept.at) if kept else times.iso(self.clock.now()),
            detail=detail[:500],
            job_id=job.job_id,
            run_id=run.run_id,
            tenant=job.tenant,
            handler=describe(job.target),
            scheduled_for=times.iso(run.scheduled_for),
            attempts=run.attempt,
            error_type=error_type,
            error_message=error_message,
        )
        record = wanted and kept is not None and bool(self.settings.alerts_table)
        return {
            "alert": alert,
            "alert_wanted": wanted,
            "record_alert": record,
            "alerts_table": self.settings.alerts_table,
            "alert_item": self.alerts.store.workflow_item(kept) if record and self.alerts and kept else {},
        }

    def reconcile(self, message: RunMessage) -> str:
        """A message the execution queue gave up on (maxReceiveCount): dead-letter its run, visibly.

        Nothing is lost in a queue nobody reads: the run leaves whatever non-final state the dying
        workers left it in along RUNNING -> FAILED, and the workflow dead-letters it with an alert.
        """
        # A packed job's message carries its definition: read nothing (a read by id would copy it out,
        # and this function may not write jobs: least privilege). Copied out or not, its run row is
        # what is failed, and FailJob conditions on the job item it may have.
        if message.packed is not None:
            # its item if it was copied out (a read of the store that writes nothing), else its definition
            viewed = self.packed.view(message.job_id) if self.packed is not None else None
            job: Job | None = viewed or PackedDefinition.model_validate(message.packed).job()
        else:
            job = self.jobs.get_job(message.job_id)
        if job is None:
            return "no_job"
        now = self.clock.now()
        failed = self.runs.fail_stuck(
            job_id=job.job_id,
            scheduled_for=message.scheduled_for,
            tenant=job.tenant,
            now=now,
            error_type=POISON,
            error_message="the run's message exceeded the queue's maxReceiveCount (workers kept dying on it)",
        )
        if failed is None:
            row = self.runs.get(job.job_id, times.parse_stored(message.scheduled_for))
            if row is None or row.status != RunStatus.FAILED:
                return "already_final"
            # A FAILED run whose hand-over did not happen: do it now (a no-op if it did).
            self.hand_over(job, row, retryable=False)
            return "dead_lettered"
        # The run was moved to FAILED here: its own execution name. The attempt's own failure may
        # have started "fail-...-aN" already (it re-armed the run PENDING at attempt N, then the
        # message was redriven), and a start under that name would be a no-op, leaving the run
        # FAILED forever (sim seed 7, 5 minutes).
        self.hand_over(job, failed, retryable=False, origin="poison")
        return "dead_lettered"

    # -- the dead-letter list ------------------------------------------------------------------------
    def list_dead_letters(
        self, *, tenant: str, cursor: str | None, limit: int, job_id: str | None = None
    ) -> DeadLetterPage:
        """Newest first; an opaque cursor continues after the last item of the previous page.

        Stable under concurrent failures: the order is by dead-letter time, so a run dead-lettered
        after the first page sorts before the cursor and never shifts later pages.
        """
        if not 1 <= limit <= MAX_PAGE:
            raise ValidationFailed(f"limit: must be between 1 and {MAX_PAGE}", field="limit")
        start = (
            cursors.decode(
                cursor, keys={"dl_key", "dl_sk", "PK", "SK"}, pinned={"dl_key": dead_letter_key(tenant)}
            )
            if cursor
            else None
        )
        rows, last = self.runs.dead_letters(
            dl_key=dead_letter_key(tenant), start=start, limit=limit, job_id=job_id
        )
        return DeadLetterPage(items=rows, next_cursor=cursors.encode(last) if last else None)

    def replay(self, run_id: str, *, tenant: str) -> Replay:
        """Start a fresh attempt series for a dead-lettered run, once (the execution name is the key)."""
        try:
            job_id, scheduled_for = parse_run_id(run_id)
        except ValueError:
            raise NotFound(f"run '{run_id}' not found", field="run_id") from None
        if self.packed is not None and self.packed.foreign(job_id, tenant):
            raise NotFound(f"run '{run_id}' not found", field="run_id")
        job = self.jobs.get_job(job_id)
        run = self.runs.get(job_id, scheduled_for) if job and job.tenant == tenant else None
        if job is None or run is None or run.run_id != run_id:
            raise NotFound(f"run '{run_id}' not found", field="run_id")
        if run.status != RunStatus.DEAD_LETTER:
            raise Conflict(
                f"run '{run_id}' is {run.status.value}, not DEAD_LETTER: only a dead letter is replayed"
            )
        sf = times.stored(run.scheduled_for)
        replay = ReplayInput(
            runs_table=self.settings.runs_table,
            pk=job_pk(job_id),
            sk=run_sk(sf),
            queue_url=self.settings.execution_queue_url,
            message=RunMessage(
                job_id=job_id, scheduled_for=sf, guard=takes_slot(job.type, job.policy.overlap_policy)
            ).model_dump_json(),
            # Its job, FAILED by this run's dead letter, is SCHEDULED again before the run is enqueued.
            **_job_keys(self.settings, job, run),
            now=times.stored(self.clock.now()),
            replays=run.replays + 1,
        )
        self.state_machines.start_failure(
            execution_name("replay", run_id, str(run.replays)), replay.model_dump(mode="json")
        )
        return Replay(run_id=run_id, job_id=job_id, status=RunStatus.PENDING)


def is_job_run(job: Job, run: Execution) -> bool:
    """Whether `run` is the one run its job lives for: a one-off's, or a one-off chain dependant's."""
    if root_schedule_of(job) != ONCE:
        return False
    own = job.run_at if job.type == "one_off" else job.created_at  # see DagService.run_sf_for
    return own is not None and run.scheduled_for == own


def _job_keys(settings: Settings, job: Job, run: Execution) -> dict[str, Any]:
    """What the failure workflow's job-status steps read (asl_inputs.JobKeys), as keyword arguments."""
    return JobKeys(
        job_run=is_job_run(job, run), jobs_table=settings.jobs_table, job_pk=job_pk(job.job_id)
    ).model_dump()


def dead_letter_key(tenant: str) -> str:
    """Partition key of a tenant's dead letters in the dead_letter index."""
    return f"DL#{tenant}"
