"""A run message from a sender the stack does not trust runs nothing (a security review's finding:
anyone with sqs:SendMessage on the queue could run another tenant's job, a paused one included)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto.sqs.models import DEFAULT_SENDER_ID

from jobsched import constants as c
from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain import times
from jobsched.domain.models import Job, RunMessage
from jobsched.domain.status import JobStatus
from jobsched.handlers import RunContext, registry
from jobsched.local import lambdas
from jobsched.local.aws import MOTO_SENDER_ID
from jobsched.settings import Settings

STACK_ROLE = "AROASTACKWORKERROLE1"
calls: list[str] = []


@registry.handler("test.forgery_target")
def _target(payload: dict[str, Any], ctx: RunContext) -> dict[str, bool]:
    calls.append(ctx.run_id)
    return {"ran": True}


@pytest.fixture
def env(aws: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(c.TRUSTED_SENDERS_ENV, STACK_ROLE)
    calls.clear()
    yield aws


def _job(settings: Settings, status: JobStatus) -> tuple[str, str]:
    now = datetime.now(UTC).replace(microsecond=0)
    job = Job(
        job_id=f"job_{status.value.lower()}", tenant="victim", type="one_off", status=status,
        handler="test.forgery_target", payload={}, run_at=now, next_run_at=now,
        created_at=now, updated_at=now,
    )  # fmt: skip
    boto3.client("dynamodb").put_item(
        TableName=settings.jobs_table, Item=job_to_item(job, shard_count=settings.shard_count)
    )
    return job.job_id, RunMessage(job_id=job.job_id, scheduled_for=times.stored(now)).model_dump_json()


def _record(body: str, sender: str, n: int) -> dict[str, Any]:
    return {
        "messageId": f"m{n}", "receiptHandle": f"r{n}", "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SenderId": sender},
        "messageAttributes": {}, "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:execution",
    }  # fmt: skip


@pytest.mark.parametrize("status", [JobStatus.SCHEDULED, JobStatus.PAUSED])
def test_a_message_from_an_untrusted_sender_runs_nothing_and_writes_nothing(
    env: Settings, status: JobStatus
) -> None:
    # Given another tenant's job, and a message for it sent by a principal that is not the stack's
    job_id, body = _job(env, status)
    before = boto3.client("dynamodb").get_item(
        TableName=env.jobs_table, Key={"PK": {"S": f"JOB#{job_id}"}, "SK": {"S": "META"}}
    )
    worker = lambdas.load("worker")
    # When the worker receives it (an attacker's role session; then a user; then no SenderId at all)
    for n, sender in enumerate(["AROAATTACKERROLE:session", "AIDAATTACKERUSER", ""]):
        out = worker.lambda_handler({"Records": [_record(body, sender, n)]}, lambdas.LambdaContext("worker"))
        # Then it is acknowledged (no retry, no redrive) and nothing ran or was written
        assert out == {"batchItemFailures": []}
    assert calls == []
    runs = boto3.client("dynamodb").query(
        TableName=env.runs_table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": f"JOB#{job_id}"}},
    )["Items"]
    assert runs == []
    after = boto3.client("dynamodb").get_item(
        TableName=env.jobs_table, Key={"PK": {"S": f"JOB#{job_id}"}, "SK": {"S": "META"}}
    )
    assert after["Item"] == before["Item"]


def test_a_message_from_any_session_of_a_trusted_role_runs(env: Settings) -> None:
    # Given a due job and a message sent by a session of the stack's own role
    _, body = _job(env, JobStatus.SCHEDULED)
    worker = lambdas.load("worker")
    # When the worker receives it
    out = worker.lambda_handler(
        {"Records": [_record(body, f"{STACK_ROLE}:jobsched-dispatcher", 0)]}, lambdas.LambdaContext("worker")
    )
    # Then it runs
    assert out == {"batchItemFailures": []} and len(calls) == 1


def test_the_worker_refuses_to_start_without_trusted_senders(
    aws: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker configured with every setting but the senders it trusts
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(c.TRUSTED_SENDERS_ENV, raising=False)
    # When it cold-starts, then it stops, naming the setting (fail closed: it would trust anyone)
    with pytest.raises(RuntimeError, match=c.TRUSTED_SENDERS_ENV):
        lambdas.load("worker")


def test_the_local_stack_trusts_the_one_sender_id_moto_stamps() -> None:
    # moto stamps every message with one SenderId; if it changed, the local stack would refuse all
    assert MOTO_SENDER_ID == DEFAULT_SENDER_ID
    assert json.dumps(MOTO_SENDER_ID)
