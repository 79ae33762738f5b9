"""Worker Lambda: SQS batches of runs, with partial batch failures (powertools batch processing)."""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    BatchProcessor,
    EventType,
    async_process_partial_response,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from jobsched.services.run import Delivery, Outcome
from jobsched.settings import Settings
from jobsched.wiring import build

logger = Logger(service="jobsched-worker")
metrics = Metrics(namespace="jobsched", service="worker")
tracer = Tracer(service="jobsched-worker")

services = build(Settings.from_env())
processor = BatchProcessor(event_type=EventType.SQS)
# worker_concurrency > 1: powertools' async processor gathers the batch's records, each run on a
# thread (the worker is blocking boto3 code), so the batch runs at once.
async_processor = AsyncBatchProcessor(event_type=EventType.SQS)


def _run(record: SQSRecord) -> Outcome:
    return services.worker.process(Delivery(record.message_id, record.receipt_handle, record.body))


def _counted(outcome: Outcome) -> str:
    metrics.add_metric(name=f"Runs_{outcome.value}", unit=MetricUnit.Count, value=1)
    return outcome.value


def record_handler(record: SQSRecord) -> str:
    """Process one run message; an exception leaves the message in the queue (batch item failure)."""
    return _counted(_run(record))


async def async_record_handler(record: SQSRecord) -> str:
    """The run on a thread of the event loop's pool; the metric on the loop's own thread."""
    return _counted(await asyncio.to_thread(_run, record))


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Process a batch; answers the ids of the messages to leave in the queue."""
    if services.settings.worker_concurrency > 1:
        return async_process_partial_response(
            event=event, record_handler=async_record_handler, processor=async_processor, context=context
        )
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
