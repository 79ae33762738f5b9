"""The dispatcher and worker Lambda entry points, cold-started against moto and fed the events AWS sends
(tests/events/*.json)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest

from jobsched import resources
from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain import times
from jobsched.domain.models import Job, RunMessage
from jobsched.domain.status import JobStatus
from jobsched.handlers import RunContext, registry
from jobsched.local import lambdas
from jobsched.local.aws import MOTO_SENDER_ID
from jobsched.settings import Settings
from tests.support import provision

EVENTS = Path(__file__).resolve().parents[1] / "events"


@pytest.fixture
def env(aws: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    yield aws


def load(name: str) -> ModuleType:
    return lambdas.load(name)


def test_the_dispatcher_entry_point_drains_due_jobs_on_an_eventbridge_tick(env: Settings) -> None:
    # Given a job due within the look-ahead, written straight to the table (as if by another API node)
    now = datetime.now(UTC)
    job = Job(
        job_id="job_due", tenant="t", type="one_off", status=JobStatus.SCHEDULED, handler="demo.echo",
        payload={}, run_at=now + timedelta(seconds=30), next_run_at=now + timedelta(seconds=30),
        created_at=now, updated_at=now,
    )  # fmt: skip
    boto3.client("dynamodb").put_item(
        TableName=env.jobs_table, Item=job_to_item(job, shard_count=env.shard_count)
    )
    dispatcher = load("dispatcher")
    event = json.loads((EVENTS / "eventbridge_scheduled.json").read_text())
    # When EventBridge ticks
    out = dispatcher.lambda_handler(event, lambdas.LambdaContext("dispatcher"))
    # Then the run was handed to SQS with its delay, and every shard was leased and released
    assert out["runs_sent"] == 1 and out["items_read"] == 1
    assert sorted(out["shards_leased"]) == list(range(env.shard_count))
    attrs = boto3.client("sqs").get_queue_attributes(QueueUrl=env.execution_queue_url, AttributeNames=["All"])
    assert attrs["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"


def test_a_dispatcher_tick_with_shards_drains_only_those(env: Settings) -> None:
    # the input a fleet's rule target passes (RuleTargetInput {"shards": [...]}, no envelope)
    out = load("dispatcher").lambda_handler({"shards": [1]}, lambdas.LambdaContext("dispatcher"))
    assert out["shards_leased"] == [1]


def test_the_worker_entry_point_reports_only_the_bad_record_as_a_batch_failure(env: Settings) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    job = Job(
        job_id="job_w", tenant="t", type="one_off", status=JobStatus.SCHEDULED, handler="demo.echo",
        payload={"x": 1}, run_at=now, created_at=now, updated_at=now,
    )  # fmt: skip
    boto3.client("dynamodb").put_item(
        TableName=env.jobs_table, Item=job_to_item(job, shard_count=env.shard_count)
    )
    body = RunMessage(job_id="job_w", scheduled_for=times.stored(now)).model_dump_json()
    event = json.loads((EVENTS / "sqs_run_batch.json").read_text().replace('"__BODY_0__"', json.dumps(body)))
    worker = load("worker")
    out = worker.lambda_handler(event, lambdas.LambdaContext("worker"))
    # the good record succeeded; the malformed one stays in the queue (and reaches the DLQ in time)
    assert out == {"batchItemFailures": [{"itemIdentifier": "2e1424d4-f796-459a-8184-9c92662be6da"}]}
    row = boto3.client("dynamodb").get_item(
        TableName=env.runs_table, Key={"PK": {"S": "JOB#job_w"}, "SK": {"S": f"RUN#{times.stored(now)}"}}
    )["Item"]
    assert row["status"]["S"] == "SUCCEEDED" and json.loads(row["result"]["S"]) == {"x": 1}


@dataclass(frozen=True)
class Meeting:
    """A batch of due one-off runs whose handler returns only once every run of the batch is running."""

    settings: Settings
    event: dict[str, Any]  # the SQS event of the batch, one record per run
    dynamodb: Any
    scheduled_for: str

    def results(self) -> list[tuple[str, Any]]:
        """Each run's (status, result), in batch order."""
        rows = [
            self.dynamodb.get_item(
                TableName=self.settings.runs_table,
                Key={"PK": {"S": f"JOB#{record['messageId']}"}, "SK": {"S": f"RUN#{self.scheduled_for}"}},
            )["Item"]
            for record in self.event["Records"]
        ]
        return [
            (row["status"]["S"], json.loads(row["result"]["S"]) if "result" in row else None) for row in rows
        ]


@pytest.fixture
def meeting(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Meeting]:
    """make(size, **settings): `size` runs that meet at a barrier, on the embedded moto server.

    A worker that runs fewer than `size` of them at once leaves the first ones waiting in vain
    (the barrier's timeout fails them); settings override provision()'s (the deployed defaults).
    """

    def make(size: int, **settings: Any) -> Meeting:
        provisioned = provision(f"mt{uuid.uuid4().hex[:6]}", endpoint_url=endpoint, **settings)
        for key, value in provisioned.as_env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        barrier = threading.Barrier(size, timeout=10)

        def meet(payload: dict[str, Any], ctx: RunContext) -> dict[str, bool]:
            barrier.wait()
            return {"met": True}

        name = f"test.meet{size}_{uuid.uuid4().hex[:6]}"
        registry.register(name, meet)
        ddb = boto3.client("dynamodb", endpoint_url=endpoint)
        now = datetime.now(UTC).replace(microsecond=0)
        records = []
        for i in range(size):
            job = Job(
                job_id=f"job_meet{i}", tenant="t", type="one_off", status=JobStatus.SCHEDULED, handler=name,
                payload={}, run_at=now, created_at=now, updated_at=now,
            )  # fmt: skip
            ddb.put_item(
                TableName=provisioned.jobs_table, Item=job_to_item(job, shard_count=provisioned.shard_count)
            )
            body = RunMessage(job_id=job.job_id, scheduled_for=times.stored(now)).model_dump_json()
            records.append(
                {"messageId": job.job_id, "receiptHandle": f"r{i}", "body": body,
                 "attributes": {"SenderId": MOTO_SENDER_ID}, "messageAttributes": {}, "md5OfBody": "",
                 "eventSource": "aws:sqs",
                 "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:q", "awsRegion": "us-east-1"}
            )  # fmt: skip
        return Meeting(provisioned, {"Records": records}, ddb, times.stored(now))

    return make


def test_the_worker_entry_point_runs_a_batch_at_once_when_told(meeting: Callable[..., Meeting]) -> None:
    """worker_concurrency=10 (the CDK setting): three runs that only finish together all succeed."""
    # Given three runs that only finish together, and a worker told to run 10 of a batch at once
    batch = meeting(3, worker_concurrency=10)

    # When one invocation gets them
    out = load("worker").lambda_handler(batch.event, lambdas.LambdaContext("worker"))

    # Then all three met and succeeded
    assert out == {"batchItemFailures": []}
    assert batch.results() == [("SUCCEEDED", {"met": True})] * 3


def test_the_worker_entry_point_runs_a_whole_batch_of_ten_at_once_on_a_two_vcpu_lambda(
    meeting: Callable[..., Meeting], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployed setting (10 runs of a batch at once), where the CPU count would cap a thread pool."""
    # Given the worker's default settings on a machine reporting 2 CPUs, as a small Lambda does
    # (asyncio's default pool then has min(32, 2 + 4) = 6 threads), and ten runs that only finish together
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    batch = meeting(10)
    assert batch.settings.worker_concurrency == resources.WORKER_EVENT_SOURCE.concurrency == 10

    # When one invocation gets the batch of ten
    out = load("worker").lambda_handler(batch.event, lambdas.LambdaContext("worker"))

    # Then all ten met and succeeded: none waited for a thread
    assert out == {"batchItemFailures": []}
    assert batch.results() == [("SUCCEEDED", {"met": True})] * 10
