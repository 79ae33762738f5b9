"""What the local stack reports when a worker invocation fails as a whole."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from jobsched.local.stack import LocalConfig, LocalStack
from jobsched.settings import Settings


class StoreThrottled(RuntimeError):
    """What a record handler raises when it cannot finish its record (the message is kept)."""


def test_a_batch_that_failed_whole_logs_each_records_error(
    aws: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given one message in the execution queue, and a worker (powertools' batch processor, as in
    # functions/worker/handler.py) whose every record fails, so the invocation fails as a whole
    sqs = boto3.client("sqs")
    sqs.send_message(QueueUrl=aws.execution_queue_url, MessageBody='{"v": 1}')

    def record_handler(record: SQSRecord) -> str:
        raise StoreThrottled(f"runs table throttled while holding {record.message_id}")

    processor = BatchProcessor(event_type=EventType.SQS)

    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    stack = LocalStack(LocalConfig())
    stack._sqs = sqs
    stack.queue_url = aws.execution_queue_url
    stack.worker = SimpleNamespace(lambda_handler=lambda_handler)  # type: ignore[assignment]
    # When the local event-source mapping polls it
    assert stack.poll_once() == 1
    # Then the report names the batch failure and, below it, the error of each record
    out = capsys.readouterr().out
    head, _, below = out.partition("1 individual errors logged separately below")
    assert "worker invocation failed" in head
    assert "StoreThrottled: runs table throttled while holding" in below, out
