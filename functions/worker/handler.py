"""Worker Lambda: SQS batches of runs, with partial batch failures (powertools batch processing)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from jobsched.services.run import Delivery
from jobsched.settings import Settings
from jobsched.wiring import build

logger = Logger(service="jobsched-worker")
metrics = Metrics(namespace="jobsched", service="worker")
tracer = Tracer(service="jobsched-worker")

services = build(Settings.from_env())
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> str:
    """Process one run message; an exception leaves the message in the queue (batch item failure)."""
    outcome = services.worker.process(Delivery(record.message_id, record.receipt_handle, record.body))
    metrics.add_metric(name=f"Runs_{outcome.value}", unit=MetricUnit.Count, value=1)
    return outcome.value


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Process a batch; answers the ids of the messages to leave in the queue."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
