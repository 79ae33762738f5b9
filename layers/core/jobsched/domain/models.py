"""Pydantic models of the domain: jobs, runs, their policies, and the message that asks for a run.

What a caller may ask for is in jobsched.domain.commands, what the services answer in
jobsched.domain.results, and the API's wire format (its views) in jobsched.api.models.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from jobsched.domain.alerts import AlertPolicy
from jobsched.domain.compute import Placement, Resources, RunsOn, place
from jobsched.domain.fairness import Priority
from jobsched.domain.limits import Concurrency
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import EcsTarget, PythonTarget, TargetSpec, WorkerTarget

JobType = Literal["one_off", "recurring", "dependent"]
OverlapPolicy = Literal["skip", "buffer_one", "allow"]
CatchupPolicy = Literal["one", "none", "all"]
RunKind = Literal["scheduled", "manual", "backfill", "dependant"]
"""Why a run exists: its job's own tick, a run-now, a backfill, or its upstreams' completion."""
MAX_JITTER_SECONDS = 3600
MAX_CATCHUP_LIMIT = 1000
# DAG bounds: upstreams of one job, and jobs in the graph around it (both ways).
MAX_FAN_IN = 20
# Dependants of one job (a run's success starts one DAG workflow whose input lists them all), and
# jobs in one graph (a dead letter's failure workflow lists every descendant): both keep the
# workflow inputs far below Step Functions' 256 KiB (tests/unit/services/test_dag_fan_out.py).
MAX_FAN_OUT = 100
MAX_GRAPH_NODES = 200

# A payload rides in every SQS message and is stored on the job: 32 KiB keeps a message well
# under SQS's 256 KiB and a job item well under DynamoDB's 400 KB while leaving room for runs.
MAX_PAYLOAD_BYTES = 32 * 1024
MAX_ATTEMPTS_LIMIT = 25
# Every instant a caller gives lies in [EARLIEST_TIME, LATEST_TIME): run ids carry scheduled_for as
# Unix milliseconds, stored times are fixed-width UTC text (a year before 1000 does not parse back),
# and 0001-01-01T00:00+01:00 or 9999-12-31T23:59-01:00 overflow when converted to UTC.
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(3000, 1, 1, tzinfo=UTC)


def payload_bytes(payload: dict[str, Any]) -> int:
    """The size a payload counts against MAX_PAYLOAD_BYTES: its compact JSON as UTF-8.

    Not json.dumps' default ASCII escaping, which counts an "é" (2 bytes in UTF-8) as 6 ("\\u00e9").
    """
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def in_time_window(value: datetime) -> datetime:
    """`value` (timezone-aware) when it lies in the window every stored time fits; else ValueError."""
    if not EARLIEST_TIME <= value < LATEST_TIME:
        raise ValueError("must be at or after 1970-01-01T00:00:00Z and before 3000-01-01T00:00:00Z")
    return value


class Backoff(BaseModel):
    """Exponential backoff between attempts: initial * multiplier**(n-1), capped, optionally jittered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    initial_seconds: float = Field(default=1.0, gt=0, le=3600)
    """Wait before the second attempt."""
    multiplier: float = Field(default=2.0, ge=1, le=10)
    """Growth factor per further attempt."""
    max_seconds: float = Field(default=300.0, gt=0, le=86_400)
    """No wait is longer than this."""
    jitter: bool = True
    """Spread each wait uniformly over [wait/2, wait] so retries of a burst do not align."""

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> Backoff:
        if self.max_seconds < self.initial_seconds:
            raise ValueError("max_seconds must be >= initial_seconds")
        return self

    def delay(self, attempt: int) -> float:
        """Upper bound of the wait after failed attempt number `attempt` (1-based), before jitter."""
        return float(min(self.max_seconds, self.initial_seconds * self.multiplier ** max(0, attempt - 1)))


class RetryPolicy(BaseModel):
    """How often and how patiently a failed run is tried again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS_LIMIT)
    """Attempts in all, the first included; after the last failure the run is dead-lettered."""
    backoff: Backoff = Field(default_factory=Backoff)
    """Waits between attempts."""
    timeout_seconds: int | None = Field(default=None, ge=1, le=43_200)
    """Longest one attempt may run; None means the lease/runtime limit."""
    non_retryable: tuple[str, ...] = Field(default=(), max_length=20)
    """Error type names (the exception's class name) that dead-letter at once, without retries."""

    def wait_before(self, attempt: int, *, unit_random: float, retry_after: float | None = None) -> int:
        """Whole seconds to wait after failed attempt `attempt`; `unit_random` in [0, 1) draws the jitter.

        `retry_after` (the target's own "not before", e.g. HTTP Retry-After) lengthens the wait to
        it, within the backoff's bounds: never past max_seconds.
        """
        upper = self.backoff.delay(attempt)
        wait = upper * (0.5 + unit_random / 2) if self.backoff.jitter else upper
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff.max_seconds))
        return max(1, math.ceil(wait))

    def retries_after(self, attempt: int, error_type: str) -> bool:
        """Whether a failure of attempt `attempt` with `error_type` is tried again."""
        return attempt < self.max_attempts and error_type not in self.non_retryable


class SchedulePolicy(BaseModel):
    """How a recurring job treats overlap, missed ticks, jitter and its lifetime bounds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    overlap_policy: OverlapPolicy = "skip"
    """A tick due while the previous run is still running: skip it (a SKIPPED run), buffer at most
    one behind it, or allow concurrent runs."""
    catchup: CatchupPolicy = "one"
    """Ticks missed by downtime or a pause: coalesce into one run, run none, or run all (oldest first,
    at most max_catchup)."""
    max_catchup: int = Field(default=10, ge=1, le=MAX_CATCHUP_LIMIT)
    """With catchup=all, how many of the most recent missed ticks still run."""
    starting_deadline_seconds: int | None = Field(default=None, ge=1, le=86_400)
    """A run that cannot start within this many seconds of its tick is SKIPPED instead."""
    jitter_seconds: int = Field(default=0, ge=0, le=MAX_JITTER_SECONDS)
    """Fire each tick a stable, job-specific offset in [0, jitter_seconds] late."""
    start_at: AwareDatetime | None = None
    """No tick before this instant."""
    end_at: AwareDatetime | None = None
    """No tick after this instant."""
    max_runs: int | None = Field(default=None, ge=1, le=10_000_000)
    """At most this many ticks are handed over; then the job completes."""
    priority: Priority = "normal"
    """Among runs due together, high ones leave first, low ones last (jobsched.domain.fairness).
    Kept in the policy, which the due index projects already: the dispatcher orders a slice without
    reading the job, and a normal job's stored policy stays as it was (defaults are not stored)."""


# How many run cancels a job item remembers (Job.cancelled_runs, about 25 bytes each of every write
# of the item): the newest ticks, and always the one just cancelled. An entry is not removed once its
# row is CANCELLED: a later copy of the run's message would pass its marker again and could read that
# row stale (the fast path's eventually consistent read), the very race the set closes (seed 80).
# One forgotten after 49 newer cancels of the job is left to its row, CANCELLED long before, where a
# stale read (seconds old at most) no longer shows PENDING.
MAX_CANCELLED_RUNS = 50


def in_flight_key(run: str, message: str) -> str:
    """A run's entry in Job.in_flight: its tick (stored form) and the SQS message carrying it."""
    return f"{run}#{message}"


def started_runs(job: Job) -> set[str]:
    """The runs (stored ticks) whose start marker is on the job, live or lapsed: the slot's holder,
    and every run with an in-flight entry (a counted run). A receive got past the marker, so the run
    may have executed (a receive that died after its fast-path handler leaves no other trace): its
    message's redelivery records it truthfully, and nothing else may record it unstarted (SKIPPED,
    CANCELLED) over it (services/jobs.py cancel, services/dispatch.py hand_over)."""
    started = {key.split("#", 1)[0] for key in job.in_flight}
    if job.active_run is not None:
        started.add(job.active_run)
    return started


def live_runs(job: Job, now: datetime) -> set[str]:
    """Those of `started_runs` whose start marker is live at `now` (its until not yet passed): a
    receive holds it and runs or records it. A started run not in here has lost its holder."""
    live = {key.split("#", 1)[0] for key, until in job.in_flight.items() if until >= now}
    if job.active_run is not None and job.active_until is not None and job.active_until >= now:
        live.add(job.active_run)
    return live


class RescheduledTicks(BaseModel):
    """The old schedule's ticks of a pause that an edit replaced: ticks of (cron_expr, timezone) from
    `first` to `until`, both included, each to be recorded SKIPPED "rescheduled".

    Kept on the job by the edit's own write, until the resume: the records are written after that
    write (a refused edit records nothing), and a fault among them used to leave the rest with no row
    for good, the old schedule gone from the job (tests/sim seed 2140). Each record is idempotent,
    so the next edit of the pause and the resume write them again before theirs.
    """

    model_config = ConfigDict(frozen=True)

    cron_expr: str
    timezone: str
    first: datetime
    until: datetime


class Job(BaseModel):
    """A stored job definition."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    tenant: str
    type: JobType
    status: JobStatus
    target: TargetSpec
    """What a run calls (jobsched.domain.targets); `handler="x"` is read as a python target."""
    payload: dict[str, Any]
    name: str | None = None
    run_at: datetime | None = None
    cron_expr: str | None = None
    timezone: str = "UTC"
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    policy: SchedulePolicy = Field(default_factory=SchedulePolicy)
    idempotent: bool = True
    tags: dict[str, str] = Field(default_factory=dict)
    """The caller's labels (jobsched.domain.listing: limits, and the listing's filter on them)."""
    alerts: AlertPolicy | None = None
    """What the scheduler alerts on for this job's runs (None: nothing; jobsched.domain.alerts)."""
    concurrency: Concurrency | None = None
    """The tenant's concurrency key this job's runs take a slot of (None: none; domain.limits)."""
    resources: Resources | None = None
    """What the caller asked each run to get (None: nothing asked); placement() resolves it, and a
    worker pool places its runs by it (domain.placement)."""
    runs_on: RunsOn | None = None
    """Where the caller asked the runs to execute (None: wherever placement() picks)."""
    next_run_at: datetime | None = None
    dispatched: int = 0
    paused_at: datetime | None = None
    resume_from: datetime | None = None
    rescheduled: RescheduledTicks | None = None
    """An edit during the pause: the old schedule's ticks of it to record SKIPPED (RescheduledTicks)."""
    # The start markers every run writes on its job before its handler runs, so that a cancel (a
    # compare-and-set on this item) either sees the run and answers 409, or wins before it starts:
    # - the slot (one-offs, and recurring jobs whose overlap policy guards): the run holding the
    #   job, the message carrying it, and its lease; and the one tick buffered behind it (buffer_one),
    #   with its kind and how long it waits for the slot;
    # - the runs in flight (every other run: overlap "allow", backfills, dependants): one entry per
    #   run and message (in_flight_key) with its own lease. Not a bare count: a receive that died
    #   left its entry to lapse on its own (the live runs' renewals kept a shared lease alive, and a
    #   cancel was refused for ever, tests/sim seed 137), and its message's redelivery re-enters it.
    active_run: str | None = None
    active_until: datetime | None = None
    active_message: str | None = None
    # The holder (run, message) the slot's last taking write found there and replaced: a takeover of
    # a lapsed (or finished) holder, written in the same write, so that a holder whose receive died
    # after its fast-path handler still finds a trace of its start when the taker's receive failed
    # before keeping that start on the holder's row (Worker.process, tests/sim seed 603). None when
    # that write found the slot unheld (a hold of the slot's own message records itself).
    displaced_run: str | None = None
    displaced_message: str | None = None
    buffered_run: str | None = None
    buffered_kind: str | None = None
    buffered_until: datetime | None = None
    in_flight: dict[str, datetime] = Field(default_factory=dict)
    # The runs a run cancel (POST /api/runs/{id}/cancel) found unstarted, by tick (stored form): every
    # start marker write of such a run is refused, so of a run cancel and a run's start exactly one
    # wins on this item, as for a cancel of the whole job (JobStore.cancel_run: tests/sim seed 80).
    # At most MAX_CANCELLED_RUNS, the newest ticks (see there).
    cancelled_runs: frozenset[str] = frozenset()
    # The DAG: this job's upstreams, the jobs that wait for it, and the schedule its periods come from
    # ("once" for chains rooted in one-off jobs, "<cron>@<timezone>" for recurring roots).
    depends_on: tuple[str, ...] = ()
    dependants: tuple[str, ...] = ()
    root_schedule: str | None = None
    created_at: datetime
    updated_at: datetime
    version: int = 1
    # A packed job's view (jobsched.domain.packs): built from its batch's definition and its run row,
    # with no item of its own yet. Never stored: a job item is a materialized job.
    packed: bool = False

    @model_validator(mode="before")
    @classmethod
    def _handler_is_a_python_target(cls, data: Any) -> Any:
        # `handler` is the shorthand of {"type": "python", "handler": ...}, as in a request.
        if isinstance(data, dict) and "target" not in data and "handler" in data:
            data = {**data, "target": PythonTarget(handler=data["handler"])}
            del data["handler"]
        return data

    @property
    def handler(self) -> str | None:
        """The python target's handler name; None for every other kind of target."""
        return self.target.handler if isinstance(self.target, PythonTarget) else None

    def placement(self) -> Placement:
        """Where this job's runs execute, and at what size (jobsched.domain.compute). A worker pool's
        run is relayed to its pool by the Lambda worker (services/workers.py), at the size it asked."""
        if isinstance(self.target, WorkerTarget):
            return Placement(runs_on="lambda", resources=self.resources or Resources())
        if isinstance(self.target, EcsTarget):
            # A container runs as its own Fargate task, which the ECS worker starts and follows.
            return place(self.retry.timeout_seconds, self.resources, "ecs")
        return place(self.retry.timeout_seconds, self.resources, self.runs_on)


class RunError(BaseModel):
    """Why an attempt failed."""

    model_config = ConfigDict(frozen=True)

    type: str
    message: str


class AttemptRecord(BaseModel):
    """One finished attempt of a run, as kept in the run's history."""

    model_config = ConfigDict(frozen=True)

    attempt: int
    worker: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    outcome: str
    error: RunError | None = None


class Execution(BaseModel):
    """One run of a job: one firing (job_id, scheduled_for) and its current attempt."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    job_id: str
    tenant: str
    scheduled_for: datetime
    status: RunStatus
    attempt: int = 0
    lease_owner: str | None = None
    lease_message: str | None = None
    """The SQS message id of the delivery holding the lease (a second copy of it is not a duplicate)."""
    lease_until: datetime | None = None
    worker: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    result: Any = None
    error: RunError | None = None
    attempts: list[AttemptRecord] = Field(default_factory=list)
    replays: int = 0
    reason: str | None = None
    kind: str = "scheduled"
    created_at: datetime | None = None
    """When the row was written first: for a backfill run, when the backfill asked for it."""
    cancel_requested_at: datetime | None = None
    """When POST /api/runs/{id}/cancel asked this running run to stop (its heartbeat reads it)."""
    # The long-job helpers (jobsched.handlers.RunContext): written only by runs that call them.
    progress: Any = None
    """The last progress the run's handler reported (ctx.heartbeat(progress)), and when."""
    progress_at: datetime | None = None
    checkpoint: Any = None
    """The state the run's handler last checkpointed (ctx.checkpoint), and when: its next attempt
    resumes from it (ctx.last_checkpoint)."""
    checkpoint_at: datetime | None = None
    materialized: bool = False
    """A packed job's run whose job was copied out to an item of its own (jobsched.domain.packs): a
    packed start refuses it, and its job item's path runs it from then on."""
    ecs_tasks: list[str] = Field(default_factory=list)
    """The ECS tasks (ARNs) the run's attempts ran, in the order they started (container targets:
    noted by ctx.note_task, once each): where GET /api/runs/{id}/logs reads their output."""

    def lateness_ms(self) -> int | None:
        """How late the run started (None: not started, or nothing to measure from).

        From its tick, except for a backfill run: its tick is in the past by design (days, for a
        week's backfill), so it is late from when the backfill asked for it, the row's creation.
        """
        since = self.created_at if self.kind == "backfill" else self.scheduled_for
        if self.started_at is None or since is None:
            return None
        return int((self.started_at - since).total_seconds() * 1000)


class RunMessage(BaseModel):
    """The SQS message body that asks a worker to run (job_id, scheduled_for)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = 1
    job_id: str
    scheduled_for: str  # stored form, see jobsched.domain.times.stored
    kind: RunKind = "scheduled"
    # The sender saw a job whose runs take its slot (takes_slot): the worker's hold on the job is
    # then its read of the job too (one conditional write returning the job instead of a read and
    # a write). Without it the worker counts the run on the job instead (the same one write). A hint
    # only: the worker decides from the job it gets back.
    guard: bool = False
    # The tenant's max_concurrent_runs as the dispatcher's cached quota read had it when it handed
    # the run over (services/dispatch.py): 0 when no operator set the tenant's quota (no tenant-wide
    # key), else the limit. None: the sender did not say (a retry, a replay, a run-now), so the worker
    # reads the quota itself, through its own cache. Carried so that a healthy run costs the worker
    # no quota read: a change applies to the runs handed over after it (the horizon, 14 min at most).
    cap: int | None = Field(default=None, ge=0)
    # A packed job's definition (jobsched.domain.packs.PackedDefinition, as JSON): the job has no item
    # of its own, so its run's message carries what the worker runs. None for every other job.
    packed: dict[str, Any] | None = None


def takes_slot(job_type: str, overlap_policy: str) -> bool:
    """Whether a job's runs hold its single slot while they run (else they are counted on it).

    A one-off has one run, and a recurring job whose overlap policy guards (skip, buffer_one) runs
    one tick at a time: the slot is both the overlap guard and the start marker a cancel checks.
    """
    return job_type == "one_off" or (job_type == "recurring" and overlap_policy != "allow")
