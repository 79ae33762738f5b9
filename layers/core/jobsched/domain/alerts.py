"""Alerts: what a job asks to be told about (its AlertPolicy), and one alert the scheduler raised.

An alert is about one run and one kind, and its id is derived from both (alert_id), so a redelivered
message, a retried workflow step or a second dispatcher pass that finds the same fact again writes
the same id: the store's conditional write keeps the first and the second is dropped, unpublished.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

AlertKind = Literal["failed", "dead_letter", "late", "missed", "skipped"]
ALERT_KINDS: tuple[str, ...] = get_args(AlertKind)
MAX_LATE_AFTER_SECONDS = 7 * 24 * 3600
# How long a recorded alert stays listable (GET /api/alerts): the store's TTL.
ALERT_RETENTION_SECONDS = 30 * 24 * 3600


class AlertPolicy(BaseModel):
    """Which kinds of alert a job raises, and when one of its runs counts as late."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    on: tuple[AlertKind, ...] = Field(min_length=1, max_length=len(ALERT_KINDS))
    """The kinds to raise, each once."""
    late_after_seconds: int | None = Field(
        default=None, ge=1, le=MAX_LATE_AFTER_SECONDS, validate_default=True
    )
    """A run not started this long after its tick is late (required with "late", refused without it)."""

    @field_validator("on")
    @classmethod
    def _each_once(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("a kind is listed twice")
        return value

    @field_validator("late_after_seconds")
    @classmethod
    def _with_late(cls, value: int | None, info: ValidationInfo) -> int | None:
        on = info.data.get("on")
        if on is None:  # `on` itself is invalid: its own error says so
            return value
        if "late" in on and value is None:
            raise ValueError('required when "on" includes "late"')
        if "late" not in on and value is not None:
            raise ValueError('only meaningful when "on" includes "late"')
        return value

    def wants(self, kind: str) -> bool:
        """Whether this policy raises `kind`."""
        return kind in self.on

    def stored(self) -> str:
        """The compact stored form, e.g. "failed,late@300" (the job item is rewritten on every run)."""
        kinds = ",".join(self.on)
        return f"{kinds}@{self.late_after_seconds}" if self.late_after_seconds else kinds

    @classmethod
    def parse(cls, text: str) -> AlertPolicy:
        """Inverse of stored()."""
        kinds, _, late = text.partition("@")
        data: dict[str, Any] = {"on": tuple(kinds.split(","))}
        if late:
            data["late_after_seconds"] = int(late)
        return cls.model_validate(data)


def wants(policy: AlertPolicy | None, kind: str) -> bool:
    """Whether a job with `policy` (None: no alerts configured) raises `kind`."""
    return policy is not None and policy.wants(kind)


def alert_partition(tenant: str) -> str:
    """The partition key of a tenant's alerts (its listing is one range read of it, never another's)."""
    return f"TENANT#{tenant}"


def alert_id(run_id: str, kind: str, *, series: int = 0) -> str:
    """The alert's id: one per (run, kind), and per replay series for the kinds a replay can repeat."""
    return f"{run_id}.{kind}" if series == 0 else f"{run_id}.{kind}.r{series}"


class Alert(BaseModel):
    """One alert raised by the scheduler: published to the alert topic and kept for GET /api/alerts."""

    model_config = ConfigDict(frozen=True)

    alert_id: str
    tenant: str
    job_id: str
    run_id: str
    kind: AlertKind
    scheduled_for: datetime
    """The run's tick."""
    at: datetime
    """When the scheduler raised it."""
    detail: str = ""
    """One line saying why (the error, how late, which policy dropped the tick)."""


class LateWatch(BaseModel):
    """The execution-queue message that looks, once a run should have started, whether it has.

    The dispatcher sends one beside each tick of a job that alerts on "late" (services/late.py),
    delayed until the tick is late_after_seconds old: a run that never starts (its message waits
    behind a slot, a quota, a throttled mapping) is then alerted late, not only once it starts.
    Its fields are not a RunMessage's, so nothing that reads run messages can take it for a run.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    late_watch: str
    """The run's tick, in stored form (jobsched.domain.times.stored)."""
    job_id: str
    due: str
    """When the run is late (tick + late_after_seconds), stored form: the watch looks then."""


def is_late_watch(body: str) -> bool:
    """Whether an execution-queue body is a LateWatch (else a RunMessage or an OperationMessage)."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and "late_watch" in data
