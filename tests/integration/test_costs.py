"""Deterministic counts: items read to find due work, and AWS calls per healthy run."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import boto3
import pytest

from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain.models import CreateJobRequest, Job
from jobsched.domain.status import JobStatus
from jobsched.ports import FakeClock
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import CallCounter, Pump


def add_idle_jobs(svc: Services, count: int) -> None:
    """Jobs whose next tick is a day away: stored, indexed, not due."""
    client = boto3.client("dynamodb")
    for i in range(count):
        job = Job(
            job_id=f"job_idle{i:06d}",
            tenant="t",
            type="recurring",
            status=JobStatus.SCHEDULED,
            handler="demo.echo",
            payload={},
            cron_expr="0 12 * * *",
            next_run_at=T0 + timedelta(days=1),
            created_at=T0,
            updated_at=T0,
        )
        client.put_item(
            TableName=svc.settings.jobs_table, Item=job_to_item(job, shard_count=svc.settings.shard_count)
        )


def due_jobs(svc: Services, count: int) -> None:
    for i in range(count):
        svc.job_service.submit(
            CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=130 + i)),
            tenant="t",
            idempotency_key=f"due-{i}",
        )


@pytest.mark.parametrize("idle", [0, 1000, 3000])
def test_finding_due_work_reads_only_due_entries(
    svc: Services, pump: Pump, clock: FakeClock, idle: int
) -> None:
    # Given 10 jobs due in the next window among `idle` jobs due tomorrow
    due_jobs(svc, 10)
    add_idle_jobs(svc, idle)
    # When a dispatcher pass looks for due work
    clock.set(T0 + timedelta(seconds=60))
    report = svc.dispatcher.dispatch_all()
    # Then it read exactly the 10 due entries, whatever else the table and index hold
    assert report.runs_sent == 10
    assert report.items_read == 10


def test_aws_calls_per_healthy_run(svc: Services, pump: Pump, clock: FakeClock) -> None:
    """Every AWS call a healthy recurring run costs, by operation (printed for the closing note)."""
    counter = CallCounter(svc.jobs.client, svc.queue.client)
    # Given a job every 10 s already in the index
    svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="*/10 * * * * *"),
        tenant="t",
        idempotency_key="r",
    )
    svc.dispatcher.dispatch_all()  # the shards' first pass ever (it looks back an hour) is behind us
    pump.run_due(T0 + timedelta(seconds=90))
    # When one dispatcher pass hands over a minute of ticks and the workers run them
    clock.set(T0 + timedelta(seconds=60))
    counter.reset()
    report = svc.dispatcher.dispatch_all()
    dispatch_calls = Counter(counter.calls)
    counter.reset()
    outcomes = pump.run_due(T0 + timedelta(seconds=150))
    worker_calls = Counter(counter.calls)
    runs = report.runs_sent
    assert runs == 6 and outcomes["succeeded"] == 6
    # Then, per run: dispatch = 1 PutItem (the run row) and 1/6 of a stamp and of a SendMessageBatch;
    # the shard leases and range reads are per pass, not per run
    shards = svc.settings.shard_count
    assert dispatch_calls["DynamoDB.PutItem"] == runs
    assert dispatch_calls["SQS.SendMessageBatch"] == 1
    assert dispatch_calls["DynamoDB.UpdateItem"] == 2 * shards + 1  # lease+release per shard, one stamp
    assert dispatch_calls["DynamoDB.Query"] == 5 * shards  # five minute buckets per shard
    # worker = GetItem (job) + UpdateItem x5 per run: hold the job (overlap policy "skip", the
    # default), LEASED, RUNNING, SUCCEEDED, release the job
    assert worker_calls == Counter({"DynamoDB.GetItem": runs, "DynamoDB.UpdateItem": 5 * runs})
    table = {op: n / runs for op, n in (dispatch_calls + worker_calls).items()}
    print("\nAWS calls per healthy recurring run (+ ESM ReceiveMessage/DeleteMessageBatch per batch):")
    for op, per_run in sorted(table.items()):
        print(f"  {op:<28} {per_run:6.2f}")


def test_a_healthy_run_reads_no_more_than_its_own_items(svc: Services, pump: Pump, clock: FakeClock) -> None:
    # A one-off created through the API: transaction, run row, message, stamp; then the worker
    counter = CallCounter(svc.jobs.client, svc.queue.client)
    svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5)),
        tenant="t",
        idempotency_key="o",
    )
    assert counter.calls == Counter(
        {
            "DynamoDB.TransactWriteItems": 1,
            "DynamoDB.PutItem": 1,
            "SQS.SendMessageBatch": 1,
            "DynamoDB.UpdateItem": 1,
        }
    )
    counter.reset()
    pump.run_due(T0 + timedelta(seconds=5))
    # the job (twice: its dependants are read again once the success is recorded, see DagService.join),
    # LEASED, RUNNING, SUCCEEDED, and the one-off job marked COMPLETED
    assert counter.calls == Counter({"DynamoDB.GetItem": 2, "DynamoDB.UpdateItem": 4})
