"""The ecs target (container jobs) on moto's ECS: RunTask with the run's size, startedBy and tags;
exit 0 succeeds, any other code fails with ExitCode, no exit code is a lost task, past its timeout
the task is stopped with Timeout; a takeover adopts the attempt's task instead of starting a second.
moto runs no container: the test drives the task's state (its state manager set to manual)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.ecs.models import ecs_backends
from moto.moto_api import state_manager

from jobsched.adapters.targets.ecs import EcsPlace, EcsTaskRunner, image_family, started_by
from jobsched.domain.compute import Resources
from jobsched.domain.logs import task_id, task_stream
from jobsched.domain.targets import TargetFailed, parse_target
from jobsched.ports import FakeClock
from tests.conftest import T0
from tests.support import run_envelope

ACCOUNT = "123456789012"
REGION = "us-east-1"
RUN_ID = "job_01m8zhesy6bj7zncxmyxbf1xq8-1796043600000"
SIZE = Resources(cpu=1024, memory_mib=2048)


@pytest.fixture
def ecs() -> Iterator[tuple[Any, EcsPlace]]:
    with mock_aws():
        state_manager.set_transition(
            model_name="ecs::task", transition={"progression": "manual", "times": 10**6}
        )
        ec2 = boto3.client("ec2", region_name=REGION)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # moto's ENI needs it
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        group = ec2.create_security_group(GroupName="tasks", Description="tasks", VpcId=vpc)["GroupId"]
        client = boto3.client("ecs", region_name=REGION)
        client.create_cluster(clusterName="jobsched")
        yield client, EcsPlace(cluster="jobsched", subnets=(subnet,), security_groups=(group,))
        state_manager.unset_transition("ecs::task")


def envelope(attempt: int = 1) -> dict[str, Any]:
    return run_envelope(RUN_ID, attempt)


class Ctx:
    cancelled = False

    def __init__(self) -> None:
        self.beats = 0
        self.tasks: list[str] = []

    def heartbeat(self, progress: str | None = None) -> None:
        self.beats += 1

    def note_task(self, task_arn: str) -> None:
        self.tasks.append(task_arn)


def runner(
    client: Any, place: EcsPlace, clock: FakeClock, on_poll: Any, worker_task: bool = False,
    **spec: Any,
) -> EcsTaskRunner:
    target = parse_target({"type": "ecs", **spec})

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        on_poll()

    return EcsTaskRunner(
        target,  # type: ignore[arg-type]
        client=client,
        place=place,
        resources=SIZE,
        timeout_seconds=60,
        poll_seconds=5,
        clock=clock,
        sleep=sleep,
        worker_task=worker_task,
    )


def moto_tasks() -> dict[str, Any]:
    return dict(ecs_backends[ACCOUNT][REGION].tasks.get("jobsched", {}))


def stop_all(exit_code: int | None) -> None:
    for task in moto_tasks().values():  # as a task that ends: ECS sets both statuses
        task.status = task.desired_status = "STOPPED"
        task.containers[0].exitCode = exit_code


def invoke(r: EcsTaskRunner, attempt: int = 1, ctx: Ctx | None = None) -> Any:
    return r.invoke(envelope(attempt), ctx or Ctx())  # type: ignore[arg-type]


def test_exit_0_succeeds_and_the_task_has_the_runs_size_started_by_and_tags(
    ecs: tuple[Any, EcsPlace],
) -> None:
    client, place = ecs
    clock = FakeClock(T0)
    r = runner(client, place, clock, lambda: stop_all(0), image="busybox:1", command=["echo", "hi"])
    ctx = Ctx()
    result = invoke(r, ctx=ctx)
    assert result["exit_code"] == 0
    assert ctx.tasks == [result["task_arn"]]  # noted on the run: where its output is
    [task] = client.describe_tasks(cluster="jobsched", tasks=[result["task_arn"]], include=["TAGS"])["tasks"]
    assert task["startedBy"] == started_by(RUN_ID) and len(task["startedBy"]) <= 36
    tags = {t["key"]: t["value"] for t in task["tags"]}
    assert tags["jobsched:run_id"] == RUN_ID and tags["jobsched:attempt"] == "1"
    assert task["overrides"]["cpu"] == "1024" and task["overrides"]["memory"] == "2048"
    [override] = task["overrides"]["containerOverrides"]
    assert override["command"] == ["echo", "hi"]
    env = {e["name"]: e["value"] for e in override["environment"]}
    assert env["JOBSCHED_RUN_ID"] == RUN_ID and env["JOBSCHED_PAYLOAD"] == '{"n":1}'
    # the image got a task definition of its own family, Fargate, awsvpc
    described = client.describe_task_definition(taskDefinition=image_family("busybox:1"))["taskDefinition"]
    assert described["requiresCompatibilities"] == ["FARGATE"] and described["networkMode"] == "awsvpc"


def test_another_exit_code_fails_the_attempt_with_exit_code(ecs: tuple[Any, EcsPlace]) -> None:
    client, place = ecs
    r = runner(client, place, FakeClock(T0), lambda: stop_all(3), image="busybox:1")
    with pytest.raises(TargetFailed) as failed:
        invoke(r)
    assert failed.value.error_type == "ExitCode" and "exit code 3" in str(failed.value)


def test_a_task_stopped_with_no_exit_code_is_a_lost_task(ecs: tuple[Any, EcsPlace]) -> None:
    client, place = ecs
    r = runner(client, place, FakeClock(T0), lambda: stop_all(None), image="busybox:1")
    with pytest.raises(TargetFailed) as failed:
        invoke(r)
    assert failed.value.error_type == "TaskLost"


def test_past_its_timeout_the_task_is_stopped_with_timeout(ecs: tuple[Any, EcsPlace]) -> None:
    client, place = ecs
    r = runner(client, place, FakeClock(T0), lambda: None, image="busybox:1")  # it never ends
    with pytest.raises(TargetFailed) as failed:
        invoke(r)
    assert failed.value.error_type == "Timeout"
    [task] = moto_tasks().values()
    assert task.last_status == "STOPPED" and "jobsched: over 60 s" in task.stopped_reason


def test_a_takeover_adopts_the_attempts_task_and_a_retry_starts_its_own(ecs: tuple[Any, EcsPlace]) -> None:
    client, place = ecs
    clock = FakeClock(T0)
    # Given attempt 1's task started by a worker that died (it runs on)
    first = runner(client, place, clock, lambda: None, image="busybox:1")
    first_arn = first._start(envelope(1))
    # When the redelivery's worker takes attempt 1 over, it follows that task: no second one
    again = runner(client, place, clock, lambda: stop_all(0), image="busybox:1")
    ctx = Ctx()
    assert invoke(again, 1, ctx)["task_arn"] == first_arn and len(moto_tasks()) == 1
    assert ctx.tasks == [first_arn]  # the adopter notes it too (its dead worker may not have)
    # And attempt 2 (a retry: attempt 1's task has stopped) starts a task of its own
    retry = runner(client, place, clock, lambda: stop_all(0), image="busybox:1")
    assert invoke(retry, 2)["task_arn"] != first_arn and len(moto_tasks()) == 2


def test_a_takeover_as_the_next_attempt_follows_the_dead_workers_running_task(
    ecs: tuple[Any, EcsPlace],
) -> None:
    client, place = ecs
    clock = FakeClock(T0)
    # Given attempt 1's task, still running, started by a worker that died
    first_arn = runner(client, place, clock, lambda: None, image="busybox:1")._start(envelope(1))
    # When the run path takes the run over as attempt 2 (a lapsed lease: attempt + 1)
    takeover = runner(client, place, clock, lambda: stop_all(0), image="busybox:1")
    ctx = Ctx()
    # Then it follows attempt 1's container to its end instead of starting a second beside it
    assert invoke(takeover, 2, ctx)["task_arn"] == first_arn and len(moto_tasks()) == 1
    assert ctx.tasks == [first_arn]


def test_the_ecs_workers_own_task_is_never_adopted_by_a_later_attempt(ecs: tuple[Any, EcsPlace]) -> None:
    client, place = ecs
    clock = FakeClock(T0)
    # Given attempt 1's task still running; its runner records under the lease a takeover moved
    runner(client, place, clock, lambda: None, image="busybox:1")._start(envelope(1))
    # When attempt 2 runs with earlier attempts' tasks not to be adopted (the worker's own tasks)
    own = runner(client, place, clock, lambda: stop_all(0), image="busybox:1", worker_task=True)
    # Then it starts a task of its own
    invoke(own, 2)
    assert len(moto_tasks()) == 2


def test_a_task_definition_arn_runs_its_first_container_with_the_overrides(ecs: tuple[Any, EcsPlace]) -> None:
    client, place = ecs
    arn = client.register_task_definition(
        family="report",
        requiresCompatibilities=["FARGATE"],
        networkMode="awsvpc",
        cpu="256",
        memory="512",
        containerDefinitions=[{"name": "app", "image": "example/report:7", "memoryReservation": 128}],
    )["taskDefinition"]["taskDefinitionArn"]
    r = runner(client, place, FakeClock(T0), lambda: stop_all(0), task_definition_arn=arn)
    result = invoke(r)
    [task] = client.describe_tasks(cluster="jobsched", tasks=[result["task_arn"]])["tasks"]
    assert task["taskDefinitionArn"] == arn
    assert task["overrides"]["containerOverrides"][0]["name"] == "app"


def test_an_images_task_definition_sends_its_output_to_the_container_log_group(
    ecs: tuple[Any, EcsPlace],
) -> None:
    client, place = ecs
    # Given a task definition registered for the image before logs were configured
    client.register_task_definition(
        family=image_family("busybox:1"),
        requiresCompatibilities=["FARGATE"],
        networkMode="awsvpc",
        cpu="256",
        memory="512",
        containerDefinitions=[{"name": "main", "image": "busybox:1", "memoryReservation": 128}],
    )
    # When a run of the image starts, with the stack's container log group in its place
    logged = dataclasses.replace(place, log_group="jobsched-containers")
    result = invoke(runner(client, logged, FakeClock(T0), lambda: stop_all(0), image="busybox:1"))
    # Then its task runs a new revision whose container logs with awslogs there, under "run/",
    # so the task's stream is run/main/<task id>
    [task] = client.describe_tasks(cluster="jobsched", tasks=[result["task_arn"]])["tasks"]
    described = client.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
    assert described["revision"] == 2
    assert described["containerDefinitions"][0]["logConfiguration"] == {
        "logDriver": "awslogs",
        "options": {
            "awslogs-group": "jobsched-containers",
            "awslogs-region": REGION,
            "awslogs-stream-prefix": "run",
        },
    }
    assert task_stream(result["task_arn"]) == f"run/main/{task_id(result['task_arn'])}"
    # And the next run reuses that revision
    again = invoke(runner(client, logged, FakeClock(T0), lambda: stop_all(0), image="busybox:1"), 2)
    [task] = client.describe_tasks(cluster="jobsched", tasks=[again["task_arn"]])["tasks"]
    assert task["taskDefinitionArn"] == described["taskDefinitionArn"]
