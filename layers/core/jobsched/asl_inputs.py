"""The inputs the workflows (jobsched.asl) are started with: one model per way in.

Every JSONPath `$.x` a definition reads is a field here, and a test walks the definitions to prove
it (tests/unit/test_asl_inputs.py), so a definition and its caller cannot drift apart. The services
build these models and start an execution with `model_dump(mode="json")`; every value is computed
by the caller (times, keys, the next message), so the definitions need no clock or key logic.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JobKeys(_Input):
    """Where the failure workflow's job-status steps ([FailJob], [RestoreJob]) find the run's job."""

    job_run: bool
    """The run is the one run its job lives for: its dead letter fails the job, its replay restores it."""
    jobs_table: str
    job_pk: str


class Alert(_Input):
    """The SNS message of a dead letter (published as JSON): the fields of every alert's message
    (jobsched.domain.alerts.Alert) and the dead letter's own."""

    alert_id: str
    kind: Literal["dead_letter"] = "dead_letter"
    at: str
    """ISO-8601 with offset: when the failure was handed over."""
    detail: str
    job_id: str
    run_id: str
    tenant: str
    handler: str
    scheduled_for: str
    """ISO-8601 with offset."""
    attempts: int
    error_type: str
    error_message: str


class UpstreamFailed(_Input):
    """A transitive dependant's run of the dead-lettered run's period, to mark UPSTREAM_FAILED."""

    pk: str
    run_sk: str
    run_sf: str
    """The run's scheduled_for, stored form."""
    run_id: str
    job_id: str
    tenant: str
    reason: str


class _RunKeys(JobKeys):
    runs_table: str
    pk: str
    sk: str
    queue_url: str
    message: str
    """The RunMessage (JSON) the workflow enqueues when the run is tried again."""


class FailureInput(_RunKeys):
    """A failed attempt: back off and retry it, or dead-letter it, alert and propagate."""

    action: Literal["retry"] = "retry"
    retryable: bool
    attempt: int
    max_attempts: int
    wait_seconds: int
    topic_arn: str | None
    dl_key: str
    dl_sk: str
    dead_at: str
    """Stored form; also the time the job-status and UPSTREAM_FAILED writes carry."""
    propagate: list[UpstreamFailed]
    alert: Alert
    alert_wanted: bool
    """The job's alert policy includes dead_letter (a job without one: yes, as always)."""
    record_alert: bool
    """Keep the alert in `alerts_table` first (an alerts table is configured), then publish."""
    alerts_table: str
    alert_item: dict[str, Any]
    """The alert's item, DynamoDB attribute values (empty unless record_alert)."""


class ReplayInput(_RunKeys):
    """An operator's replay of a dead-lettered run: a fresh attempt series."""

    action: Literal["replay"] = "replay"
    now: str
    """Stored form: when the job, failed by this run, is SCHEDULED again."""
    replays: int
    """The series this replay starts: the run's replays + 1 (written as is, so a retried write of
    it finds its own first try's row and goes on, as Rearm does)."""


class DagItem(_Input):
    """One dependant to count an upstream run's success into (and to release when it is the last)."""

    pk: str
    wait_sk: str
    run_sk: str
    run_sf: str
    run_id: str
    job_id: str
    tenant: str
    fan_in: int
    message: str
    """The dependant's RunMessage (JSON), enqueued when the count reaches zero."""
    now: str


class DagInput(_Input):
    """An upstream run succeeded: count it into each of `items`."""

    upstream_run: str
    runs_table: str
    queue_url: str
    items: list[DagItem]
