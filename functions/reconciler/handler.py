"""Reconciler Lambda: messages the execution queue gave up on (its redrive DLQ) become DEAD_LETTER runs."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from jobsched.adapters.metrics import EmfMetrics
from jobsched.domain.alerts import is_late_watch
from jobsched.domain.models import RunMessage
from jobsched.domain.operations import OperationMessage, is_operation_message
from jobsched.services.operations import OperationService
from jobsched.settings import Settings
from jobsched.wiring import build

logger = Logger(service="jobsched-reconciler")
metrics = Metrics(namespace="jobsched", service="reconciler")
tracer = Tracer(service="jobsched-reconciler")

emf = EmfMetrics(metrics)
services = build(Settings.from_env(), metrics=emf)
operations = OperationService(schedule=services.schedule, metrics=emf)  # counts Operations_abandoned
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> str:
    """Dead-letter the run of one poison message; an exception keeps it in the DLQ for a retry."""
    outcome: str
    if is_late_watch(record.body):  # a look at a run that kept failing (services/late.py): only an alert
        outcome = "late_watch_dropped"
    elif is_operation_message(record.body):  # a chunk of a long backfill or bulk action: it ends FAILED
        outcome = operations.abandon(OperationMessage.model_validate_json(record.body))
    else:
        outcome = services.failures.reconcile(RunMessage.model_validate_json(record.body))
    metrics.add_metric(name=f"Reconciled_{outcome}", unit=MetricUnit.Count, value=1)
    logger.warning("poison message reconciled", extra={"outcome": outcome, "body": record.body})
    return outcome


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False, capture_error=False)  # payloads stay out of traces
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Process a batch of the execution queue's dead-letter queue."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
