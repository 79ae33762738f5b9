"""Worker Lambda: SQS batches of runs, with partial batch failures (powertools batch processing)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
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

from jobsched import constants as c
from jobsched import telemetry
from jobsched.adapters.metrics import EmfMetrics
from jobsched.domain.operations import OperationMessage, is_operation_message
from jobsched.domain.senders import trusted
from jobsched.logcontext import route_stdlib_logs
from jobsched.pools import attach as attach_pools
from jobsched.services.operations import ChunkOutcome, OperationService
from jobsched.services.run import Delivery, Outcome
from jobsched.settings import Settings
from jobsched.wiring import build

logger = Logger(service="jobsched-worker")
metrics = Metrics(namespace="jobsched", service="worker")
tracer = Tracer(service="jobsched-worker")
# A handler's own `logging` lines: JSON, with the run's job_id, run_id and tenant (services/run.py's scope).
route_stdlib_logs(logger)

emf = EmfMetrics(metrics)
services = build(Settings.from_env(), metrics=emf)
# Worker-pool runs go to their pool's queue (the workers table), for the external workers.
attach_pools(services, table=os.environ.get(c.WORKERS_TABLE_ENV, ""))
operations = OperationService(schedule=services.schedule, metrics=emf)  # counts Operations_<outcome>
if not services.settings.trusted_senders:
    # Fail closed: without them the worker would run whatever anyone who may send to the queue sends.
    raise RuntimeError(f"{c.TRUSTED_SENDERS_ENV} is not set: the worker trusts no sender")
processor = BatchProcessor(event_type=EventType.SQS)
# worker_concurrency > 1: powertools' async processor gathers the batch's records, each run on a
# thread of its own (the worker is blocking boto3 code), at most worker_concurrency at once. Not
# asyncio.to_thread: its default pool has min(32, CPUs + 4) threads, 6 on a 2-vCPU Lambda, so a
# batch of 10 would run 6 and make 4 wait. The threads are daemons: a process that stops (the local
# stack on Ctrl-C) does not wait for a handler still running; its lease returns the run.
async_processor = AsyncBatchProcessor(event_type=EventType.SQS)
_slots = threading.BoundedSemaphore(services.settings.worker_concurrency)


def _run(record: SQSRecord) -> Outcome | ChunkOutcome:
    sender = record.attributes.get("SenderId")  # absent from a hand-made event: untrusted
    if not trusted(sender, services.settings.trusted_senders):
        # A forged run runs nothing and writes nothing; acknowledged, so it is not retried either.
        logger.warning(
            "run message from an untrusted sender refused", sender=sender, message_id=record.message_id
        )
        return Outcome.REFUSED
    if is_operation_message(record.body):  # a chunk of a long backfill or bulk action
        return operations.advance(OperationMessage.model_validate_json(record.body))
    return services.worker.process(Delivery(record.message_id, record.receipt_handle, record.body))


def _succeed(done: asyncio.Future[Outcome | ChunkOutcome], outcome: Outcome | ChunkOutcome) -> None:
    if not done.done():
        done.set_result(outcome)


def _fail(done: asyncio.Future[Outcome | ChunkOutcome], error: BaseException) -> None:
    if not done.done():
        done.set_exception(error)


async def _on_own_thread(record: SQSRecord) -> Outcome | ChunkOutcome:
    """_run(record) on a new daemon thread once a slot is free; the loop awaits its outcome."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Outcome | ChunkOutcome] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread: the logger's context keys follow

    def work() -> None:
        with _slots:
            try:
                outcome = context.run(_run, record)
            except BaseException as exc:  # Crash too: it must reach the invocation, as it does in-line
                loop.call_soon_threadsafe(_fail, done, exc)
                return
        loop.call_soon_threadsafe(_succeed, done, outcome)

    threading.Thread(target=work, name=f"jobsched-run-{record.message_id}", daemon=True).start()
    return await done


def _counted(outcome: Outcome | ChunkOutcome) -> str:
    # Counted here: a run refused before the worker service saw it. The worker service counts every
    # other run outcome itself (Runs_<outcome>), and OperationService its chunks (Operations_<outcome>).
    if outcome == Outcome.REFUSED:
        metrics.add_metric(name=telemetry.runs(outcome.value), unit=MetricUnit.Count, value=1)
    return outcome.value


def record_handler(record: SQSRecord) -> str:
    """Process one run message; an exception leaves the message in the queue (batch item failure)."""
    return _counted(_run(record))


async def async_record_handler(record: SQSRecord) -> str:
    """The run on a thread of its own; the metric on the loop's own thread."""
    return _counted(await _on_own_thread(record))


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False, capture_error=False)  # payloads stay out of traces
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Process a batch; answers the ids of the messages to leave in the queue."""
    if services.settings.worker_concurrency > 1:
        return async_process_partial_response(
            event=event, record_handler=async_record_handler, processor=async_processor, context=context
        )
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
