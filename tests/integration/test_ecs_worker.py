"""The ECS Fargate worker (jobsched.ecsworker) on moto: its own queue, the shared run path, routing, SIGTERM.

A job that jobsched.domain.compute places on ECS is sent by the dispatcher to the ECS queue; the ECS
worker runs it through the same Worker.process as the Lambda worker. A run of it that reaches the
Lambda worker anyway (a run-now, a retry, a DAG release) is passed on to the ECS queue, not run.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import boto3
import pytest

from jobsched.adapters.dynamodb.fargate_vcpu import DynamoDBFargateVcpuStore
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.fargate_vcpu import ACCOUNT_SCOPE, Scope
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import RunStatus
from jobsched.domain.targets import EcsTarget
from jobsched.ecsworker import EcsWorker
from jobsched.handlers import HandlerRegistry, RunContext, registry
from jobsched.ports import FakeClock
from jobsched.services.run import Delivery, Outcome
from jobsched.settings import Settings
from jobsched.wiring import Services, build
from tests.conftest import T0

RUN_AT = T0 + timedelta(hours=1)


@pytest.fixture
def ecs_svc(aws: Settings, clock: FakeClock) -> Services:
    """The ECS worker's services: the same wiring, JOBSCHED_WORKER_LANE=ecs."""
    settings = aws.model_copy(update={"worker_lane": "ecs"})
    services = build(
        settings,
        dynamodb=boto3.client("dynamodb"),
        sqs=boto3.client("sqs"),
        stepfunctions=boto3.client("stepfunctions"),
        clock=clock,
        handlers=registry.copy(),
    )
    services.worker.sleep = lambda seconds: clock.advance(seconds)
    return services


def ecs_worker(ecs_svc: Services, **kw: Any) -> EcsWorker:
    settings = ecs_svc.settings
    return EcsWorker(
        sqs=boto3.client("sqs"),
        queue_url=settings.ecs_queue_url,
        worker=ecs_svc.worker,
        trusted_senders=settings.trusted_senders,
        wait_seconds=0,
        **kw,
    )


def depth(url: str) -> int:
    attrs = boto3.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def submit_long(svc: Services, handler: str = "demo.echo") -> str:
    request = CreateJobRequest(type="one_off", handler=handler, run_at=RUN_AT, timeout_seconds=600)
    return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def test_an_ecs_placed_run_goes_to_the_ecs_queue_and_the_ecs_worker_runs_it_once(
    svc: Services, ecs_svc: Services, clock: FakeClock
) -> None:
    # Given a one-off with a 600 s timeout (beyond the Lambda worker's), due now
    job_id = submit_long(svc)
    clock.set(RUN_AT)
    # When the dispatcher hands it over
    assert svc.dispatcher.dispatch_all().runs_sent == 1
    # Then its message is on the ECS queue, not on the execution queue
    assert (depth(svc.settings.execution_queue_url), depth(svc.settings.ecs_queue_url)) == (0, 1)
    # And the ECS worker runs it once, on attempt 1, and deletes the message
    worker = ecs_worker(ecs_svc)
    assert worker.poll_once() == 1
    assert worker.drain() == []
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and (row.status, row.attempt) == (RunStatus.SUCCEEDED, 1)
    assert depth(svc.settings.ecs_queue_url) == 0


def test_the_ecs_workers_heartbeat_extends_its_own_queues_messages(ecs_svc: Services) -> None:
    assert ecs_svc.worker.queue.queue_url == ecs_svc.settings.ecs_queue_url  # type: ignore[attr-defined]


def test_an_ecs_placed_run_reaching_the_lambda_worker_is_forwarded_with_its_slot_free(
    svc: Services, ecs_svc: Services, clock: FakeClock
) -> None:
    # Given an ECS-placed one-off whose run arrives on the execution queue (as a workflow's retry would)
    job_id = submit_long(svc)
    clock.set(RUN_AT)
    message = RunMessage(job_id=job_id, scheduled_for=times.stored(RUN_AT), guard=True)
    svc.queue.send([Outgoing(message, 0)])
    sqs = boto3.client("sqs")
    got = sqs.receive_message(QueueUrl=svc.settings.execution_queue_url, MaxNumberOfMessages=1)["Messages"][0]
    # When the Lambda worker receives it
    outcome = svc.worker.process(Delivery(got["MessageId"], got["ReceiptHandle"], got["Body"]))
    # Then it runs nothing, passes the run on to the ECS queue, and leaves the job's slot free
    assert outcome == Outcome.FORWARDED
    assert depth(svc.settings.ecs_queue_url) == 1
    job = svc.jobs.get_job(job_id)
    assert job is not None and job.active_run is None
    # And the ECS worker then runs it on attempt 1
    worker = ecs_worker(ecs_svc)
    assert worker.poll_once() == 1
    worker.drain()
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and (row.status, row.attempt) == (RunStatus.SUCCEEDED, 1)


def test_sigterm_hands_back_a_run_still_running_after_the_grace_period(
    svc: Services, ecs_svc: Services, clock: FakeClock
) -> None:
    # Given an ECS worker running a handler that does not end by itself
    started, release = threading.Event(), threading.Event()

    def stuck(payload: dict[str, Any], ctx: RunContext) -> None:
        started.set()
        release.wait(timeout=30)

    handlers = HandlerRegistry()
    handlers.register("t.stuck", stuck)
    svc.job_service.registry = ecs_svc.worker.registry = handlers
    submit_long(svc, "t.stuck")
    clock.set(RUN_AT)
    svc.dispatcher.dispatch_all()
    worker = ecs_worker(ecs_svc, grace_seconds=0)
    assert worker.poll_once() == 1
    assert started.wait(timeout=10)
    try:
        # When it is told to stop (SIGTERM) and the grace period runs out
        worker.stop()
        handed_back = worker.drain()
        # Then the running run's message is handed back: visible on the ECS queue again at once
        assert len(handed_back) == 1
        again = boto3.client("sqs").receive_message(QueueUrl=svc.settings.ecs_queue_url).get("Messages", [])
        assert [m["MessageId"] for m in again] == handed_back
    finally:
        release.set()
        worker.join(timeout=10)


def test_the_ecs_worker_reserves_vcpu_in_the_table_and_a_run_over_the_quota_waits_queued(
    svc: Services, ecs_svc: Services, clock: FakeClock
) -> None:
    # Given the account's 6 vCPU reserved by another run (its record in the Fargate vCPU table)
    store = DynamoDBFargateVcpuStore(
        client=boto3.client("dynamodb"), table=ecs_svc.settings.fargate_vcpu_table
    )
    account = Scope(name=ACCOUNT_SCOPE, limit=6 * 1024)
    assert (
        store.reserve("other", cpu=6 * 1024, scopes=(account,), until=RUN_AT + timedelta(hours=1), now=RUN_AT)
        is None
    )
    job_id = submit_long(svc)
    clock.set(RUN_AT)
    assert svc.dispatcher.dispatch_all().runs_sent == 1
    worker = ecs_worker(ecs_svc)
    # When the ECS worker takes its run, then it waits (acknowledged: a delayed copy carries it)
    assert worker.poll_once() == 1
    assert worker.drain() == []
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.PENDING
    assert row.reason == "waited for Fargate capacity: the account's vCPU quota (6 vCPU) is reserved"
    # When the other run gives its vCPU back, the copy runs once and gives its own back
    assert store.release("other")
    worker = ecs_worker(ecs_svc)
    worker.wait_seconds = 1  # the copy's delay is SQS's real second here: long-poll for it
    deadline = time.monotonic() + 10
    while not worker.poll_once() and time.monotonic() < deadline:
        clock.advance(1)
    worker.drain()
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and (row.status, row.attempt) == (RunStatus.SUCCEEDED, 1)
    assert store.used(ACCOUNT_SCOPE) == 0 and store.reservations() == {}


def test_a_container_job_round_trips_through_the_job_store_placed_on_ecs(svc: Services) -> None:
    # Given a container job asking 0.5 vCPU and 1 GB (stored in DynamoDB on moto)
    request = CreateJobRequest.model_validate(
        {
            "type": "one_off",
            "run_at": RUN_AT.isoformat(),
            "timeout_seconds": 600,
            "resources": {"cpu": 512, "memory_mib": 1000},
            "target": {"type": "ecs", "image": "busybox:1.36", "command": ["sh", "-c", "exit 3"]},
        }
    )
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    # When it is read back, then its target is the same and it is placed on Fargate's best fit
    job = svc.jobs.get_job(job_id)
    assert job is not None and isinstance(job.target, EcsTarget)
    assert job.target.command == ["sh", "-c", "exit 3"]
    placement = job.placement()
    assert (placement.runs_on, placement.resources.cpu, placement.resources.memory_mib) == ("ecs", 512, 1024)
