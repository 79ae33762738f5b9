"""One contract suite per port (jobsched.ports), run against every implementation.

Each test states one clause of a port's docstring and runs it on the in-memory fakes
(jobsched.adapters.memory) and on the AWS adapters against moto in-process (mock_aws), so a fake
that drifts from what DynamoDB, SQS or Step Functions do fails here, not in a service test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from jobsched.adapters.dynamodb import JobStore, RunStore
from jobsched.adapters.dynamodb.codec import enc
from jobsched.adapters.dynamodb.packs import PackStore
from jobsched.adapters.memory import (
    MemoryJobStore,
    MemoryPackStore,
    MemoryRunQueue,
    MemoryRunStore,
    MemoryStateMachines,
)
from jobsched.adapters.sqs import RunQueue
from jobsched.adapters.stepfunctions import StateMachines
from jobsched.domain import times
from jobsched.domain.keys import job_pk, run_sk
from jobsched.domain.models import Job, SchedulePolicy
from jobsched.domain.status import JobStatus
from jobsched.ports import FakeClock
from tests.support import provision

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SHARDS = 4


@dataclass
class Received:
    message_id: str
    receipt_handle: str
    body: str


class Backend:
    """The ports of one implementation, and what a test arranges outside them."""

    name: str
    jobs: Any
    runs: Any
    queue: Any
    machines: Any
    packs: Any

    def dead_letter(self, job_id: str, scheduled_for: str, *, dl_key: str, dead_at: datetime) -> None:
        """FAILED -> DEAD_LETTER with its index entry, as the failure workflow's step writes it."""
        raise NotImplementedError

    def receive(self) -> list[Received]:
        raise NotImplementedError

    def delete(self, receipt_handle: str) -> None:
        raise NotImplementedError


class Memory(Backend):
    name = "memory"

    def __init__(self) -> None:
        self.clock = FakeClock(T0)
        self.jobs = MemoryJobStore(shard_count=SHARDS)
        self.runs = MemoryRunStore()
        self.packs = MemoryPackStore(self.jobs, self.runs)
        self.queue = MemoryRunQueue(clock=self.clock)
        self.machines = MemoryStateMachines()

    def dead_letter(self, job_id: str, scheduled_for: str, *, dl_key: str, dead_at: datetime) -> None:
        self.runs.dead_letter(job_id, scheduled_for, dl_key=dl_key, dead_at=dead_at)

    def receive(self) -> list[Received]:
        return [Received(m.message_id, m.receipt_handle, m.body) for m in self.queue.receive()]

    def delete(self, receipt_handle: str) -> None:
        self.queue.delete(receipt_handle)


class Moto(Backend):
    name = "moto"

    def __init__(self) -> None:
        settings = provision("contract", shard_count=SHARDS)
        self.ddb = boto3.client("dynamodb")
        self.sqs = boto3.client("sqs")
        self.runs_table = settings.runs_table
        self.url = settings.execution_queue_url
        self.jobs = JobStore(client=self.ddb, table=settings.jobs_table, shard_count=SHARDS)
        self.runs = RunStore(client=self.ddb, table=settings.runs_table)
        self.packs = PackStore(
            client=self.ddb, table=settings.jobs_table, runs_table=settings.runs_table, shard_count=SHARDS
        )
        self.queue = RunQueue(client=self.sqs, queue_url=self.url)
        self.machines = StateMachines(
            client=boto3.client("stepfunctions"), failure_workflow_arn=settings.failure_workflow_arn
        )

    def dead_letter(self, job_id: str, scheduled_for: str, *, dl_key: str, dead_at: datetime) -> None:
        run = self.runs.get(job_id, scheduled_for)
        assert run is not None
        self.ddb.update_item(
            TableName=self.runs_table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
            UpdateExpression="SET #s = :dead, dl_key = :k, dl_sk = :sk, dead_at = :at",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":dead": enc("DEAD_LETTER"),
                ":k": enc(dl_key),
                ":sk": enc(f"{times.stored(dead_at)}#{run.run_id}"),
                ":at": enc(times.stored(dead_at)),
            },
        )

    def receive(self) -> list[Received]:
        out = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        return [Received(m["MessageId"], m["ReceiptHandle"], m["Body"]) for m in out.get("Messages", [])]

    def delete(self, receipt_handle: str) -> None:
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=receipt_handle)


@pytest.fixture(params=["memory", "moto"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each contract test runs once per implementation."""
    if request.param == "memory":
        yield Memory()
        return
    with mock_aws():
        yield Moto()


def job(job_id: str = "job_a", **changes: Any) -> Job:
    """A scheduled recurring job, its next tick a minute after T0 (fields overridable)."""
    fields: dict[str, Any] = {
        "job_id": job_id,
        "tenant": "t1",
        "type": "recurring",
        "status": JobStatus.SCHEDULED,
        "handler": "demo.echo",
        "payload": {"n": 1},
        "cron_expr": "* * * * *",
        "policy": SchedulePolicy(overlap_policy="skip"),
        "next_run_at": T0 + timedelta(minutes=1),
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(changes)
    return Job(**fields)


def create(backend: Backend, j: Job, *, key: str | None = None) -> Job:
    """Store `j` through the port (as the API does) and read it back."""
    assert (
        backend.jobs.create_with_idempotency(
            j, idempotency_key=key or f"k-{j.job_id}", request_hash="h", response={"job_id": j.job_id}, now=T0
        )
        is None
    )
    stored = backend.jobs.get_job(j.job_id)
    assert stored is not None
    return stored  # type: ignore[no-any-return]


def at(seconds: float) -> datetime:
    """T0 + seconds."""
    return T0 + timedelta(seconds=seconds)
