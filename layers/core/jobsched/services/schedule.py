"""Recurring-job controls: pause, resume, run now, edit, backfill, and run history.

Every change to a job's definition is one compare-and-set on its version (JobStore.save_definition),
with the next tick recomputed in the same write, so an edit racing a dispatcher pass or another edit
either lands whole or answers 409.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, get_args

from jobsched import cron
from jobsched.domain import cursors, times
from jobsched.domain.commands import BackfillRequest, PatchJobRequest, checked_placement
from jobsched.domain.keys import run_id_for
from jobsched.domain.models import (
    Job,
    RescheduledTicks,
    RetryPolicy,
    RunKind,
    RunMessage,
    SchedulePolicy,
    started_runs,
    takes_slot,
)
from jobsched.domain.records import DueEntry, Outgoing
from jobsched.domain.results import Backfill, Control, RunPage
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import EcsTarget, WorkerTarget
from jobsched.errors import Conflict, StoreUnreachable, ValidationFailed
from jobsched.ports import Clock, JobStore, RunQueue, RunStore
from jobsched.services.dispatch import MAX_MISSED_PER_PASS
from jobsched.services.jobs import JobService, next_run_shown

MAX_BACKFILL_TICKS = 1000
MAX_BACKFILL_RANGE = timedelta(days=366)
BACKFILL_RATE_PER_SECOND = 10
MAX_HISTORY_PAGE = 100
# A resume sends again the handed-over ticks of the pause due this soon: a worker whose clock runs
# ahead of the API's by up to this much may have taken one for due already, a tick of the pause, and
# acknowledged its message (tests/sim seed 5). Lambda clocks keep NTP time to milliseconds: ample.
RESEND_WITHIN_SECONDS = 10
# At most this many hand-overs of the ticks due before a pause or an edit (_hand_over_due_ticks).
MAX_DUE_HAND_OVERS = 5

_SCHEDULE_FIELDS = {"cron_expr", "timezone", "jitter_seconds", "start_at", "end_at", "max_runs"}
_RETRY_FIELDS = {"max_attempts", "backoff", "timeout_seconds", "non_retryable_errors"}
_POLICY_FIELDS = {
    "overlap_policy",
    "catchup",
    "max_catchup",
    "starting_deadline_seconds",
    *_SCHEDULE_FIELDS,
} - {
    "cron_expr",
    "timezone",
}


@dataclass
class ScheduleService:
    """Controls on a tenant's jobs."""

    jobs: JobStore
    runs: RunStore
    queue: RunQueue
    job_service: JobService
    clock: Clock

    # -- pause / resume ---------------------------------------------------------------------------
    def pause(self, job_id: str, *, tenant: str) -> Control:
        """Stop handing ticks over and starting new ticks; ticks already handed over that come due
        during the pause are left to the resume (the worker writes nothing for them)."""
        job = self.job_service.owned(job_id, tenant)
        if job.status == JobStatus.PAUSED:
            return Control(job_id=job.job_id, status=job.status)
        if job.status != JobStatus.SCHEDULED or job.next_run_at is None:
            raise Conflict(
                f"job {job_id} is {job.status.value} with no pending tick: there is nothing to pause"
            )
        now = times.truncate_ms(self.clock.now())
        # Ticks due before the pause run as usual, but these were not handed over yet (the dispatcher
        # is behind, or an API hand-over failed): left to the resume, a job never resumed kept no row
        # of them (tests/sim seed 767).
        job = self._hand_over_due_ticks(job, now=now, tenant=tenant)
        if job.status != JobStatus.SCHEDULED or job.next_run_at is None:
            raise Conflict(f"job {job_id} changed meanwhile; read it again and retry")
        paused = job.model_copy(
            update={
                "status": JobStatus.PAUSED,
                "paused_at": now,
                "resume_from": job.next_run_at,
                "next_run_at": None,
                "updated_at": now,
            }
        )
        self._save(job, paused)
        return Control(job_id=job.job_id, status=JobStatus.PAUSED)

    def _hand_over_due_ticks(self, job: Job, *, now: datetime, tenant: str) -> Job:
        """Hand over the recurring job's ticks due by `now` that no pass or API hand-over reached yet,
        as the next pass would have, before a pause or an edit of the schedule is written; the job as
        it then stands, read again.

        Those ticks were due under the schedule as it stood: they run, or follow the catch-up policy,
        as any tick the dispatcher hands over late; a tick an edit then takes off the schedule is
        recorded SKIPPED "rescheduled" by the worker that receives it, as are the ticks handed over
        ahead of an edit. A failure here answers before the pause or the edit is written, and the
        ticks are still the next pass's: nothing is left for a step after the write to do.
        """
        for _ in range(MAX_DUE_HAND_OVERS):  # one hand-over reaches MAX_TICKS_PER_PASS due ticks
            if job.type != "recurring" or job.next_run_at is None or job.next_run_at > now:
                break
            self.job_service.dispatcher.hand_over([DueEntry.of(job)], now=now, until=now)
            job = self.job_service.owned(job.job_id, tenant)
        return job

    def resume(self, job_id: str, *, tenant: str) -> Control:
        """Hand ticks over again; ticks missed while paused follow the job's catch-up policy."""
        job = self.job_service.owned(job_id, tenant)
        if job.status == JobStatus.SCHEDULED:
            return self._control(job)
        if job.status != JobStatus.PAUSED:
            raise Conflict(f"job {job_id} is {job.status.value}, not PAUSED")
        now = times.truncate_ms(self.clock.now())
        # Every tick that came due during the pause was missed, whether it had been handed over
        # before the pause (the worker left it alone) or not: the plan starts at the pause's first
        # tick and the catch-up policy decides. Ticks handed over and not yet due still wait in
        # the queue; they are not sent again, but for those due within RESEND_WITHIN_SECONDS: they
        # were judged "not yet due" on the API's clock, a worker judged them on its own, and a
        # worker ahead has acknowledged such a tick as one of the pause (tests/sim seed 5). Their
        # copies go out in the resume's hand-over, before its stamp: sent after it, a fault left
        # them unsent for good (seed 7098), where a hand-over that fails before its stamp leaves the
        # job's pending tick at the pause's first tick, for the next pass to hand over from there.
        # (A copy whose original is still queued finds the run started or finished and is dropped.)
        first = self._first_tick_of_pause(job)
        resend_before = now + timedelta(seconds=RESEND_WITHIN_SECONDS)
        replan = (
            first is not None and job.resume_from is not None and first < min(resend_before, job.resume_from)
        )
        # An edit's SKIPPED records of the old schedule's ticks of the pause, all written before the
        # resume lets go of them (a fault among them after the edit's write left the rest undone).
        self._record_rescheduled(job, now=now)
        resumed = job.model_copy(
            update={
                "status": JobStatus.SCHEDULED,
                "next_run_at": first if replan else job.resume_from,
                "paused_at": None,
                "resume_from": None,
                "rescheduled": None,
                "updated_at": now,
            }
        )
        self._save(job, resumed)
        self.job_service.hand_over_if_due_soon(
            resumed,
            missed_before=now,
            queued_before=job.resume_from if replan else None,
            resend_before=resend_before if replan else None,
        )
        return self._control(self.job_service.owned(job_id, tenant))

    @staticmethod
    def _first_tick_of_pause(job: Job) -> datetime | None:
        """The job's first tick after it was paused (a tick due before the pause ran as usual)."""
        if job.type != "recurring" or job.cron_expr is None or job.paused_at is None:
            return None
        after = job.paused_at
        if job.policy.start_at is not None and job.policy.start_at > after:
            after = job.policy.start_at - timedelta(milliseconds=1)
        return cron.parse(job.cron_expr, job.timezone).next_after(after)

    # -- run now ----------------------------------------------------------------------------------
    def run_now(self, job_id: str, *, tenant: str) -> Control:
        """A manual run with its own key (job_id, now), honouring the job's overlap policy."""
        job = self.job_service.owned(job_id, tenant)
        if job.status not in (JobStatus.SCHEDULED, JobStatus.PAUSED):
            raise Conflict(f"job {job_id} is {job.status.value}: it no longer runs")
        now = times.truncate_ms(self.clock.now())
        row = self.runs.put_pending(
            job_id=job.job_id, tenant=job.tenant, scheduled_for=now, now=now, kind="manual"
        )
        if not row.applied:
            raise Conflict("a run with this instant exists already; retry")
        message = RunMessage(
            job_id=job.job_id,
            scheduled_for=times.stored(now),
            kind="manual",
            guard=takes_slot(job.type, job.policy.overlap_policy),
        )
        self.queue.send([Outgoing(message, 0)])
        return Control(job_id=job.job_id, status=job.status, run_id=run_id_for(job.job_id, now))

    # -- edit -------------------------------------------------------------------------------------------
    def edit(self, job_id: str, request: PatchJobRequest, *, tenant: str) -> Job:
        """Change a job's definition; the next tick is recomputed in the same conditional write."""
        job = self.job_service.owned(job_id, tenant)
        if job.status in (JobStatus.CANCELLED, JobStatus.COMPLETED):
            raise Conflict(f"job {job_id} is {job.status.value}: it cannot be edited")
        changed = request.model_fields_set
        if "depends_on" in changed:
            return self._rewire(job, request.depends_on or [], tenant=tenant, others=changed - {"depends_on"})
        if job.type != "recurring" and changed & (_SCHEDULE_FIELDS | _POLICY_FIELDS):
            bad = sorted(changed & (_SCHEDULE_FIELDS | _POLICY_FIELDS))[0]
            raise ValidationFailed(f"{bad}: only recurring jobs have a schedule", field=bad)
        target = request.new_target()
        if target is not None:
            self.job_service.check_target(target, tenant=tenant, shorthand=request.handler is not None)
        fields = {k: getattr(request, k) for k in changed}
        retry = job.retry.model_dump()
        for key in changed & _RETRY_FIELDS:
            retry["non_retryable" if key == "non_retryable_errors" else key] = fields[key]
        policy = job.policy.model_dump()
        policy.update({k: fields[k] for k in changed & _POLICY_FIELDS})
        try:
            new_retry = RetryPolicy.model_validate(retry)
            new_policy = SchedulePolicy.model_validate(policy)
        except ValueError as exc:
            raise ValidationFailed(f"invalid policy: {exc}") from exc
        now = times.truncate_ms(self.clock.now())
        definition: dict[str, Any] = {
            "name": fields.get("name", job.name),
            "target": target or job.target,
            "payload": fields["payload"] if fields.get("payload") is not None else job.payload,
            "cron_expr": " ".join(fields["cron_expr"].split()) if fields.get("cron_expr") else job.cron_expr,
            "timezone": fields.get("timezone") or job.timezone,
            "tags": dict(fields["tags"]) if fields.get("tags") is not None else job.tags,
            "alerts": fields["alerts"] if "alerts" in changed else job.alerts,
            "concurrency": fields["concurrency"] if "concurrency" in changed else job.concurrency,
            "resources": fields["resources"] if "resources" in changed else job.resources,
            "runs_on": fields["runs_on"] if "runs_on" in changed else job.runs_on,
            "retry": new_retry,
            "policy": new_policy,
            "updated_at": now,
        }
        updated = job.model_copy(update=definition)
        rescheduled_pause = False
        if isinstance(updated.target, EcsTarget) and updated.runs_on == "lambda":
            # As at create (CreateJobRequest._placeable): a container is its own Fargate task
            field = "runs_on" if "runs_on" in changed else "target"
            raise ValidationFailed(
                f"{field}: an ecs target runs as its own Fargate task: leave runs_on out (or use ecs)",
                field=field,
            )
        try:  # the edit's timeout, resources and runs_on together must still fit a worker
            if isinstance(updated.target, EcsTarget):
                checked_placement(new_retry.timeout_seconds, updated.resources, "ecs")
            elif not isinstance(updated.target, WorkerTarget):
                checked_placement(new_retry.timeout_seconds, updated.resources, updated.runs_on)
        except ValueError as exc:
            field = "runs_on" if "runs_on" in changed or "resources" not in changed else "resources"
            raise ValidationFailed(f"{field}: {exc}", field=field) from exc
        if changed & _SCHEDULE_FIELDS and job.type == "recurring":
            schedule = self.job_service.validate_schedule(
                updated.cron_expr or "", updated.timezone, new_policy
            )
            if self.job_service.quotas is not None:
                self.job_service.quotas.check_cron_interval(tenant, schedule)
            if job.status == JobStatus.SCHEDULED:
                # The old schedule's ticks due before the edit and not handed over yet are handed over
                # first, as the next pass would have (a worker records those the edit takes off the
                # schedule SKIPPED "rescheduled"). Recorded by the edit after its write, a fault among
                # the records left the rest with no row for good (tests/sim seed 5225).
                current = self._hand_over_due_ticks(job, now=now, tenant=tenant)
                if current.version != job.version:  # the definition it edits changed meanwhile
                    raise Conflict(f"job {job_id} changed meanwhile; read it again and retry")
                job, updated = current, current.model_copy(update=definition)
            # Overdue still: beyond what one hand-over reaches (MAX_TICKS_PER_PASS, a long backlog)
            overdue = self._overdue_ticks(job, now) if job.status != JobStatus.PAUSED else []
            tick = self._next_tick_after_edit(updated, now, since=overdue[0] if overdue else None)
            if job.status == JobStatus.PAUSED:
                # The pause goes on under the new schedule from now: the resume decides its ticks.
                # The old schedule's ticks of the pause so far are the edit's to record, and the job
                # keeps them (RescheduledTicks) until the resume; an earlier edit's are recorded first,
                # before this write replaces them.
                self._record_rescheduled(job, now=now)
                updated = updated.model_copy(
                    update={
                        "resume_from": tick,
                        "paused_at": now,
                        "rescheduled": self._rescheduled_ticks_of_pause(job, now=now),
                    }
                )
                rescheduled_pause = True
            else:
                updated = updated.model_copy(update={"next_run_at": tick})
        else:
            overdue = []
        self._save(job, updated)
        if rescheduled_pause:
            self._record_rescheduled(updated, now=now)
        self._skip_overdue_ticks_off_the_new_schedule(updated, overdue, now=now)
        self.job_service.hand_over_if_due_soon(updated, missed_before=now if overdue else None)
        return self.job_service.owned(job_id, tenant)

    @staticmethod
    def _overdue_ticks(job: Job, now: datetime) -> list[datetime]:
        """The old schedule's ticks that came due before an edit and were not handed over yet (the
        dispatcher was behind: its stamp, next_run_at, is the oldest tick not handed over), beyond
        those the edit's own hand-overs reached first (_hand_over_due_ticks: a long backlog)."""
        stamp = job.next_run_at
        if job.type != "recurring" or not job.cron_expr or stamp is None or stamp > now:
            return []
        return _due_ticks_from(job, stamp, now=now)

    def _skip_overdue_ticks_off_the_new_schedule(
        self, job: Job, overdue: list[datetime], *, now: datetime
    ) -> None:
        """Record SKIPPED "rescheduled" the overdue ticks (see _overdue_ticks) the edit took off the
        schedule. Those the new schedule still has are handed over late, from the old stamp, and its
        catch-up policy decides them, as after an outage: the edit loses no tick that came due
        (tests/sim seed 213). Written after the edit's write, so a refused edit records nothing."""
        if not overdue:
            return
        schedule = cron.parse(job.cron_expr or "", job.timezone)
        start, end = job.policy.start_at, job.policy.end_at
        started = started_runs(job)  # left to their redeliveries, as in _record_rescheduled
        for tick in overdue:
            if times.stored(tick) in started:
                continue
            if not schedule.fires_at(tick) or (start and tick < start) or (end and tick > end):
                self.runs.put_pending(
                    job_id=job.job_id, tenant=job.tenant, scheduled_for=tick, now=now, skipped="rescheduled"
                )

    def _rescheduled_ticks_of_pause(self, job: Job, *, now: datetime) -> RescheduledTicks | None:
        """The old schedule's ticks that came due during the pause, which an edit now replaces.

        A paused job's ticks are decided at its resume, by the catch-up policy, over the schedule it
        then has: an edit during the pause would leave the old schedule's ticks of the pause with no
        row at all (tests/sim seeds 59, 118, 230). The edit replaced them, as it replaces ticks
        handed over before it (the worker skips those "rescheduled"), so they are recorded SKIPPED
        "rescheduled" (_record_rescheduled).
        """
        first = self._first_tick_of_pause(job)
        if first is None or first > now or job.cron_expr is None:
            return None
        until = min(now, job.policy.end_at) if job.policy.end_at else now
        return RescheduledTicks(cron_expr=job.cron_expr, timezone=job.timezone, first=first, until=until)

    def _record_rescheduled(self, job: Job, *, now: datetime) -> None:
        """Record SKIPPED "rescheduled" the ticks the job keeps in `rescheduled` (none: nothing).

        At most MAX_MISSED_PER_PASS, the oldest: the catch-up policies' own bound (a later tick of a
        longer pause keeps no row). The edit writes them after its write, so a refused edit records
        nothing; the job keeps them until the resume, which writes them again (an existing row is
        left as it is) before its own write: a throttle, a 500 or a timeout among the edit's records
        left the rest with no row for good, the edit's write having replaced the old schedule
        (tests/sim seeds 2140, 2945, 4171, 5228, 5743, 5985, 6024, 6310, 6736, 7270, 9110, 9770, 9980).

        A tick whose start marker is on the job (domain.models.started_runs: a worker got past it
        early, on a clock ahead, and died after its handler, before the pause) is left to its message's
        redelivery, which records it truthfully: the edit wrote SKIPPED over a run that executed
        (tests/sim seed 273), as the resume's catch-up did before (seed 110, services/dispatch.py).
        """
        gone = job.rescheduled
        if gone is None:
            return
        schedule = cron.parse(gone.cron_expr, gone.timezone)
        first = gone.first - timedelta(milliseconds=1)
        started = started_runs(job)
        for tick in schedule.ticks(first, gone.until, limit=MAX_MISSED_PER_PASS):
            if times.stored(tick) in started:
                continue
            self.runs.put_pending(
                job_id=job.job_id, tenant=job.tenant, scheduled_for=tick, now=now, skipped="rescheduled"
            )

    def _rewire(self, job: Job, depends_on: list[str], *, tenant: str, others: set[str]) -> Job:
        """Move a dependent job's upstream edges (cycle-checked) in one transaction."""
        if job.type != "dependent":
            raise ValidationFailed("depends_on: only a dependent job has upstreams", field="depends_on")
        if others:
            raise ValidationFailed(
                "depends_on: change it on its own, not with other fields", field="depends_on"
            )
        if len(set(depends_on)) != len(depends_on):
            raise ValidationFailed("depends_on: an upstream job is listed twice", field="depends_on")
        root = self.job_service.dag.check_upstreams(depends_on, tenant=tenant, job_id=job.job_id)
        now = times.truncate_ms(self.clock.now())
        updated = job.model_copy(
            update={"depends_on": tuple(depends_on), "root_schedule": root, "updated_at": now}
        )
        added = [u for u in depends_on if u not in job.depends_on]
        removed = [u for u in job.depends_on if u not in depends_on]
        if not self.jobs.rewire(updated, expected_version=job.version, added=added, removed=removed):
            raise Conflict(f"job {job.job_id} or one of its upstreams changed meanwhile; retry")
        return self.job_service.owned(job.job_id, tenant)

    def _next_tick_after_edit(self, job: Job, now: datetime, *, since: datetime | None) -> datetime | None:
        # The new schedule starts at now, bounded from below by the newest run row (ticks handed
        # over already have one, and are not handed over twice). When the old schedule has ticks due
        # that its stamp says were not handed over yet (`since`, the oldest of them), the new
        # schedule's ticks from there on are due late (see _skip_overdue_ticks_off_the_new_schedule)
        # and no run row bounds them: a row newer than the stamp does not mean the ticks before it
        # have rows. A resume that re-planned its pause from the pause's first tick, and whose
        # hand-over failed before its stamp, left the stamp there while ticks handed over before the
        # pause ran after it; starting after the newest of their rows left the new schedule's ticks
        # of the pause with no row (tests/sim seed 5309). A tick handed over again finds its row and
        # its message is dropped, as after a pass that died between its send and its stamp.
        start = now if since is None else since - timedelta(milliseconds=1)
        if since is None:
            newest = self.runs.recent(job.job_id, limit=1)
            floor = max([start, *(r.scheduled_for for r in newest if r.kind == "scheduled")])
        else:
            floor = start
        schedule = cron.parse(job.cron_expr or "", job.timezone)
        policy = job.policy
        tick = schedule.next_after(
            max(floor, policy.start_at - timedelta(milliseconds=1)) if policy.start_at else floor
        )
        if policy.end_at and tick > policy.end_at:
            return None
        return tick

    # -- backfill ---------------------------------------------------------------------------------------
    def backfill(self, job_id: str, request: BackfillRequest, *, tenant: str) -> Backfill:
        """Create the runs of every tick in [from, to) that has none, oldest first, rate-limited, at once.

        Idempotent: a tick that has a run already is left alone, so a repeat creates nothing new
        (it re-sends the backfill runs still PENDING, in case an earlier request died before sending).
        The API does this inline only for a short range; services/operations.py carries out a long
        one in chunks, outside the request, through the same backfill_ticks.
        """
        job, ticks = self.plan_backfill(job_id, request, tenant=tenant)
        created, existing, sent = self.backfill_ticks(job, ticks)
        return Backfill(
            job_id=job.job_id,
            ticks=len(ticks),
            created=created,
            existing=existing,
            first=ticks[0] if ticks else None,
            last=ticks[-1] if ticks else None,
            spread_seconds=math.ceil(sent / BACKFILL_RATE_PER_SECOND),
        )

    def plan_backfill(
        self, job_id: str, request: BackfillRequest, *, tenant: str
    ) -> tuple[Job, list[datetime]]:
        """The tenant's job and the ticks in [from, to) a backfill covers (400/404/409 if it cannot);
        the ticks are taken from the tenant's backfill quota (a 429 over it)."""
        job, ticks = self.preview_backfill(job_id, request, tenant=tenant)
        if self.job_service.quotas is not None:
            # Counted when planned: a request that fails after this has used its ticks of the day.
            self.job_service.quotas.take_backfill(tenant, len(ticks))
        return job, ticks

    def preview_backfill(
        self, job_id: str, request: BackfillRequest, *, tenant: str
    ) -> tuple[Job, list[datetime]]:
        """plan_backfill's answer and its 400/404/409s, with nothing written and no quota taken."""
        job = self.job_service.owned(job_id, tenant)
        if job.type != "recurring" or not job.cron_expr:
            raise ValidationFailed("backfill: only a recurring job has ticks to backfill", field="job_id")
        if job.status == JobStatus.CANCELLED:
            raise Conflict(f"job {job_id} is CANCELLED")
        now = self.clock.now()
        start, end = times.truncate_ms(request.from_), times.truncate_ms(request.to)
        if end > now:
            raise ValidationFailed("to: a backfill covers the past; `to` is in the future", field="to")
        if end - start > MAX_BACKFILL_RANGE:
            raise ValidationFailed(f"to: the range is longer than {MAX_BACKFILL_RANGE.days} days", field="to")
        return job, self.backfill_range(job, start, end)

    @staticmethod
    def backfill_range(job: Job, start: datetime, end: datetime) -> list[datetime]:
        """The job's ticks in [start, end), at most MAX_BACKFILL_TICKS (a 400 if there are more)."""
        schedule = cron.parse(job.cron_expr or "", job.timezone)
        ticks = schedule.ticks(start - timedelta(milliseconds=1), end, limit=MAX_BACKFILL_TICKS + 1)
        ticks = [t for t in ticks if t < end]
        if len(ticks) > MAX_BACKFILL_TICKS:
            raise ValidationFailed(f"to: the range holds more than {MAX_BACKFILL_TICKS} ticks", field="to")
        return ticks

    def backfill_ticks(self, job: Job, ticks: list[datetime]) -> tuple[int, int, int]:
        """Write the backfill run of each tick that has none and send it (and any still PENDING);
        (created, existing, sent). At most BACKFILL_RATE_PER_SECOND of the sent runs start in any
        second: the i-th is held back i // BACKFILL_RATE_PER_SECOND seconds."""
        now = self.clock.now()
        created = existing = 0
        outgoing: list[Outgoing] = []
        for tick in ticks:
            row = self.runs.put_pending(
                job_id=job.job_id, tenant=job.tenant, scheduled_for=tick, now=now, kind="backfill"
            )
            execution = row.row
            if row.applied:
                created += 1
            else:
                existing += 1
            if row.applied or (
                execution and execution.status == RunStatus.PENDING and execution.kind == "backfill"
            ):
                delay = len(outgoing) // BACKFILL_RATE_PER_SECOND
                outgoing.append(
                    Outgoing(
                        RunMessage(job_id=job.job_id, scheduled_for=times.stored(tick), kind="backfill"),
                        delay,
                    )
                )
        self.queue.send(outgoing)
        return created, existing, len(outgoing)

    # -- history --------------------------------------------------------------------------------------------
    def history(
        self,
        job_id: str,
        *,
        tenant: str,
        start: datetime | None,
        end: datetime | None,
        status: str | None,
        cursor: str | None,
        limit: int,
        kind: str | None = None,
    ) -> RunPage:
        """Runs newest first, optionally of one status and kind, with lateness (Execution.lateness_ms)
        and duration."""
        job = self.job_service.owned(job_id, tenant)
        if not 1 <= limit <= MAX_HISTORY_PAGE:
            raise ValidationFailed(f"limit: must be between 1 and {MAX_HISTORY_PAGE}", field="limit")
        if status is not None and status not in RunStatus.__members__:
            raise ValidationFailed(
                f"status: must be one of {', '.join(RunStatus.__members__)}", field="status"
            )
        if kind is not None and kind not in get_args(RunKind):
            raise ValidationFailed(f"kind: must be one of {', '.join(get_args(RunKind))}", field="kind")
        if start and end and start >= end:
            raise ValidationFailed("from: must be before to", field="from")
        rows, last = self.runs.history(
            job.job_id,
            start=start,
            end=end,
            status=status,
            kind=kind,
            limit=limit,
            cursor=self._start(cursor, job.job_id),
        )
        return RunPage(items=rows, next_cursor=cursors.encode(last) if last else None)

    # -- helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def _start(cursor: str | None, job_id: str) -> dict[str, Any] | None:
        if not cursor:
            return None
        return cursors.decode(
            cursor, keys={"PK", "SK"}, pinned={"PK": f"JOB#{job_id}"}, prefixes={"SK": "RUN#"}
        )

    def _save(self, old: Job, new: Job) -> None:
        """Write `new` over `old` (its version); carry on only once it is known to have applied.

        A write whose answer timed out may have applied: the job is read back, and the write counts
        as applied when the job stands at the next version with this write's stamp. Then the steps
        after the write (an edit's SKIPPED records, a resume's hand-over) still happen: a retry of the
        request would find nothing left to change and skip them for good (tests/sim seed 355).
        """
        try:
            applied = self.jobs.save_definition(new, expected_version=old.version)
        except StoreUnreachable:
            current = self.jobs.get_job(old.job_id)  # (a failure of this read is a 503 too)
            if current is None or (current.version, current.updated_at) != (old.version + 1, new.updated_at):
                raise
            applied = True
        if not applied:
            raise Conflict(f"job {old.job_id} changed meanwhile; read it again and retry")

    def _control(self, job: Job) -> Control:
        return Control(
            job_id=job.job_id, status=job.status, next_run_at=next_run_shown(job, now=self.clock.now())
        )


def _due_ticks_from(job: Job, first: datetime, *, now: datetime) -> list[datetime]:
    """The job's ticks from `first` (included) to now and its end_at, at most MAX_MISSED_PER_PASS."""
    end = min(now, job.policy.end_at) if job.policy.end_at else now
    schedule = cron.parse(job.cron_expr or "", job.timezone)
    return schedule.ticks(first - timedelta(milliseconds=1), end, limit=MAX_MISSED_PER_PASS)


__all__ = ["DueEntry", "ScheduleService"]
