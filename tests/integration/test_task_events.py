"""Container tasks' stop events on moto: a container job's run goes through the real run path and the
real EcsTaskRunner (RunTask on moto's ECS, the run row RUNNING in moto's DynamoDB); the task stops,
the recorded-shape event (tests/events) is fed with that task's ARN before the worker's next poll,
and the run ends as the event recorded it, settled once. moto emits no ECS events and runs no
container: the test plays both (docs/design.md, Facts about the local emulation)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.ecs.models import ecs_backends
from moto.moto_api import state_manager

from jobsched.adapters.targets.ecs import EcsPlace, EcsTaskRunner
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import EcsTarget, TargetSpec
from jobsched.handlers import registry
from jobsched.local import lambdas
from jobsched.ports import FakeClock, Target
from jobsched.services.run import Delivery, Outcome
from jobsched.services.task_events import TaskEventOutcome, TaskStopEvents
from jobsched.settings import Settings
from jobsched.wiring import Services, build
from tests.conftest import T0

EVENTS = Path(__file__).resolve().parents[1] / "events"
ACCOUNT, REGION = "123456789012", "us-east-1"
SF = T0 + timedelta(seconds=5)


@pytest.fixture
def place(aws: Settings) -> Iterator[EcsPlace]:
    """moto's ECS: a cluster and a subnet; tasks move only when the test says (state manager: manual)."""
    state_manager.set_transition(model_name="ecs::task", transition={"progression": "manual", "times": 10**6})
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="tasks", Description="tasks", VpcId=vpc)["GroupId"]
    boto3.client("ecs", region_name=REGION).create_cluster(clusterName="jobsched")
    yield EcsPlace(cluster="jobsched", subnets=(subnet,), security_groups=(group,))
    state_manager.unset_transition("ecs::task")


@dataclass
class StopsWithAnEvent:
    """The composition root's TargetSource for ecs specs: the real EcsTaskRunner on moto, whose first
    poll finds the task running; then the task stops with `exit_code`, and ECS's event for it (the
    recorded shape `event`, with this task's ARN) reaches TaskStopEvents before the next poll."""

    place: EcsPlace
    clock: FakeClock
    stops: TaskStopEvents | None = None
    exit_code: int = 0
    event: str = "exit0"
    seen: list[TaskEventOutcome] = field(default_factory=list)
    # Wait, after the events, for the failure workflow they started to end (its DeadLetter applied)
    # before the worker's next poll: on AWS the two race.
    workflow_first: bool = False

    def for_spec(
        self, spec: TargetSpec, *, timeout_seconds: float | None = None, resources: Any = None
    ) -> Target:
        assert isinstance(spec, EcsTarget)
        return EcsTaskRunner(
            spec,
            client=boto3.client("ecs", region_name=REGION),
            place=self.place,
            resources=resources,
            timeout_seconds=timeout_seconds,
            clock=self.clock,
            sleep=self._between_polls,
        )

    def check(self, spec: TargetSpec) -> None:
        return None

    def _between_polls(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if self.seen:
            return
        (task,) = ecs_backends[ACCOUNT][REGION].tasks["jobsched"].values()
        task.status = "STOPPED"
        task.containers[0].exitCode = self.exit_code
        assert self.stops is not None
        # ECS's event, twice (EventBridge delivers at least once)
        detail = self._event(task.task_arn)["detail"]
        self.seen += [self.stops.stopped(detail), self.stops.stopped(detail)]
        if self.workflow_first:
            _wait_for_failure_workflows(self.stops.failures.settings.failure_workflow_arn)

    def _event(self, task_arn: str) -> dict[str, Any]:
        ecs = boto3.client("ecs", region_name=REGION)
        (described,) = ecs.describe_tasks(cluster="jobsched", tasks=[task_arn], include=["TAGS"])["tasks"]
        tags = {t["key"]: t["value"] for t in described["tags"]}
        text = (EVENTS / f"ecs_task_stopped_{self.event}.json").read_text()
        for placeholder, value in (
            ("__TASK_ARN__", task_arn),
            ("__CLUSTER_ARN__", described["clusterArn"]),
            ("__STARTED_BY__", described["startedBy"]),
            ("__RUN_ID__", tags["jobsched:run_id"]),
            ("__JOB_ID__", tags["jobsched:job_id"]),
            ("__ATTEMPT__", tags["jobsched:attempt"]),
        ):
            text = text.replace(placeholder, value)
        return dict(json.loads(text))


@pytest.fixture
def world(aws: Settings, clock: FakeClock, place: EcsPlace) -> tuple[Services, StopsWithAnEvent]:
    settings = aws.model_copy(update={"worker_lane": "ecs"})  # the ECS worker's services
    services = build(
        settings,
        dynamodb=boto3.client("dynamodb"),
        sqs=boto3.client("sqs"),
        stepfunctions=boto3.client("stepfunctions"),
        clock=clock,
        handlers=registry.copy(),
    )
    services.worker.sleep = lambda seconds: clock.advance(seconds)
    source = StopsWithAnEvent(place=place, clock=clock)
    source.stops = TaskStopEvents(
        jobs=services.jobs, runs=services.runs, failures=services.failures, dag=services.dag, clock=clock
    )
    services.worker.targets = source  # type: ignore[assignment]
    return services, source


def run_container_job(services: Services, clock: FakeClock) -> tuple[str, Outcome]:
    request = CreateJobRequest.model_validate(
        {
            "type": "one_off",
            "run_at": SF,
            "target": {"type": "ecs", "image": "busybox:1.36", "command": ["sh", "-c", "exit 3"]},
            "timeout_seconds": 600,
            "max_attempts": 1,
        }
    )
    job_id = services.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    clock.advance(5)
    body = RunMessage(job_id=job_id, scheduled_for=times.stored(SF), guard=True).model_dump_json()
    return job_id, services.worker.process(Delivery("m-1", "r-1", body))


def _wait_for_failure_workflows(arn: str, timeout: float = 30) -> None:
    sfn = boto3.client("stepfunctions")
    deadline = time.monotonic() + timeout
    while any(e["status"] == "RUNNING" for e in sfn.list_executions(stateMachineArn=arn)["executions"]):
        assert time.monotonic() < deadline, "the failure workflow did not end"
        time.sleep(0.05)


def failure_executions(services: Services) -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    return list(sfn.list_executions(stateMachineArn=services.settings.failure_workflow_arn)["executions"])


def test_exit_0_the_event_records_the_run_succeeded_and_the_one_off_completed(
    world: tuple[Services, StopsWithAnEvent], clock: FakeClock
) -> None:
    services, source = world
    # Given a container job whose task exits 0, its event arriving before the worker's next poll
    source.exit_code, source.event = 0, "exit0"
    # When the ECS worker runs it
    job_id, outcome = run_container_job(services, clock)
    # Then the event recorded it, its duplicate changed nothing, and the worker settled nothing twice
    assert source.seen == [TaskEventOutcome.SUCCEEDED, TaskEventOutcome.NOT_RUNNING]
    assert outcome == Outcome.SUCCEEDED
    row = services.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED and len(row.attempts) == 1
    assert row.result is not None and row.result["exit_code"] == 0
    job = services.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED
    assert failure_executions(services) == []


def test_exit_3_the_event_records_exit_code_and_the_failure_is_handed_over_once(
    world: tuple[Services, StopsWithAnEvent], clock: FakeClock
) -> None:
    services, source = world
    # Given a container job whose task exits 3
    source.exit_code, source.event = 3, "exit3"
    # When the ECS worker runs it
    job_id, outcome = run_container_job(services, clock)
    # Then the event recorded FAILED(ExitCode), once
    assert source.seen == [TaskEventOutcome.FAILED, TaskEventOutcome.NOT_RUNNING]
    assert outcome == Outcome.FAILED
    row = services.runs.get(job_id, SF)
    assert row is not None and len(row.attempts) == 1
    assert row.error is not None and row.error.type == "ExitCode" and "exit code 3" in row.error.message
    # And the failure was handed to the failure workflow once (by the event; the worker's hand-over
    # of the same attempt started nothing)
    assert len(failure_executions(services)) == 1


def test_a_failure_the_event_recorded_and_its_workflow_dead_lettered_first_is_the_workers_own(
    world: tuple[Services, StopsWithAnEvent], clock: FakeClock
) -> None:
    services, source = world
    # Given a container job whose task exits 3, its event recorded FAILED(ExitCode) and its failure
    # workflow dead-lettered it (max_attempts 1) before the worker's next poll
    source.exit_code, source.event, source.workflow_first = 3, "exit3", True
    # When the ECS worker polls the stopped task and records its attempt
    job_id, outcome = run_container_job(services, clock)
    # Then the worker takes the record as its own attempt's (its lease's owner): FAILED, handed over
    # once. Before, it took the row it found for a lost lease and left the message to come back.
    assert outcome == Outcome.FAILED
    row = services.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.DEAD_LETTER and len(row.attempts) == 1
    assert len(failure_executions(services)) == 1


def test_the_entry_point_cold_starts_and_ignores_a_task_jobsched_did_not_start(
    aws: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the task_events function's environment, on moto
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    entry_point = lambdas.load("task_events")
    # When EventBridge delivers the stop of the ECS worker's own service task
    text = (EVENTS / "ecs_task_stopped_foreign.json").read_text()
    text = text.replace("__TASK_ARN__", "arn:aws:ecs:us-east-1:123456789012:task/jobsched/0a1b2c3d")
    text = text.replace("__CLUSTER_ARN__", "arn:aws:ecs:us-east-1:123456789012:cluster/jobsched")
    out = entry_point.lambda_handler(json.loads(text), lambdas.LambdaContext("task_events"))
    # Then it is ignored
    assert out == {"outcome": "foreign"}
