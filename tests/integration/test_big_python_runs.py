"""A Python run placed bigger than the ECS worker's own task runs in a Fargate task of its own (the
fakes for the stores, moto for ECS): the ECS worker reserves its vCPU, starts one task of its own
task definition at the run's size with `python -m jobsched.ecsworker --run`, and that task runs the
handler through the run path and records it; the worker then finds the attempt recorded under its
lease, once. A run that fits the worker's task still runs in-process: no task."""

from __future__ import annotations

import json
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
from jobsched.adapters.targets import OWN_TASK_COMMAND, EcsPlace, TargetFactory
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.ecs_tasks import RAN_UNRECORDED, started_by
from jobsched.domain.fargate_vcpu import ACCOUNT_SCOPE
from jobsched.domain.keys import run_id_for
from jobsched.domain.status import RunStatus
from jobsched.errors import TransientStoreError
from jobsched.handlers import registry
from jobsched.ports import FakeClock
from jobsched.services.run import NOTHING_TO_RUN, Outcome
from jobsched.services.task_events import TaskEventOutcome, TaskStopEvents
from jobsched.settings import Settings
from jobsched.wiring import Services, compose
from tests.conftest import T0
from tests.support import run_once

RUN_AT = T0 + timedelta(hours=1)
REGION = "us-east-1"
ACCOUNT = "123456789012"
FAMILY = "jobsched-ecs-worker"


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
        # The ECS worker's own task definition, as CDK registers it (constructs/ecs.py).
        ecs.register_task_definition(
            family=FAMILY,
            requiresCompatibilities=["FARGATE"],
            networkMode="awsvpc",
            cpu="1024",
            memory="2048",
            # No hard container memory (a limit would cap the task's override); moto needs a
            # reservation to size the task.
            containerDefinitions=[
                {"name": "worker", "image": "jobsched-worker", "essential": True, "memoryReservation": 128}
            ],
        )
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
        handlers.register("test.boom", _boom)
        handlers.register("test.beats", _beats)
        handlers.register("test.counts", _counts)
        factory = TargetFactory(
            handlers=handlers,
            roles=None,
            signing_secret=lambda tenant: "s",
            clock=clock,
            ecs=lambda: ecs,
            ecs_place=EcsPlace(
                cluster="jobsched", subnets=(subnet,), security_groups=(group,), worker_family=FAMILY
            ),
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


def _boom(payload: dict[str, Any], ctx: Any) -> None:
    raise RuntimeError("boom in a task of its own")


_ran: list[str] = []


def _counts(payload: dict[str, Any], ctx: Any) -> None:
    _ran.append(ctx.job_id)


def _beats(payload: dict[str, Any], ctx: Any) -> dict[str, bool]:
    ctx.heartbeat()
    return {"cancelled": ctx.cancelled}


def python_job(svc: Services, handler: str, resources: dict[str, int], **fields: Any) -> str:
    request = CreateJobRequest.model_validate(
        {
            "type": "one_off",
            "run_at": RUN_AT.isoformat(),
            "handler": handler,
            "payload": {"hello": "world"},
            "timeout_seconds": 600,
            "max_attempts": 2,
            "resources": resources,
            **fields,
        }
    )
    return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def tasks() -> list[Any]:
    return list(ecs_backends[ACCOUNT][REGION].tasks.get("jobsched", {}).values())


def the_task_runs(svc: Services, vcpu: MemoryFargateVcpuStore, seen: dict[str, Any]) -> Any:
    """moto runs no container: the first poll's sleep plays the task, `python -m jobsched.ecsworker
    --run` with the environment RunTask gave it (Worker.run_in_own_task), and stops it with its code."""

    def sleep(seconds: float) -> None:
        for task in tasks():
            if task.status == "STOPPED":
                continue
            environment = {
                pair["name"]: pair["value"] for pair in task.overrides["containerOverrides"][0]["environment"]
            }
            seen["used_while_running"] = vcpu.used(ACCOUNT_SCOPE)
            code = svc.worker.run_in_own_task(
                environment["JOBSCHED_RUN_ID"], int(environment["JOBSCHED_ATTEMPT"])
            )
            task.status = "STOPPED"
            task.containers[0].exitCode = code

    return sleep


def test_a_4_vcpu_python_run_gets_a_task_of_its_own_at_its_size_and_succeeds_once(world: Any) -> None:
    svc, clock, queue, vcpu = world
    # Given a Python job asking for 4096 CPU units and 8192 MiB: bigger than the worker's 1024/2048
    job_id = python_job(svc, "demo.echo", {"cpu": 4096, "memory_mib": 8192})
    placed = svc.jobs.get_job(job_id).placement()
    assert (placed.runs_on, placed.resources.cpu, placed.resources.memory_mib) == ("ecs", 4096, 8192)
    seen: dict[str, Any] = {}
    # When the ECS worker takes its run
    assert run_once(svc, clock, queue, the_task_runs(svc, vcpu, seen), RUN_AT) == [Outcome.SUCCEEDED]
    # Then one task of the worker's own definition ran it, at its size, with the --run command
    [task] = tasks()
    run_id = run_id_for(job_id, RUN_AT)
    assert task.task_definition_arn.split("/")[-1].startswith(FAMILY + ":")
    assert task.overrides["cpu"] == "4096" and task.overrides["memory"] == "8192"
    [override] = task.overrides["containerOverrides"]
    assert override["name"] == "worker" and override["command"] == list(OWN_TASK_COMMAND)
    assert task.started_by == started_by(run_id)  # the run id, or its digest past 36 characters
    tags = {t["key"]: t["value"] for t in task.tags}
    assert tags["jobsched:run_id"] == run_id and tags["jobsched:attempt"] == "1"
    # And its 4 vCPU were reserved while it ran, and given back after
    assert seen["used_while_running"] == 4096
    assert vcpu.used(ACCOUNT_SCOPE) == 0 and vcpu.reservations() == {}
    # And the run succeeded once, on attempt 1, with the handler's own result (recorded by the task)
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    assert len(row.attempts) == 1 and row.result == {"hello": "world"}
    assert row.ecs_tasks == [task.task_arn]
    assert svc.jobs.get_job(job_id).status == "COMPLETED"
    # And the task, run again for the same attempt (a duplicate), finds it recorded: nothing runs
    assert svc.worker.run_in_own_task(run_id, 1) == NOTHING_TO_RUN


def test_a_big_python_run_that_raises_fails_its_attempt_with_the_handlers_error_once(world: Any) -> None:
    svc, clock, queue, vcpu = world
    job_id = python_job(svc, "test.boom", {"cpu": 2048, "memory_mib": 4096})
    assert run_once(svc, clock, queue, the_task_runs(svc, vcpu, {}), RUN_AT) == [Outcome.FAILED]
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 1
    # The handler's own error, not the task's exit code: the task recorded it first
    assert row.error is not None and row.error.type == "RuntimeError" and "boom" in row.error.message
    assert len(row.attempts) == 1
    assert vcpu.used(ACCOUNT_SCOPE) == 0


def test_a_heartbeat_in_a_task_of_its_own_whose_cancel_read_fails_does_not_fail_the_handler(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, clock, queue, vcpu = world
    # Given a big Python run whose handler beats once, and a run store that answers a 500 to every
    # eventually consistent read while the task runs (the beat reads the run's cancel mark so)
    job_id = python_job(svc, "test.beats", {"cpu": 2048, "memory_mib": 4096})
    in_task, real_get, task_runs = [False], svc.worker.runs.get, the_task_runs(svc, vcpu, {})

    def get(job_id: str, scheduled_for: Any, *, consistent: bool = True) -> Any:
        if in_task[0] and not consistent:
            raise TransientStoreError("sim: InternalServerError on get", aws_code="InternalServerError")
        return real_get(job_id, scheduled_for, consistent=consistent)

    def sleep(seconds: float) -> None:
        in_task[0] = True
        try:
            task_runs(seconds)
        finally:
            in_task[0] = False

    monkeypatch.setattr(svc.worker.runs, "get", get)
    # When the ECS worker takes its run and its task runs the handler
    assert run_once(svc, clock, queue, sleep, RUN_AT) == [Outcome.SUCCEEDED]
    # Then the beat's failed read was the beat's alone: the handler ran on and its result stands
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.result == {"cancelled": False}
    assert len(row.attempts) == 1


def test_a_task_that_dies_before_recording_fails_its_attempt_as_task_lost(world: Any) -> None:
    svc, clock, queue, vcpu = world
    job_id = python_job(svc, "demo.echo", {"cpu": 4096, "memory_mib": 8192})

    def dies(seconds: float) -> None:  # stopped with no exit code: the container never ran the run
        for task in tasks():
            task.status = "STOPPED"
            task.containers[0].exitCode = None

    assert run_once(svc, clock, queue, dies, RUN_AT) == [Outcome.FAILED]
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.FAILED and row.error is not None
    assert row.error.type == "TaskLost"  # retried by the job's policy, like a lost worker
    assert vcpu.used(ACCOUNT_SCOPE) == 0


def test_a_lost_task_of_a_job_that_is_not_idempotent_is_dead_lettered_not_run_again(world: Any) -> None:
    svc, clock, queue, vcpu = world
    # Given a big Python job declared idempotent: false, with attempts left
    job_id = python_job(svc, "demo.echo", {"cpu": 4096, "memory_mib": 8192}, idempotent=False)

    def dies(seconds: float) -> None:  # stopped with no exit code: it may have run the handler, or not
        for task in tasks():
            task.status = "STOPPED"
            task.containers[0].exitCode = None

    # When its task is lost
    assert run_once(svc, clock, queue, dies, RUN_AT) == [Outcome.FAILED]
    # Then, as for a worker that died holding such a run, nothing runs it again by itself: its
    # failure goes to the failure workflow as not retryable, which dead-letters it (a replay is the
    # user's call), with the task's fate as its error
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 1
    assert row.error is not None and row.error.type == "TaskLost"
    [failure] = svc.failures.state_machines.started.values()
    assert failure["retryable"] is False and failure["attempt"] == 1 and failure["max_attempts"] == 2
    assert vcpu.used(ACCOUNT_SCOPE) == 0


def test_a_task_whose_handler_ran_and_whose_record_failed_is_task_lost_not_run_again(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, clock, queue, vcpu = world
    # Given a big Python job declared idempotent: false, with attempts left, and a run store that
    # answers a 500 to every record while its task runs (the handler has run by then)
    job_id = python_job(svc, "test.counts", {"cpu": 4096, "memory_mib": 8192}, idempotent=False)
    in_task, real_record, task_runs, codes = [False], svc.worker.runs.record, the_task_runs(svc, vcpu, {}), []

    def record(*args: Any, **kwargs: Any) -> Any:
        if in_task[0]:
            raise TransientStoreError("sim: InternalServerError on record", aws_code="InternalServerError")
        return real_record(*args, **kwargs)

    def sleep(seconds: float) -> None:
        in_task[0] = True
        try:
            task_runs(seconds)
            codes.extend(t.containers[0].exitCode for t in tasks())
        finally:
            in_task[0] = False

    monkeypatch.setattr(svc.worker.runs, "record", record)
    _ran.clear()
    # When the ECS worker takes its run, and its task runs the handler and cannot record it
    assert run_once(svc, clock, queue, sleep, RUN_AT) == [Outcome.FAILED]
    # Then the task said so by its exit code, and the worker recorded the attempt's fate unknown
    assert codes == [RAN_UNRECORDED] and _ran == [job_id]
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 1
    assert row.error is not None and row.error.type == "TaskLost"
    assert "could not be recorded" in row.error.message
    # And, the job not idempotent, its failure is not retryable: dead-lettered, not run a second time
    [failure] = svc.failures.state_machines.started.values()
    assert failure["retryable"] is False and failure["attempt"] == 1 and failure["max_attempts"] == 2
    assert vcpu.used(ACCOUNT_SCOPE) == 0


def test_a_python_run_that_fits_the_worker_task_runs_in_process_with_no_task(world: Any) -> None:
    svc, clock, queue, vcpu = world
    job_id = python_job(svc, "demo.echo", {"cpu": 1024, "memory_mib": 2048})
    assert svc.jobs.get_job(job_id).placement().runs_on == "ecs"
    assert run_once(svc, clock, queue, the_task_runs(svc, vcpu, {}), RUN_AT) == [Outcome.SUCCEEDED]
    assert tasks() == []
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.ecs_tasks == []


def test_a_task_lost_before_its_record_is_recorded_once_by_its_stop_event_first(world: Any) -> None:
    svc, clock, queue, vcpu = world
    job_id = python_job(svc, "demo.echo", {"cpu": 4096, "memory_mib": 8192})
    stops = TaskStopEvents(jobs=svc.jobs, runs=svc.runs, failures=svc.failures, dag=svc.dag, clock=clock)
    seen: list[TaskEventOutcome] = []

    def dies_and_its_event_comes_first(seconds: float) -> None:
        client = boto3.client("ecs", region_name=REGION)
        for task in tasks():
            task.status = "STOPPED"
            task.containers[0].exitCode = None
            task.stopped_reason = "Essential container in task exited"
            # ECS's event: the task as DescribeTasks has it (overrides and all, less its tags), twice
            [detail] = client.describe_tasks(cluster="jobsched", tasks=[task.task_arn])["tasks"]
            detail = json.loads(json.dumps(detail, default=str))
            seen.extend([stops.stopped(detail), stops.stopped(detail)])

    # When the task dies before recording, and its stop event reaches task_events before the poll
    assert run_once(svc, clock, queue, dies_and_its_event_comes_first, RUN_AT) == [Outcome.FAILED]
    # Then the event recorded the attempt (its twin and the worker's poll changed nothing): TaskLost
    assert seen == [TaskEventOutcome.FAILED, TaskEventOutcome.NOT_RUNNING]
    row = svc.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.FAILED and len(row.attempts) == 1
    assert row.error is not None and row.error.type == "TaskLost"
    assert vcpu.used(ACCOUNT_SCOPE) == 0 and vcpu.reservations() == {}
