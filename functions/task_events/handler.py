"""Task events Lambda: ECS's "ECS Task State Change" (STOPPED) of a container target's task records
its run attempt's outcome (services/task_events.py). An exception fails the invocation: Lambda retries
it, then sends it to the rule's dead-letter queue; the ECS worker's poll records the run regardless."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from jobsched.adapters.metrics import EmfMetrics
from jobsched.services.task_events import TaskStopEvents
from jobsched.settings import Settings
from jobsched.wiring import build

logger = Logger(service="jobsched-task-events")
metrics = Metrics(namespace="jobsched", service="task-events")
tracer = Tracer(service="jobsched-task-events")

services = build(Settings.from_env(), metrics=EmfMetrics(metrics))
stops = TaskStopEvents(
    jobs=services.jobs,
    runs=services.runs,
    failures=services.failures,
    dag=services.dag,
    clock=services.clock,
)


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False, capture_error=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, str]:
    """Record one stopped task's run attempt (an EventBridge event)."""
    outcome = stops.stopped(event.get("detail") or {})
    metrics.add_metric(name=f"TaskEvents_{outcome.value}", unit=MetricUnit.Count, value=1)
    logger.info("task state change", extra={"outcome": outcome.value, "task_arn": event.get("resources")})
    return {"outcome": outcome.value}
