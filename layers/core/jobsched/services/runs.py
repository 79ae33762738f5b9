"""Runs by id: read one (with a link to its logs), cancel one, and a job's run statistics.

A run id is derived from (job_id, scheduled_for) (jobsched.domain.keys.run_id_for), so it resolves to
its job and its row with two GetItems: no index, no scan. Tenancy is the job's: another tenant's
run is not found.

Cancelling one run races its worker. Every move out of PENDING is a compare-and-set on the run row
(RunStore.cancel, RunStore.claim), so of a cancel and a claim exactly one wins:

    API: cancel                                 worker: claim (or the fast path's row read)
    row PENDING (or absent: created) -> CANCELLED
                                                claim: PENDING -> LEASED refused: CANCELLED,
                                                the message is dropped; the run never starts
    -- or the other way round --
                                                claim: PENDING -> LEASED -> RUNNING
    cancel refused: the row is held -> mark it cancel-requested (202); the heartbeat reads the
    mark, the handler sees ctx.cancelled and stops; what it answers is the run's result
    -- or the run is finished -> 409

A held row is marked, never CANCELLED, under a lapsed lease too: its worker died or stalled past its
claim, maybe after its handler ran, and the row cannot tell. The redelivery that takes a marked run
over records it LOST instead of running it again (Worker._run_leased), as a cancelled job's does.
A run whose start marker is left on its job, lapsed (a receive got past it and died), is marked the
same way: its row (PENDING, or absent on the fast path) says nothing of whether its handler ran.

A worker on the fast path (an idempotent job) writes no row before its handler (its row stays
PENDING, or absent, until its first heartbeat), but every run has written a start marker on its job
item first, which the cancel reads first: the slot (one-offs, recurring jobs with overlap skip or
buffer_one) or its in_flight entry (a counted run: overlap "allow", manual runs of those jobs,
backfills, dependants). Such a run is marked (202), not cancelled; a row it has not written yet is
born PENDING with the mark, and its one write at its end records what it did (SUCCEEDED, FAILED).
The cancel of a run not started (no row, or PENDING) writes on the job item first, where the start
markers are written (as JobService.cancel does for whole jobs): it adds the run to the job's
cancelled_runs and reads the markers in the same write (JobStore.cancel_run). A marker of the run
there: the run got past its marker first, and is marked as above. None: every later marker write of
the run is refused, so no worker starts it (one that meets the refusal records it CANCELLED), and
the row is written CANCELLED. A read of the job and a write of the row apart let a marker slip in
between, or a worker read the row stale, and run its handler under a cancel answered 200 (tests/sim
seed 80). The healthy path pays a condition on the marker write it makes anyway.

A run's log lines (GET /api/runs/{id}/logs) are read from their sources one after the other: the
worker's own lines for the run first (RunLogs), then, for a container target with an image, what each
of its attempts' ECS tasks printed (TaskLogs), in the order the tasks started (Execution.ecs_tasks).
The cursor names the source and that source's own cursor, so a page ends inside one source or at a
source's end; a reader that follows next_cursor to None has read every source once. A task's lines
come after every worker line (not interleaved by time: each source is paged on its own, and a merge
by time would read every source on every page).

Stopping a running run that is not a python handler (StopTask for an ECS task, StopExecution for a
waited Step Functions target) plugs in as a RunStopper: every stopper is called with the run once
its row is marked.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import quote

from jobsched import cron
from jobsched.domain import times
from jobsched.domain.keys import parse_run_id, run_id_for
from jobsched.domain.listing import JobFilter, JobListing, ListOrder
from jobsched.domain.logs import LogLine, LogPage, task_stream
from jobsched.domain.models import Execution, Job
from jobsched.domain.records import NewRun
from jobsched.domain.status import HELD, TERMINAL, JobStatus, RunStatus
from jobsched.domain.targets import EcsTarget
from jobsched.errors import Conflict, NotFound, ValidationFailed
from jobsched.ports import Clock, RunLogs, RunStore, TaskLogs
from jobsched.services.jobs import JobService

RunStopper = Callable[[Job, Execution], None]
"""Asks a running run's target to stop (ECS StopTask, Step Functions StopExecution): issue 15's."""

# GET /api/jobs/{id}/stats reads at most this many runs (newest first, 10 history pages); an
# answer from a longer history says `truncated` and the oldest run it counted.
STATS_MAX_RUNS = 1000
_STATS_PAGE = 100
# A run's log lines are read from this long before its tick (a worker may start it up to two
# seconds early, and clocks differ): the lower bound of the log search.
LOG_LOOKBACK = timedelta(minutes=1)
MAX_LOG_PAGE = 1000  # GET /api/runs/{id}/logs' limit (FilterLogEvents answers up to 10,000 events)


def _console_part(text: str) -> str:
    """A part of the CloudWatch console's fragment: URI-encoded twice, with "$" for "%"."""
    return quote(quote(text, safe=""), safe="").replace("%", "$")


@dataclass(frozen=True, slots=True)
class LogLinks:
    """Where a run's log lines are: the worker's CloudWatch log group, filtered by the run id; and
    container tasks' streams in the container log group ("": none)."""

    log_group: str
    region: str
    container_log_group: str = ""

    def url(self, run_id: str) -> str:
        """The CloudWatch console's view of the worker's log group, filtered to lines with the run id."""
        group = _console_part(self.log_group)
        pattern = _console_part(f'"{run_id}"')
        return f"{self._console()}/{group}/log-events$3FfilterPattern$3D{pattern}"

    def task_url(self, task_arn: str) -> str | None:
        """The console's view of a container task's stream (None: no container log group)."""
        if not self.container_log_group:
            return None
        group = _console_part(self.container_log_group)
        return f"{self._console()}/{group}/log-events/{_console_part(task_stream(task_arn))}"

    def _console(self) -> str:
        return (
            f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
            "#logsV2:log-groups/log-group"
        )


@dataclass(frozen=True, slots=True)
class RunDetail:
    """A run and where to read its logs (None: this deployment keeps no log group to link to)."""

    run: Execution
    logs_url: str | None


@dataclass(frozen=True, slots=True)
class RunLogsPage:
    """A page of a run's log lines, and the console's view of them (None: no console, locally)."""

    lines: list[LogLine]
    next_cursor: str | None
    console_url: str | None


@dataclass(frozen=True, slots=True)
class RunCancel:
    """What a cancel did: CANCELLED (never starts), or asked a running run to stop (`stopping`)."""

    run_id: str
    status: RunStatus
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Nearest-rank percentiles of a sample, in milliseconds (None: an empty sample)."""

    p50: int | None
    p95: int | None
    p99: int | None
    max: int | None

    @classmethod
    def of(cls, values: Sequence[int]) -> Percentiles:
        """The percentiles of `values` (nearest rank: a value that occurred, never an interpolation)."""
        ordered = sorted(values)

        def rank(p: float) -> int | None:
            return ordered[max(0, math.ceil(p * len(ordered)) - 1)] if ordered else None

        return cls(p50=rank(0.50), p95=rank(0.95), p99=rank(0.99), max=ordered[-1] if ordered else None)


@dataclass(frozen=True, slots=True)
class JobStats:
    """A job's runs since an instant: counts by status, lateness and duration, success rate."""

    job_id: str
    since: datetime | None
    runs: int
    by_status: dict[str, int]
    lateness_ms: Percentiles
    duration_ms: Percentiles
    success_rate: float | None
    """Succeeded over finished (succeeded, failed, dead-lettered, lost); None before any finished."""
    truncated: bool
    """More than STATS_MAX_RUNS runs: the figures are of the newest STATS_MAX_RUNS."""
    oldest_counted: datetime | None


_FINISHED = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.DEAD_LETTER, RunStatus.LOST}

# The tenant's health (GET /api/stats): bounded reads, whatever the tenant holds.
BACKLOG_MAX_READ = 1000
"""Jobs read (soonest tick first) to count the due backlog; more: `truncated`."""
SAMPLE_JOBS = 20
"""Jobs whose recent runs the tenant's lateness is measured over: the newest and the soonest due."""
SAMPLE_RUNS = 20
"""Runs read per sampled job (newest first)."""


@dataclass(frozen=True, slots=True)
class TenantHealth:
    """A tenant's scheduler at a glance: its due backlog and its recent runs' lateness and outcomes."""

    at: datetime
    backlog: int
    """SCHEDULED jobs whose next tick is due and not yet handed over (next_run_at before `at`)."""
    oldest_due: datetime | None
    truncated: bool
    """The backlog read stopped at BACKLOG_MAX_READ jobs: the count is a floor."""
    sampled_jobs: int
    runs: int
    by_status: dict[str, int]
    lateness_ms: Percentiles
    duration_ms: Percentiles


@dataclass
class RunService:
    """Read and cancel one run of a tenant's job, and a job's statistics."""

    job_service: JobService
    logs: LogLinks | None = None
    stoppers: tuple[RunStopper, ...] = field(default=())
    run_logs: RunLogs | None = None
    """Where the runs' log lines are read back (None: this deployment keeps none to read)."""
    task_logs: TaskLogs | None = None
    """Where container targets' tasks' output is read back (None: none kept, or none to read)."""

    @property
    def runs(self) -> RunStore:
        return self.job_service.runs

    @property
    def clock(self) -> Clock:
        return self.job_service.clock

    def get(self, run_id: str, *, tenant: str) -> RunDetail:
        """The run with its attempts; another tenant's (or an unknown) run is not found."""
        job, scheduled_for = self._resolve(run_id, tenant)
        row = self.runs.get(job.job_id, times.stored(scheduled_for))
        if row is None:
            raise NotFound(f"run '{run_id}' not found", field="run_id")
        return RunDetail(run=row, logs_url=self.logs.url(row.run_id) if self.logs else None)

    def log_lines(self, run_id: str, *, tenant: str, cursor: str | None, limit: int) -> RunLogsPage:
        """The lines the run logged, oldest first: the worker's, then its container tasks' output
        (see the module docstring); another tenant's (or an unknown job's) run is not found. A run
        with no row yet (running on the fast path) may have lines already. The console link is the
        last task's stream for a container run, else the worker's group filtered by the run id."""
        job, scheduled_for = self._resolve(run_id, tenant)
        key = run_id_for(job.job_id, scheduled_for)
        tasks = self._printing_tasks(job, scheduled_for)
        console = self.logs.url(key) if self.logs else None
        if tasks and self.logs and self.logs.task_url(tasks[-1]):
            console = self.logs.task_url(tasks[-1])
        source, inner = _decode_log_cursor(cursor)
        lines: list[LogLine] = []
        while source <= len(tasks) and len(lines) < limit:
            page = self._source_page(job, key, scheduled_for, tasks, source, inner, limit - len(lines))
            lines += page.lines
            if page.next_cursor is not None:
                inner = page.next_cursor
                break
            source, inner = source + 1, None
        after = _encode_log_cursor(source, inner) if source <= len(tasks) else None
        return RunLogsPage(lines=lines, next_cursor=after, console_url=console)

    def _printing_tasks(self, job: Job, scheduled_for: datetime) -> list[str]:
        """The ECS tasks whose output jobsched keeps for this run: those of an image target's
        attempts (a task_definition_arn's output is where the caller's definition sends it)."""
        target = job.target
        if self.task_logs is None or not isinstance(target, EcsTarget) or target.image is None:
            return []
        row = self.runs.get(job.job_id, times.stored(scheduled_for), consistent=False)
        return list(row.ecs_tasks) if row is not None else []

    def _source_page(
        self,
        job: Job,
        key: str,
        scheduled_for: datetime,
        tasks: list[str],
        source: int,
        cursor: str | None,
        limit: int,
    ) -> LogPage:
        """A page of source `source`: 0 the worker's lines for the run, i the (i-1)th task's output."""
        if source == 0:
            if self.run_logs is None:
                return LogPage([], None)
            since = scheduled_for - LOG_LOOKBACK
            return self.run_logs.page(key, tenant=job.tenant, since=since, cursor=cursor, limit=limit)
        assert self.task_logs is not None  # tasks are listed only with a TaskLogs to read them
        return self.task_logs.page(tasks[source - 1], cursor=cursor, limit=limit)

    def cancel(self, run_id: str, *, tenant: str) -> RunCancel:
        """Not started: CANCELLED (a compare-and-set the worker's claim races). Running: asked to
        stop. Finished: Conflict. A repeat cancel answers what the first did."""
        job, scheduled_for = self._resolve(run_id, tenant)
        sf = times.stored(scheduled_for)
        row = self.runs.get(job.job_id, sf)
        now = self.clock.now()
        tick = self._a_tick_of(job, scheduled_for)
        # Its start marker on the job, live or lapsed: a lapsed one is a receive that got past it and
        # died, maybe after its handler ran on the fast path (no row written), as JobService.cancel's
        # sweep reads it.
        started = _holds_slot(job, sf) or _in_flight(job, sf)
        if row is None and not tick and not started:
            raise NotFound(f"run '{run_id}' not found", field="run_id")
        if row is None or row.status == RunStatus.PENDING:
            # Not started as far as its row tells: the cancel is written on the job item, where
            # every start marker of the run is written, and answers the markers as they stand after
            # it. None of the run: none can be written any more (cancelled_runs refuses it), and the
            # run is CANCELLED below. One there: it got past its marker first, and is marked. (Read
            # above and written below apart, a marker written between, or a row read stale by its
            # worker, let a cancel answered CANCELLED meet a handler that ran: tests/sim seed 80.)
            after = self.job_service.jobs.cancel_run(job.job_id, run=sf)
            if after is None:
                raise NotFound(f"run '{run_id}' not found", field="run_id")
            job = after
            started = _holds_slot(job, sf) or _in_flight(job, sf)
        if started:
            # The run holds its job's slot, or is counted in flight on it (its in_flight entry): it
            # has started, maybe on the fast path, whose row stays PENDING (or absent) until its
            # first heartbeat. Mark it instead of cancelling it (an absent row is born PENDING,
            # marked: the run's one write at its end records what it did over it; a redelivery of a
            # dead receive's message records it LOST, Worker._run_leased).
            kind = "scheduled" if tick else "manual"  # a counted run that is no tick is a run-now
            create = NewRun(job.job_id, job.tenant, sf, kind)
            marked = self.runs.request_cancel(job.job_id, sf, now=now, pending_too=True, create=create)
            if marked.applied and marked.row is not None:
                return self._stopping(job, marked.row, run_id)
            row = marked.row
        if row is None or row.status == RunStatus.PENDING:
            # Absent (a tick handed over on the fast path has no row until it ends): created
            # CANCELLED, so its worker finds it so.
            create = NewRun(job.job_id, job.tenant, sf, "scheduled")
            moved = self.runs.cancel(job.job_id, sf, now=now, create=create)
            if moved.applied:
                return RunCancel(run_id=run_id, status=RunStatus.CANCELLED)
            row = moved.row
        if row is not None and row.status in HELD:
            # Held, under a live lease or a lapsed one alike: never CANCELLED. A lapsed lease is a
            # worker that died (or stalled) past its claim, maybe after its handler ran; the row
            # cannot tell. Marked, it is asked to stop if it lives, and the redelivery that takes it
            # over records it LOST instead of running it again (Worker._run_leased; tests/sim seeds
            # 1, 4, 6: a leased run died after its handler, its lease lapsed, and a run cancel wrote
            # RUNNING -> PENDING -> CANCELLED over the run that executed).
            marked = self.runs.request_cancel(job.job_id, sf, now=now)
            if marked.applied and marked.row is not None:
                return self._stopping(job, marked.row, run_id)
            row = marked.row  # it finished meanwhile
        if row is not None and row.status == RunStatus.CANCELLED:
            return RunCancel(run_id=run_id, status=RunStatus.CANCELLED)
        status = row.status.value if row is not None else "gone"
        raise Conflict(f"run {run_id} has already finished ({status}); it cannot be cancelled")

    def stats(self, job_id: str, *, tenant: str, since: datetime | None) -> JobStats:
        """Counts and percentiles over the job's runs scheduled at or after `since`, newest first,
        reading at most STATS_MAX_RUNS of them."""
        job = self.job_service.owned(job_id, tenant)
        counted: list[Execution] = []
        cursor = None
        truncated = False
        while True:
            page, cursor = self.runs.history(
                job.job_id, start=since, end=None, status=None, limit=_STATS_PAGE, cursor=cursor
            )
            counted.extend(page)
            if cursor is None:
                break
            if len(counted) >= STATS_MAX_RUNS:
                truncated = True
                break
        counted = counted[:STATS_MAX_RUNS]
        by_status: dict[str, int] = {}
        for run in counted:
            by_status[run.status.value] = by_status.get(run.status.value, 0) + 1
        finished = [r for r in counted if r.status in _FINISHED]
        succeeded = sum(r.status == RunStatus.SUCCEEDED for r in finished)
        lateness = [ms for r in counted if (ms := r.lateness_ms()) is not None]
        durations = [r.duration_ms for r in counted if r.duration_ms is not None and r.status in TERMINAL]
        return JobStats(
            job_id=job.job_id,
            since=since,
            runs=len(counted),
            by_status=by_status,
            lateness_ms=Percentiles.of(lateness),
            duration_ms=Percentiles.of(durations),
            success_rate=succeeded / len(finished) if finished else None,
            truncated=truncated,
            oldest_counted=min((r.scheduled_for for r in counted), default=None),
        )

    def tenant_health(self, *, tenant: str) -> TenantHealth:
        """The due backlog, from the listing index's soonest-tick-first order (read until a tick is
        not yet due, at most BACKLOG_MAX_READ jobs), and the lateness and durations of the newest
        SAMPLE_RUNS runs of a sample of jobs: the SAMPLE_JOBS newest and the SAMPLE_JOBS soonest due.
        A sample, not every run: the fleet-wide figures are the dispatcher's and worker's metrics
        (docs/operations.md); this is what one tenant sees in its console. At most two listing reads
        per BACKLOG_MAX_READ jobs and 2 * SAMPLE_JOBS history queries, never a scan."""
        now = self.clock.now()
        store = self.job_service.jobs
        backlog, oldest, read, truncated = 0, None, 0, False
        soonest: list[Job] = []
        cursor = None
        while True:
            page = store.list_jobs(tenant, order="next_run", where=JobFilter(), cursor=cursor, limit=100)
            reached_now = False
            for job in self._flat(page, order="next_run"):  # soonest tick first
                read += 1
                if len(soonest) < SAMPLE_JOBS:
                    soonest.append(job)
                if job.next_run_at is None or job.next_run_at >= now:
                    reached_now = True
                    break
                if job.status == JobStatus.SCHEDULED:
                    backlog += 1
                    oldest = job.next_run_at if oldest is None else min(oldest, job.next_run_at)
            if reached_now or page.cursor is None:
                break
            if read >= BACKLOG_MAX_READ:
                truncated = True
                break
            cursor = page.cursor
        newest = store.list_jobs(tenant, order="created", where=JobFilter(), cursor=None, limit=SAMPLE_JOBS)
        sample = {job.job_id: job for job in [*self._flat(newest, order="created")[:SAMPLE_JOBS], *soonest]}
        runs = [run for job_id in sample for run in self.runs.recent(job_id, limit=SAMPLE_RUNS)]
        by_status: dict[str, int] = {}
        for run in runs:
            by_status[run.status.value] = by_status.get(run.status.value, 0) + 1
        return TenantHealth(
            at=now,
            backlog=backlog,
            oldest_due=oldest,
            truncated=truncated,
            sampled_jobs=len(sample),
            runs=len(runs),
            by_status=by_status,
            lateness_ms=Percentiles.of([ms for r in runs if (ms := r.lateness_ms()) is not None]),
            duration_ms=Percentiles.of(
                [r.duration_ms for r in runs if r.duration_ms is not None and r.status in TERMINAL]
            ),
        )

    def _flat(self, page: JobListing, *, order: ListOrder) -> list[Job]:
        """A listing page's jobs, each pack's jobs in its place (services/packs.py)."""
        packed = self.job_service.packed
        out: list[Job] = []
        for entry in page.entries:
            if isinstance(entry, Job):
                out.append(entry)
            elif packed is not None:
                out.extend(job for _, job, _ in packed.expand(entry, where=JobFilter(), order=order))
        return out

    # -- helpers ----------------------------------------------------------------------------------------
    def _stopping(self, job: Job, row: Execution, run_id: str) -> RunCancel:
        for stop in self.stoppers:  # the seam for targets that are not a python handler
            stop(job, row)
        # A fast-path run's row still reads PENDING while it runs: what it is doing is running.
        status = RunStatus.RUNNING if row.status == RunStatus.PENDING else row.status
        return RunCancel(run_id=run_id, status=status, stopping=True)

    def _resolve(self, run_id: str, tenant: str) -> tuple[Job, datetime]:
        try:
            job_id, scheduled_for = parse_run_id(run_id)
        except ValueError:
            raise NotFound(f"run '{run_id}' not found", field="run_id") from None
        try:
            return self.job_service.owned(job_id, tenant), scheduled_for
        except NotFound:
            raise NotFound(f"run '{run_id}' not found", field="run_id") from None

    @staticmethod
    def _a_tick_of(job: Job, scheduled_for: datetime) -> bool:
        """Whether the job's own schedule fires at `scheduled_for` (a run that may have no row yet)."""
        if job.type == "one_off":
            return job.run_at is not None and times.to_utc(job.run_at) == scheduled_for
        if job.type == "recurring" and job.cron_expr:
            schedule = cron.parse(job.cron_expr, job.timezone)
            return schedule.next_after(scheduled_for - timedelta(milliseconds=1)) == scheduled_for
        return False


def _encode_log_cursor(source: int, inner: str | None) -> str:
    """A log page's cursor: the source it stopped in, and that source's own cursor (opaque)."""
    raw = json.dumps({"s": source, "c": inner}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_log_cursor(cursor: str | None) -> tuple[int, str | None]:
    """(source, its own cursor) of a cursor _encode_log_cursor made; (0, None): the first page."""
    if not cursor:
        return 0, None
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        source, inner = value["s"], value["c"]
    except (binascii.Error, ValueError, TypeError, KeyError) as exc:
        raise ValidationFailed("not a cursor this API answered", field="cursor") from exc
    if not isinstance(source, int) or source < 0 or not (inner is None or isinstance(inner, str)):
        raise ValidationFailed("not a cursor this API answered", field="cursor")
    return source, inner


def _holds_slot(job: Job, sf: str) -> bool:
    """Whether the run of `sf` holds its job's slot (its start marker, for slot-taking jobs), live
    or lapsed (a finished holder's too: its row says so, and the mark is then refused)."""
    return job.active_run == sf


def _in_flight(job: Job, sf: str) -> bool:
    """Whether the run of `sf` is counted in flight on its job (an in_flight entry of it, live or
    lapsed: a receive that got past the count and died left it)."""
    return any(key.split("#", 1)[0] == sf for key in job.in_flight)
