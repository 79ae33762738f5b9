"""Dispatcher Lambda: each EventBridge tick drains the due ticks of every shard (or its target's shards)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from jobsched.adapters.metrics import EmfMetrics
from jobsched.settings import Settings
from jobsched.wiring import build

logger = Logger(service="jobsched-dispatcher")
metrics = Metrics(namespace="jobsched", service="dispatcher")
tracer = Tracer(service="jobsched-dispatcher")

services = build(Settings.from_env(), metrics=EmfMetrics(metrics))


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
@event_source(data_class=EventBridgeEvent)
def lambda_handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    """One pass over every shard, or over the shards the tick's target names; returns what it did."""
    shards = event.raw_event.get("shards")
    report = services.dispatcher.dispatch_all([int(s) for s in shards] if shards else None)
    metrics.add_metric(name="DueItemsRead", unit=MetricUnit.Count, value=report.items_read)
    leased = [s.shard for s in report.shards if s.leased]
    logger.info("dispatch pass", extra={"runs_sent": report.runs_sent, "shards_leased": leased})
    return {"runs_sent": report.runs_sent, "items_read": report.items_read, "shards_leased": leased}
