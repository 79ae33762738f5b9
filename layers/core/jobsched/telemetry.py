"""The scheduler's metrics, in one place: the names the services emit and the dashboard and alarms read.

Every metric is in the `jobsched` namespace with one dimension, `service`: the function that emitted
it (api, dispatcher, worker, reconciler; powertools' default dimension). Nothing else: never a
tenant, a job or a run id, so a metric-month is bought per name, not per job. A figure by outcome or
kind is a metric name of its own (Runs_failed), from a closed set.
"""

from __future__ import annotations

NAMESPACE = "jobsched"
SERVICE = "service"
"""The one dimension (powertools Metrics' `service`): which function emitted the figure."""

LATENESS = "RunLateness"
"""Milliseconds from a run's scheduled instant to its first attempt's start (worker)."""
DURATION = "RunDuration"
"""Milliseconds one attempt took, handler start to its recorded end (worker)."""
RUNS = "Runs_"
"""Runs_<outcome>: one per processed message (worker), and Runs_dead_letter (failure hand-over)."""
DISPATCH_LAG = "DispatchLag"
"""Per dispatcher pass: age in ms of the oldest due entry (next_run_at <= now) it found not yet
handed over; 0 when every due entry went out ahead of its time, as it should."""
HANDED_OVER = "EntriesHandedOver"
"""Runs a dispatcher pass sent to the execution queue."""
RETRIES = "Retries"
"""Failed attempts handed to the failure workflow to be retried."""
ALERTS = "Alerts_"
"""Alerts_<kind>: one per alert raised (Metrics.alert)."""
OPERATIONS = "Operations_"
"""Operations_<outcome>: one per chunk message of a long backfill or bulk action (OperationService):
advanced, resent, raced, stale, abandoned. Not runs: they stay out of Runs_<outcome>."""

OUTCOMES = ("succeeded", "failed", "dead_letter", "skipped", "cancelled")
"""The outcomes the dashboard shows (a worker emits Runs_<Outcome> for every other one too)."""

MILLISECONDS = "Milliseconds"
COUNT = "Count"


def runs(outcome: str) -> str:
    """The metric name counting runs of one outcome."""
    return f"{RUNS}{outcome}"


def operations(outcome: str) -> str:
    """The metric name counting operation chunk messages of one outcome ("operation_advanced" or
    "advanced" -> Operations_advanced)."""
    return f"{OPERATIONS}{outcome.removeprefix('operation_')}"


def alerts(kind: str) -> str:
    """The metric name counting alerts of one kind."""
    return f"{ALERTS}{kind}"
