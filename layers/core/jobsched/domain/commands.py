"""Commands: what a caller may ask the job services to do, validated before any service runs.

The API takes them as request bodies (their JSON Schema is the OpenAPI document's), the CLI builds
them, and the services take them as input; what the services answer is in jobsched.domain.results.
"""

from __future__ import annotations

import math
import unicodedata
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from jobsched import cron
from jobsched.domain.alerts import AlertPolicy
from jobsched.domain.compute import DoesNotFit, Resources, RunsOn, place
from jobsched.domain.fairness import Priority
from jobsched.domain.limits import Concurrency
from jobsched.domain.listing import checked_tags
from jobsched.domain.models import (
    LATEST_TIME,
    MAX_ATTEMPTS_LIMIT,
    MAX_CATCHUP_LIMIT,
    MAX_FAN_IN,
    MAX_JITTER_SECONDS,
    MAX_PAYLOAD_BYTES,
    Backoff,
    CatchupPolicy,
    JobType,
    OverlapPolicy,
    RetryPolicy,
    SchedulePolicy,
    in_time_window,
    payload_bytes,
)
from jobsched.domain.targets import EcsTarget, PythonTarget, TargetSpec, WorkerTarget

HANDLER_PATTERN = r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$"


def _one_of_handler_and_target(target: TargetSpec | None, info: ValidationInfo) -> TargetSpec | None:
    """`target`, or the python target `handler` is shorthand for; both, or (when required) neither: 400.

    A field validator on `target` (declared after `handler`), so the error names the field; a
    `handler` that failed its own checks is not in info.data and is reported on its own.
    """
    if "handler" not in info.data:
        return target
    handler = info.data["handler"]
    if handler is not None and target is not None:
        raise ValueError("give either target or its shorthand handler, not both")
    if handler is not None:
        return PythonTarget(handler=handler)
    return target


# A payload is JSON every consumer reads the same way (I-JSON, RFC 7493): NaN and Infinity are no
# JSON (Python writes them, JavaScript, DynamoDB and most targets refuse them), an integer past
# 2**53 - 1 loses digits in JavaScript and in every float-parsing JSON library, and deep nesting
# exhausts recursive parsers (Python's own json among them).
MAX_SAFE_INTEGER = 2**53 - 1
MAX_PAYLOAD_DEPTH = 32
# Job ids are the service's own (jobsched.domain.keys); error names are exception class names,
# optionally dotted ("TimeoutError", "botocore.exceptions.ClientError").
JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
ERROR_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
MAX_ERROR_NAME_CHARS = 200

JobId = Annotated[str, Field(min_length=1, max_length=64, pattern=JOB_ID_PATTERN)]
ErrorName = Annotated[str, Field(min_length=1, max_length=MAX_ERROR_NAME_CHARS, pattern=ERROR_NAME_PATTERN)]


def _checked_json(value: Any, path: str, depth: int = 1) -> None:
    """Raise ValueError naming the first place in `value` that is no portable JSON."""
    if depth > MAX_PAYLOAD_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError(f"{path}: integer beyond ±{MAX_SAFE_INTEGER} (2**53 - 1)")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value} is not JSON (NaN and Infinity are refused)")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _checked_json(item, f"{path}.{key}", depth + 1)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _checked_json(item, f"{path}[{i}]", depth + 1)
        return
    raise ValueError(f"{path}: {type(value).__name__} is not JSON")


def _no_control_characters(value: str | None) -> str | None:
    if value is not None and any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValueError("must not contain control characters")
    return value


Name = Annotated[str, Field(max_length=200), AfterValidator(_no_control_characters)]


def _checked_payload(value: dict[str, Any]) -> dict[str, Any]:
    _checked_json(value, "payload")
    size = payload_bytes(value)
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"is {size} bytes as UTF-8 JSON; the limit is {MAX_PAYLOAD_BYTES}")
    return value


ApiTime = Annotated[AwareDatetime, AfterValidator(in_time_window)]
"""A timezone-aware instant in the time window, as every request model takes one."""


class CreateJobRequest(BaseModel):
    """Body of POST /api/jobs."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    type: JobType
    handler: str | None = Field(default=None, min_length=1, max_length=200, pattern=HANDLER_PATTERN)
    """Shorthand for target {"type": "python", "handler": ...}."""
    target: TargetSpec | None = Field(default=None, validate_default=True)
    """What a run calls (one of handler and target is required; after validation, always set)."""
    payload: dict[str, Any] = Field(default_factory=dict)
    run_at: ApiTime | None = None
    cron_expr: str | None = Field(default=None, min_length=1, max_length=200)
    timezone: str = Field(default="UTC", min_length=1, max_length=64)
    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS_LIMIT)
    backoff: Backoff = Field(default_factory=Backoff)
    timeout_seconds: int | None = Field(default=None, ge=1, le=43_200)
    non_retryable_errors: list[ErrorName] = Field(default_factory=list, max_length=20)
    idempotent: bool = True
    depends_on: list[JobId] = Field(default_factory=list)
    name: Name | None = None
    tags: Annotated[dict[str, str], AfterValidator(checked_tags)] = Field(default_factory=dict)
    alerts: AlertPolicy | None = None
    """What the scheduler alerts on (jobsched.domain.alerts); absent: no alerts."""
    concurrency: Concurrency | None = None
    """{"key", "limit"}: at most `limit` runs of the tenant's `key` at once (jobsched.domain.limits)."""
    # Recurring-job semantics (ignored bounds checks aside, meaningful for recurring jobs only).
    overlap_policy: OverlapPolicy = "skip"
    catchup: CatchupPolicy = "one"
    max_catchup: int = Field(default=10, ge=1, le=MAX_CATCHUP_LIMIT)
    starting_deadline_seconds: int | None = Field(default=None, ge=1, le=86_400)
    jitter_seconds: int = Field(default=0, ge=0, le=MAX_JITTER_SECONDS)
    start_at: ApiTime | None = None
    end_at: ApiTime | None = None
    max_runs: int | None = Field(default=None, ge=1, le=10_000_000)
    priority: Priority = "normal"
    """Order among runs due together, every job type (jobsched.domain.fairness)."""
    # Placement (jobsched.domain.compute): declared after timeout_seconds, which they are checked with.
    resources: Resources | None = None
    """CPU units and memory each run needs; absent: the Lambda worker's size, if the timeout fits it."""
    runs_on: RunsOn | None = Field(default=None, validate_default=True)
    """Where runs execute; absent: the Lambda worker when the timeout and resources fit it, else ECS."""

    @field_validator("runs_on")
    @classmethod
    def _placeable(cls, value: RunsOn | None, info: ValidationInfo) -> RunsOn | None:
        # A timeout or resources that failed their own checks are reported on their own.
        if isinstance(info.data.get("target"), WorkerTarget):
            return value  # a worker pool's run: placed on one of its workers (domain.placement)
        if isinstance(info.data.get("target"), EcsTarget):
            if value == "lambda":
                raise ValueError("an ecs target runs as its own Fargate task: leave runs_on out (or use ecs)")
            value_for_check: RunsOn = "ecs"
            if "timeout_seconds" in info.data and "resources" in info.data:
                checked_placement(info.data["timeout_seconds"], info.data["resources"], value_for_check)
            return value
        if "timeout_seconds" in info.data and "resources" in info.data:
            checked_placement(info.data["timeout_seconds"], info.data["resources"], value)
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: TargetSpec | None, info: ValidationInfo) -> TargetSpec | None:
        target = _one_of_handler_and_target(value, info)
        if target is None and "handler" in info.data:
            raise ValueError("is required (or its shorthand handler)")
        return target

    def run_target(self) -> TargetSpec:
        """The target the job runs (set by validation: a request has one or the other)."""
        if self.target is None:
            raise ValueError("a validated request always has a target")
        return self.target

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _checked_payload(value)

    @field_validator("depends_on")
    @classmethod
    def _upstreams(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_FAN_IN:
            raise ValueError(f"at most {MAX_FAN_IN} upstream jobs")
        if len(set(value)) != len(value):
            raise ValueError("an upstream job is listed twice")
        return value

    @model_validator(mode="after")
    def _fields_for_type(self) -> CreateJobRequest:
        if self.type == "one_off" and self.depends_on and self.run_at is None:
            # Seed 1's dependent job: a one-off that waits for its upstreams instead of a time. It is
            # stored (and read back) as type "dependent": one name for one kind of job.
            self.type = "dependent"
        if self.type == "dependent":
            if not self.depends_on:
                raise ValueError("depends_on is required for a dependent job")
            if self.run_at is not None or self.cron_expr is not None:
                raise ValueError("a dependent job has no time of its own: no run_at, no cron_expr")
            return self
        if self.depends_on:
            raise ValueError("depends_on is only for dependent jobs (type: dependent)")
        if self.type == "one_off":
            if self.run_at is None:
                raise ValueError("run_at is required for a one_off job")
            if self.cron_expr is not None:
                raise ValueError("cron_expr is only for recurring jobs")
        else:
            if self.cron_expr is None:
                raise ValueError("cron_expr is required for a recurring job")
            if self.run_at is not None:
                raise ValueError("run_at is only for one_off jobs")
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        if self.cron_expr is not None:
            _first_tick_in_window(self.cron_expr, self.timezone, self.start_at)
        return self

    def schedule_policy(self) -> SchedulePolicy:
        """The recurring-job policy this request asks for."""
        return SchedulePolicy(
            overlap_policy=self.overlap_policy,
            catchup=self.catchup,
            max_catchup=self.max_catchup,
            starting_deadline_seconds=self.starting_deadline_seconds,
            jitter_seconds=self.jitter_seconds,
            start_at=self.start_at,
            end_at=self.end_at,
            max_runs=self.max_runs,
            priority=self.priority,
        )

    def retry_policy(self) -> RetryPolicy:
        """The retry policy this request asks for."""
        return RetryPolicy(
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            timeout_seconds=self.timeout_seconds,
            non_retryable=tuple(self.non_retryable_errors),
        )


def checked_placement(
    timeout_seconds: int | None, resources: Resources | None, runs_on: RunsOn | None
) -> None:
    """ValueError naming the field at fault when no worker can run this (compute.place's DoesNotFit)."""
    try:
        place(timeout_seconds, resources, runs_on)
    except DoesNotFit as exc:
        raise ValueError(str(exc) if exc.field == "runs_on" else f"{exc.field}: {exc}") from exc


def _first_tick_in_window(cron_expr: str, timezone: str, start_at: Any) -> None:
    """ValueError naming start_at when the schedule's first tick from it is at or after LATEST_TIME.

    Every time a caller gives lies before LATEST_TIME, but a tick computed from one need not: a
    yearly schedule starting late in 2999 first fires in 3000, which no stored time can hold. A bad
    expression or timezone is left to the service, which names it.
    """
    if start_at is None:
        return  # the first tick follows now, decades before LATEST_TIME
    try:
        first = cron.CronSchedule(cron_expr, timezone).next_after(start_at - timedelta(milliseconds=1))
    except ValueError:
        return
    if first >= LATEST_TIME:
        raise ValueError(
            f"start_at: the schedule's first tick from it, {first.isoformat()}, is at or after "
            f"{LATEST_TIME.isoformat()}"
        )


def _never_null(schema: dict[str, Any]) -> None:
    """JSON Schema of a PATCH field that takes a value but not null: drop the null variant.

    In Python None stands for "absent" (the field keeps its value), so the type is Optional; a
    caller's explicit null is refused by PatchJobRequest._not_null, and the schema must not offer it.
    """
    variants = [v for v in schema.pop("anyOf", []) if v != {"type": "null"}]
    if len(variants) == 1:
        schema.update(variants[0])
    elif variants:
        schema["anyOf"] = variants
    schema.pop("default", None)


class PatchJobRequest(BaseModel):
    """Body of PATCH /api/jobs/{id}: the fields to change (absent fields keep their value).

    null clears what a job may lack (name, timeout_seconds, starting_deadline_seconds, start_at,
    end_at, max_runs, resources, runs_on). Every other field always has a value: null is a 400
    naming the field.
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: Name | None = None
    handler: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=HANDLER_PATTERN, json_schema_extra=_never_null
    )
    target: TargetSpec | None = Field(default=None, json_schema_extra=_never_null)
    """A new target (`handler` is its python shorthand: give one of them)."""
    payload: dict[str, Any] | None = Field(default=None, json_schema_extra=_never_null)
    cron_expr: str | None = Field(default=None, min_length=1, max_length=200, json_schema_extra=_never_null)
    timezone: str | None = Field(default=None, min_length=1, max_length=64, json_schema_extra=_never_null)
    max_attempts: int | None = Field(default=None, ge=1, le=MAX_ATTEMPTS_LIMIT, json_schema_extra=_never_null)
    backoff: Backoff | None = Field(default=None, json_schema_extra=_never_null)
    timeout_seconds: int | None = Field(default=None, ge=1, le=43_200)
    non_retryable_errors: list[ErrorName] | None = Field(
        default=None, max_length=20, json_schema_extra=_never_null
    )
    overlap_policy: OverlapPolicy | None = Field(default=None, json_schema_extra=_never_null)
    catchup: CatchupPolicy | None = Field(default=None, json_schema_extra=_never_null)
    max_catchup: int | None = Field(default=None, ge=1, le=MAX_CATCHUP_LIMIT, json_schema_extra=_never_null)
    starting_deadline_seconds: int | None = Field(default=None, ge=1, le=86_400)
    jitter_seconds: int | None = Field(
        default=None, ge=0, le=MAX_JITTER_SECONDS, json_schema_extra=_never_null
    )
    start_at: ApiTime | None = None
    end_at: ApiTime | None = None
    max_runs: int | None = Field(default=None, ge=1, le=10_000_000)
    depends_on: list[JobId] | None = Field(
        default=None, min_length=1, max_length=MAX_FAN_IN, json_schema_extra=_never_null
    )
    tags: Annotated[dict[str, str], AfterValidator(checked_tags)] | None = Field(
        default=None, json_schema_extra=_never_null
    )
    """The job's whole tag set, replacing the one it had ({} clears it)."""
    alerts: AlertPolicy | None = None
    """The job's whole alert policy, replacing the one it had (null clears it)."""
    concurrency: Concurrency | None = None
    """The job's concurrency key and limit, replacing the ones it had (null clears them)."""
    resources: Resources | None = None
    """The resources each run needs, replacing what the job asked (null clears it)."""
    runs_on: RunsOn | None = None
    """Where runs execute (null: wherever the job's timeout and resources place them)."""

    @field_validator(
        "handler",
        "target",
        "payload",
        "cron_expr",
        "timezone",
        "max_attempts",
        "backoff",
        "non_retryable_errors",
        "overlap_policy",
        "catchup",
        "max_catchup",
        "jitter_seconds",
        "depends_on",
        "tags",
    )
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # Runs only for fields the body names (defaults are not validated): an explicit null.
        if value is None:
            raise ValueError("must not be null; leave the field out to keep its current value")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _checked_payload(value)

    @field_validator("target")
    @classmethod
    def _target(cls, value: TargetSpec | None, info: ValidationInfo) -> TargetSpec | None:
        return _one_of_handler_and_target(value, info)

    def new_target(self) -> TargetSpec | None:
        """The target this edit sets (from `target` or `handler`), or None when it keeps the job's."""
        if self.target is not None:
            return self.target
        return PythonTarget(handler=self.handler) if self.handler is not None else None

    @model_validator(mode="after")
    def _something_to_change(self) -> PatchJobRequest:
        if not self.model_fields_set:
            raise ValueError("nothing to change: name at least one field")
        return self


class BackfillRequest(BaseModel):
    """Body of POST /api/jobs/{id}/backfill: create the runs of every tick in [from, to) that has none."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: ApiTime = Field(alias="from")
    to: ApiTime
    dry_run: bool = Field(
        default=False, description="answer 200 with the ticks it would create; write nothing, take no quota"
    )

    @model_validator(mode="after")
    def _ordered(self) -> BackfillRequest:
        if self.from_ >= self.to:
            raise ValueError("from must be before to")
        return self
