"""A paced dispatcher: a shard pass hands over at most JOBSCHED_DISPATCH_PACE due entries a second,
and stops before its lease runs out, leaving the rest to the next pass (nothing lost or doubled)."""

from __future__ import annotations

from datetime import timedelta

import boto3

from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain import times
from jobsched.domain.models import Job
from jobsched.domain.status import JobStatus
from jobsched.ports import FakeClock
from jobsched.wiring import Services
from tests.conftest import T0

DUE = T0 + timedelta(seconds=100)


class RealTime:
    """The dispatcher's monotonic clock and sleep, played: sleeping moves it, nothing else does."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def due_in_shard_0(svc: Services, count: int) -> list[str]:
    """`count` one-offs of shard 0, all due on one second (a burst), written straight to the table."""
    client = boto3.client("dynamodb")
    ids: list[str] = []
    i = 0
    while len(ids) < count:
        job_id = f"job_pace{i:06d}"
        i += 1
        if times.shard_of(job_id, svc.settings.shard_count) != 0:
            continue
        job = Job(
            job_id=job_id,
            tenant="t",
            type="one_off",
            status=JobStatus.SCHEDULED,
            handler="demo.echo",
            payload={},
            run_at=DUE,
            next_run_at=DUE,
            created_at=T0,
            updated_at=T0,
        )
        client.put_item(
            TableName=svc.settings.jobs_table, Item=job_to_item(job, shard_count=svc.settings.shard_count)
        )
        ids.append(job_id)
    return ids


def paced(svc: Services, pace: int, real: RealTime) -> None:
    svc.dispatcher.settings = svc.settings.model_copy(update={"dispatch_pace": pace})
    svc.dispatcher.monotonic, svc.dispatcher.sleep = real.monotonic, real.sleep


def queued(svc: Services) -> int:
    """Messages in the execution queue, delayed ones included."""
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=svc.settings.execution_queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    return sum(int(n) for n in attributes.values())


def test_a_paced_pass_hands_a_page_over_only_once_the_pages_before_it_had_their_time(
    svc: Services, clock: FakeClock
) -> None:
    # Given 250 jobs of one shard due on the same second, and a pace of 100 entries a second
    due_in_shard_0(svc, 250)
    real = RealTime()
    paced(svc, 100, real)
    # When the shard's pass hands them over (pages of 100)
    clock.set(T0 + timedelta(seconds=60))
    report = svc.dispatcher.dispatch_shard(0)
    # Then each page after the first waited for the one before it: 100 entries = 1 s
    assert report.runs_sent == 250 and not report.paced_out and not report.interrupted
    assert real.sleeps == [1.0, 1.0]
    assert queued(svc) == 250


def test_a_pace_that_would_outlast_the_lease_stops_the_pass_and_the_next_one_sends_the_rest(
    svc: Services, clock: FakeClock
) -> None:
    # Given 250 jobs of one shard due on the same second, and a pace the lease cannot hold:
    # 100 entries at 2 a second take 50 s, the lease is 55 s and a pass stops at 90% of it
    ids = due_in_shard_0(svc, 250)
    real = RealTime()
    paced(svc, 2, real)
    clock.set(T0 + timedelta(seconds=60))
    first = svc.dispatcher.dispatch_shard(0)
    # Then the first page went out, the second was left in the index, and the pass did not sleep
    # past its lease
    assert first.paced_out and not first.interrupted
    assert first.runs_sent == 100
    assert real.sleeps == []
    # When the next pass runs (unpaced here), it resumes at the same bucket
    paced(svc, 0, real)
    clock.set(T0 + timedelta(seconds=70))
    second = svc.dispatcher.dispatch_shard(0)
    # Then every job was handed over exactly once
    assert second.runs_sent == 150 and not second.paced_out
    assert queued(svc) == 250
    # (a one-off's run row is written PENDING as it is handed over: one per job, none missing)
    assert all(svc.runs.get(job_id, DUE) is not None for job_id in ids)
