"""Container jobs in the run path (the fakes for the stores, moto for ECS): a job with an ecs target is
placed on Fargate, its run reserves its vCPU, starts one task at the run's size, and its exit code
decides the attempt: 0 succeeds, 3 fails it with ExitCode (the code in the error), and the
reservation is given back either way."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.ecs.models import ecs_backends
from moto.moto_api import state_manager

from jobsched.adapters.fargate_vcpu import MemoryFargateVcpuStore
from jobsched.adapters.memory import MemoryJobStore, MemoryRunQueue, MemoryRunStore, MemoryStateMachines
from jobsched.adapters.targets import EcsPlace, TargetFactory
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.fargate_vcpu import ACCOUNT_SCOPE
from jobsched.domain.status import RunStatus
from jobsched.handlers import registry
from jobsched.ports import FakeClock
from jobsched.services.run import Outcome
from jobsched.services.runs import RunService
from jobsched.settings import Settings
from jobsched.wiring import Services, compose
from tests.conftest import T0
from tests.support import run_once

RUN_AT = T0 + timedelta(hours=1)
REGION = "us-east-1"


@pytest.fixture
def world() -> Iterator[tuple[Services, FakeClock, MemoryRunQueue, MemoryFargateVcpuStore]]:
    with mock_aws():
        state_manager.set_transition(
            model_name="ecs::task", transition={"progression": "manual", "times": 10**6}
        )
        ec2 = boto3.client("ec2", region_name=REGION)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        group = ec2.create_security_group(GroupName="t", Description="t", VpcId=vpc)["GroupId"]
        ecs = boto3.client("ecs", region_name=REGION)
        ecs.create_cluster(clusterName="jobsched")
        clock = FakeClock(T0)
        settings = Settings(
            jobs_table="jobs",
            runs_table="runs",
            execution_queue_url="memory://execution",
            failure_workflow_arn="arn:failure",
            shard_count=2,
            lease_seconds=300,
            worker_lane="ecs",
        )
        queue = MemoryRunQueue(clock=clock, visibility_seconds=300)
        handlers = registry.copy()
        factory = TargetFactory(
            handlers=handlers,
            roles=None,
            signing_secret=lambda tenant: "s",
            clock=clock,
            ecs=lambda: ecs,
            ecs_place=EcsPlace(cluster="jobsched", subnets=(subnet,), security_groups=(group,)),
        )
        vcpu = MemoryFargateVcpuStore()
        svc = compose(
            settings,
            jobs=MemoryJobStore(shard_count=2),
            runs=MemoryRunStore(),
            queue=queue,
            state_machines=MemoryStateMachines("arn:failure"),
            clock=clock,
            handlers=handlers,
            targets=factory,
            fargate_vcpu=vcpu,
        )
        svc.worker.heartbeat_thread = False
        yield svc, clock, queue, vcpu
        state_manager.unset_transition("ecs::task")


def container_job(svc: Services, command: list[str]) -> str:
    request = CreateJobRequest.model_validate(
        {
            "type": "one_off",
            "run_at": RUN_AT.isoformat(),
            "timeout_seconds": 600,
            "max_attempts": 2,
            "resources": {"cpu": 512, "memory_mib": 1024},
            "target": {"type": "ecs", "image": "busybox:1.36", "command": command},
        }
    )
    return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def exit_with(code: int) -> Any:
    """moto runs no container: each poll's sleep ends the run's task with `code`."""

    def sleep(seconds: float) -> None:
        for task in ecs_backends["123456789012"][REGION].tasks.get("jobsched", {}).values():
            task.status = "STOPPED"
            task.containers[0].exitCode = code

    return sleep


def test_a_container_that_exits_0_succeeds_on_a_task_of_the_runs_size(world: Any) -> None:
    svc, clock, queue, vcpu = world
    job_id = container_job(svc, ["sh", "-c", "echo done"])
    assert svc.jobs.get_job(job_id).placement().runs_on == "ecs"
    assert run_once(svc, clock, queue, exit_with(0), RUN_AT) == [Outcome.SUCCEEDED]
    row = svc.runs.get(job_id, RUN_AT)
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    [task] = ecs_backends["123456789012"][REGION].tasks["jobsched"].values()
    assert task.overrides["cpu"] == "512" and task.overrides["memory"] == "1024"
    assert row.ecs_tasks == [task.task_arn]  # noted on the run: where its output is
    assert vcpu.used(ACCOUNT_SCOPE) == 0 and vcpu.reservations() == {}


def test_a_container_that_exits_3_fails_its_attempt_with_exit_code(world: Any) -> None:
    svc, clock, queue, vcpu = world
    job_id = container_job(svc, ["sh", "-c", "echo oops; exit 3"])
    assert run_once(svc, clock, queue, exit_with(3), RUN_AT) == [Outcome.FAILED]
    row = svc.runs.get(job_id, RUN_AT)
    assert row is not None and row.status == RunStatus.FAILED
    assert row.error is not None and row.error.type == "ExitCode" and "exit code 3" in row.error.message
    assert len(row.ecs_tasks) == 1 and row.ecs_tasks[0] in row.error.message  # a failed attempt's too
    assert vcpu.used(ACCOUNT_SCOPE) == 0


def test_a_cancel_stops_the_running_container_and_its_run_ends_cancelled_never_retried(world: Any) -> None:
    svc, clock, queue, vcpu = world
    job_id = container_job(svc, ["sh", "-c", "sleep 3600"])  # max_attempts 2: a failure would retry
    run_id = f"{job_id}-{int(RUN_AT.timestamp() * 1000)}"
    answers: list[bool] = []

    def sleep(seconds: float) -> None:
        # Given the container runs; on the first poll its run is cancelled (POST /api/runs/{id}/cancel)
        if not answers:
            answers.append(RunService(job_service=svc.job_service).cancel(run_id, tenant="t").stopping)
        for task in ecs_backends["123456789012"][REGION].tasks.get("jobsched", {}).values():
            if task.desired_status == "STOPPED":  # StopTask's SIGTERM ends the container: 128 + 15
                task.containers[0].exitCode = 143

    # When the worker follows the task
    assert run_once(svc, clock, queue, sleep, RUN_AT) == [Outcome.FAILED]
    # Then the cancel was answered "asked to stop" (it was running), and the task was stopped for it
    assert answers == [True]
    [task] = ecs_backends["123456789012"][REGION].tasks["jobsched"].values()
    assert task.desired_status == "STOPPED" and task.stopped_reason == "jobsched: cancelled"
    # And the run ended as its task did, Cancelled, handed to the failure workflow as not retryable
    row = svc.runs.get(job_id, RUN_AT)
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 1
    assert row.error is not None and row.error.type == "Cancelled"
    [failure] = svc.failures.state_machines.started.values()
    assert failure["retryable"] is False
    assert vcpu.used(ACCOUNT_SCOPE) == 0
