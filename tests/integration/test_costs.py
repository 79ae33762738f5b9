"""Deterministic counts: items read to find due work, and AWS calls per healthy run."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from datetime import timedelta

import boto3
import pytest

from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import Job
from jobsched.domain.status import JobStatus
from jobsched.ports import FakeClock
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import CallCounter, Pump


@pytest.fixture(autouse=True)
def one_cache_per_function(svc: Services) -> None:
    """On AWS the worker is a Lambda of its own, with its own cache of the tenants' quotas
    (services/limits.py TenantQuotas): the api's read never saves the worker's. (The dispatcher
    object is the api's hand-over too here, so those two share one, as the api's own hand-over does.)"""
    assert svc.worker.quotas is not None
    svc.worker.quotas = dataclasses.replace(svc.worker.quotas, _cache={})


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


def an_hour_of(svc: Services, pump: Pump, clock: FakeClock, counter: CallCounter) -> tuple[Counter[str], ...]:
    """Dispatcher passes once a minute for an hour, workers running what is due: (dispatch, worker) calls."""
    dispatch: Counter[str] = Counter()
    work: Counter[str] = Counter()
    for minute in range(1, 61):
        clock.set(T0 + timedelta(minutes=minute))
        counter.reset()
        svc.dispatcher.dispatch_all()
        dispatch += Counter(counter.calls)
        counter.reset()
        pump.run_due(clock.now())
        work += Counter(counter.calls)
    return dispatch, work


@pytest.mark.parametrize(
    ("cron_expr", "overlap_policy", "horizon", "per_run", "stamps"),
    [
        # a minute cron, overlap "skip" (the default): hold the job (the write answers the job, so
        # it is not read), read the run row, record the outcome. The hold (lease/2 = 15 s here)
        # lapses before the next tick, so it is not released: no third write. The next tick, taking
        # over a hold never released, reads its holder's row (eventually consistent): a holder that
        # died before recording its run gets its start kept there (Worker._keep_dead_holders_start):
        # one more GetItem for every run but the first ("+takeover" below)
        ("* * * * *", "skip", 0, {"GetItem": 1, "UpdateItem": 2, "+takeover": 1}, 60),
        # overlap "allow": count the run on the job (the write answers the job, so it is not read),
        # read the run row, record the outcome, uncount: the start marker a cancel must see
        ("* * * * *", "allow", 0, {"GetItem": 1, "UpdateItem": 3}, 60),
        # a 10-second cron under "skip": the next tick comes while the hold is live: released
        ("*/10 * * * * *", "skip", 0, {"GetItem": 1, "UpdateItem": 3}, 60),
        # the AWS setting: ticks go out 840 s ahead, so the job's entry moves once per 14 minutes
        ("* * * * *", "allow", 840, {"GetItem": 1, "UpdateItem": 3}, 4),
    ],
)
def test_aws_calls_per_healthy_recurring_run(
    svc: Services,
    pump: Pump,
    clock: FakeClock,
    cron_expr: str,
    overlap_policy: str,
    horizon: int,
    per_run: dict[str, int],
    stamps: int,
) -> None:
    """Every AWS call a healthy recurring run costs, by operation (printed for the closing note)."""
    settings = svc.settings.model_copy(update={"handover_horizon_seconds": horizon})
    svc.dispatcher.settings = svc.worker.settings = svc.job_service.dispatcher.settings = settings
    counter = CallCounter(svc.jobs.client, svc.queue.client)
    # Given a recurring job (the API hands its first ticks over itself)
    job = svc.job_service.submit(
        CreateJobRequest(
            type="recurring", handler="demo.echo", cron_expr=cron_expr, overlap_policy=overlap_policy
        ),
        tenant="t",
        idempotency_key="r",
    )
    # When the dispatcher ticks once a minute for an hour and the workers run every due tick
    dispatch, work = an_hour_of(svc, pump, clock, counter)
    rows, _ = svc.runs.history(job.job_id, start=None, end=None, status="SUCCEEDED", limit=1000, cursor=None)
    runs = len(rows)
    assert runs == (60 if cron_expr == "* * * * *" else 360)
    # Then each run cost exactly these reads and writes
    expected = Counter({f"DynamoDB.{op}": n * runs for op, n in per_run.items() if op[0] != "+"})
    expected["DynamoDB.GetItem"] += per_run.get("+takeover", 0) * (runs - 1)
    # (and no read of the tenant's quota: the dispatcher's message carries max_concurrent_runs,
    # RunMessage.cap, though this worker's own cache is cold a minute after its last run)
    assert work == expected
    # and the dispatcher never writes a run row; it moves the job's due entry once per hand-over,
    # sends one batch per hand-over, and its per-pass cost (shard leases, bucket reads) is fixed
    shards = svc.settings.shard_count
    assert dispatch["DynamoDB.PutItem"] == 0
    assert dispatch["DynamoDB.UpdateItem"] == 60 * 2 * shards + stamps
    assert dispatch["SQS.SendMessageBatch"] == stamps * math.ceil(runs / stamps / 10)  # 10 per batch
    per_pass_queries = dispatch["DynamoDB.Query"] / 60
    assert per_pass_queries >= 3 * shards  # bucket reads per shard, whatever the load
    per_job = dispatch + work - Counter({"DynamoDB.UpdateItem": 60 * 2 * shards, "DynamoDB.Query": 10**9})
    table = {op: n / runs for op, n in per_job.items()}
    print(f"\nAWS calls per healthy run ({cron_expr!r}, {overlap_policy}, horizon {horizon} s),")
    print(f"  besides a fixed {2 * shards} UpdateItem + {per_pass_queries:.0f} Query per pass:")
    for op, n in sorted(table.items()):
        print(f"  {op:<28} {n:6.2f}")


def test_a_healthy_run_reads_no_more_than_its_own_items(svc: Services, pump: Pump, clock: FakeClock) -> None:
    # A one-off created through the API, due within the look-ahead: one conditional put (the job
    # carries its idempotency record), the PENDING run row, the message, the stamp; then the worker
    counter = CallCounter(svc.jobs.client, svc.queue.client)
    svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5)),
        tenant="t",
        idempotency_key="o",
    )
    # (and the tenant's quota: its item, read once per 30 s per warm API Lambda, and a COUNT of its
    # live jobs in the listing index for max_jobs: services/limits.py)
    assert counter.calls == Counter(
        {"DynamoDB.PutItem": 2, "SQS.SendMessageBatch": 1, "DynamoDB.UpdateItem": 1}
        | {"DynamoDB.GetItem": 1, "DynamoDB.Query": 1}
    )
    counter.reset()
    pump.run_due(T0 + timedelta(seconds=5))
    # the run's start marker on its job (the slot: the write answers the job, so it is not read),
    # the run row, the outcome in one write (PENDING -> LEASED -> RUNNING -> SUCCEEDED), the job
    # again (its dependants are read once the success is recorded, see DagService.join), and the
    # one-off job marked COMPLETED (the same write frees the slot); no quota read (RunMessage.cap)
    assert counter.calls == Counter({"DynamoDB.GetItem": 2, "DynamoDB.UpdateItem": 3})


@pytest.mark.parametrize(
    ("due_in", "by"), [(timedelta(seconds=30), "api"), (timedelta(hours=3), "dispatcher")]
)
def test_aws_calls_per_healthy_one_off_run(
    svc: Services, pump: Pump, clock: FakeClock, due_in: timedelta, by: str
) -> None:
    """Every AWS call of a healthy one-off, from its create to its completion: no transaction and no
    idempotency item (these counts fail if one of those writes comes back)."""
    counter = CallCounter(svc.jobs.client, svc.queue.client)
    # Given a one-off created with an Idempotency-Key, due within the look-ahead or hours ahead
    job = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + due_in),
        tenant="t",
        idempotency_key=f"once-{by}",
    )
    # When the request (or a dispatcher pass, when it comes due) hands it over and a worker runs it
    if by == "dispatcher":
        clock.set(T0 + due_in - timedelta(seconds=60))
        assert svc.dispatcher.dispatch_all().runs_sent == 1
    pump.run_due(T0 + due_in)
    spent = Counter(counter.calls)
    assert svc.job_service.get(job.job_id, tenant="t").job.status == JobStatus.COMPLETED
    # Then its whole life cost (a pass's own shard-lease writes and bucket reads are fixed per pass,
    # whatever is due: left out): create 1 PutItem; hand-over the PENDING run row (1 PutItem),
    # 1 SendMessageBatch and the stamp (1 UpdateItem); run: hold, outcome, COMPLETED (3 UpdateItem),
    # the run row and the job (2 GetItem); the tenant's quota item, each read through a 30 s cache
    # per warm Lambda: the create's (its max_jobs COUNT is a Query, left out with the others) and,
    # hours later, the dispatcher's (max_runs_per_second; the worker reads none: RunMessage.cap)
    calls = spent - Counter({"DynamoDB.Query": 10**9})
    if by == "dispatcher":
        calls -= Counter({"DynamoDB.UpdateItem": 2 * svc.settings.shard_count})
    quota_reads = {"api": 1, "dispatcher": 2}[by]
    assert calls == Counter(
        {"DynamoDB.PutItem": 2, "SQS.SendMessageBatch": 1, "DynamoDB.UpdateItem": 4}
        | {"DynamoDB.GetItem": 2 + quota_reads}
    )
    assert "DynamoDB.TransactWriteItems" not in spent


def test_a_burst_page_is_sent_and_stamped_with_calls_in_flight(served: Services) -> None:
    """Many due jobs in one shard: SQS batches and stamps run concurrently (io_workers), none lost."""
    from datetime import UTC, datetime

    svc = served
    svc.dispatcher.io_workers = 16
    client = boto3.client("dynamodb", endpoint_url=svc.jobs.client.meta.endpoint_url)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    for i in range(120):
        job = Job(
            job_id=f"job_burst{i:04d}", tenant="t", type="one_off", status=JobStatus.SCHEDULED,
            handler="demo.echo", payload={}, run_at=due, next_run_at=due, created_at=due, updated_at=due,
        )  # fmt: skip
        client.put_item(TableName=svc.settings.jobs_table, Item=job_to_item(job, shard_count=2))
    report = svc.dispatcher.dispatch_all()
    assert report.runs_sent == 120
    attrs = svc.queue.client.get_queue_attributes(
        QueueUrl=svc.queue.queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )
    assert attrs["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "120"
    # every due entry was stamped (a one-off leaves the index): a second pass finds nothing
    assert svc.dispatcher.dispatch_all().runs_sent == 0
