"""Alerts: the scheduler's own detection of failed, dead-lettered, late, missed and skipped runs.

Who raises what (each where the fact is first known, never by an outside poller):

    failed       FailureService.hand_over: an attempt failed (the worker, or the reconciler's poison)
    dead_letter  the failure workflow itself (asl.py RecordAlert -> Alert), where the run is
                 dead-lettered; hand_over only says whether the job wants it and hands the item over
    late         the worker, when a run's first attempt starts more than late_after_seconds after its
                 tick; and the dispatcher, when a pass hands over a tick already that late (the run
                 has not started that long after its tick: a dispatcher outage, a paused shard)
    missed       the dispatcher, for the ticks its catch-up policy drops (they never run)
    skipped      the worker (overlap, starting deadline) and the dispatcher (catch-up drops)

One raise, and why it loses no run outcome and doubles no alert:

    1. record: a conditional put on the alert id, derived from (run, kind)
    2. publish to the topic, only when 1 kept it

    a second raise of the same (run, kind) (a redelivery, a second pass) -> 1 refuses, no publish
    crash between 1 and 2  -> listed, not published: at most once, never twice
    1 or 2 fails (throttle, outage) -> logged; the caller's run carries on exactly as without alerts
    (record before publish: publishing first would publish again on every redelivery)

A job without an alert policy alerts on its dead letters only, as the alert topic always did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from aws_lambda_powertools import Logger

from jobsched.domain import cursors, times
from jobsched.domain.alerts import Alert, AlertKind, AlertPolicy, alert_id, alert_partition
from jobsched.domain.keys import run_id_for
from jobsched.domain.models import Job
from jobsched.errors import JobschedError, ValidationFailed
from jobsched.ports import AlertPublisher, AlertStore, Clock, JobStore, Metrics, NoMetrics

logger = Logger(child=True)

MAX_PAGE = 100
# What a job without an alert policy raises: its dead letters, as before policies existed.
DEFAULT_POLICY = AlertPolicy(on=("dead_letter",))


def policy_of(job: Job) -> AlertPolicy:
    """The alert policy in force for a job: its own, or DEFAULT_POLICY."""
    return job.alerts or DEFAULT_POLICY


@dataclass(frozen=True, slots=True)
class AlertPage:
    """A page of a tenant's alerts, newest first; next_cursor None on the last page."""

    items: list[Alert]
    next_cursor: str | None


@dataclass
class AlertService:
    """Raises alerts (record once, then publish) and lists a tenant's."""

    store: AlertStore
    publisher: AlertPublisher
    jobs: JobStore
    clock: Clock
    # Alerts_<kind> counts (jobsched.telemetry); the failure workflow's own dead-letter alerts are
    # counted by the failure hand-over's Runs_dead_letter instead.
    metrics: Metrics = field(default_factory=NoMetrics)

    def make(
        self, job: Job, kind: AlertKind, *, scheduled_for: datetime, detail: str = "", series: int = 0
    ) -> Alert:
        """The alert of `kind` about job's run at `scheduled_for` (not raised)."""
        run_id = run_id_for(job.job_id, scheduled_for)
        return Alert(
            alert_id=alert_id(run_id, kind, series=series),
            tenant=job.tenant,
            job_id=job.job_id,
            run_id=run_id,
            kind=kind,
            scheduled_for=times.truncate_ms(scheduled_for),
            at=times.truncate_ms(self.clock.now()),
            detail=detail[:500],
        )

    def raise_alert(
        self, job: Job, kind: AlertKind, *, scheduled_for: datetime, detail: str = "", series: int = 0
    ) -> bool:
        """Raise it if the job's policy wants `kind`; True when this call kept and published it.

        Never raises a store or topic failure: an alert is never worth a run's outcome.
        """
        if not policy_of(job).wants(kind):
            return False
        alert = self.make(job, kind, scheduled_for=scheduled_for, detail=detail, series=series)
        try:
            if not self.store.record(alert):
                return False  # raised before: a redelivery, a retried step, a second pass
        except JobschedError as exc:
            logger.warning("alert not recorded", extra={"alert_id": alert.alert_id, "error": repr(exc)})
            return False
        self.metrics.alert(kind)
        try:
            self.publisher.publish(alert)
        except JobschedError as exc:
            logger.warning("alert not published", extra={"alert_id": alert.alert_id, "error": repr(exc)})
            return False
        return True

    def late_start(self, job: Job, *, scheduled_for: datetime, started_at: datetime) -> bool:
        """Raise "late" if a run started more than the job's late_after_seconds after its tick."""
        policy = policy_of(job)
        if not policy.wants("late") or policy.late_after_seconds is None:
            return False
        late = (started_at - scheduled_for).total_seconds()
        if late <= policy.late_after_seconds:
            return False
        return self.raise_alert(
            job,
            "late",
            scheduled_for=scheduled_for,
            detail=f"started {late:.0f} s after its tick (late after {policy.late_after_seconds} s)",
        )

    def for_job_id(self, job_id: str) -> Job | None:
        """The job, read for a decision the caller cannot make from what it holds (a due entry)."""
        try:
            return self.jobs.get_job(job_id)
        except JobschedError as exc:
            logger.warning("alert: job not read", extra={"job_id": job_id, "error": repr(exc)})
            return None

    def recent(self, *, tenant: str, since: datetime | None, cursor: str | None, limit: int) -> AlertPage:
        """The tenant's alerts raised at or after `since`, newest first; an opaque cursor continues."""
        if not 1 <= limit <= MAX_PAGE:
            raise ValidationFailed(f"limit: must be between 1 and {MAX_PAGE}", field="limit")
        start = (
            cursors.decode(cursor, keys={"PK", "SK", "at_key"}, pinned={"PK": alert_partition(tenant)})
            if cursor
            else None
        )
        items, last = self.store.recent(tenant, since=since, start=start, limit=limit)
        return AlertPage(items=items, next_cursor=cursors.encode(last) if last else None)
