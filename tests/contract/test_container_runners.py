"""The container target's lifecycle (ports.Target for an ecs target), the same wherever it runs: on
Fargate (EcsTaskRunner on moto, the task's end driven by the test: moto runs no container) and on the
local stack (LocalProcessRunner: the command as a real process, no Docker).

Exit code 0 succeeds; any other code fails the attempt with ExitCode and the code in the message; an
end with no exit code is TaskLost; past its timeout the task is stopped and the attempt fails with
Timeout; the container gets the target's environment and the envelope as JOBSCHED_* variables.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.ecs.models import ecs_backends
from moto.moto_api import state_manager

from jobsched.adapters.targets.ecs import EcsPlace, EcsTaskRunner
from jobsched.adapters.targets.local_process import LocalProcesses, LocalProcessRunner, container_lines
from jobsched.domain.compute import Resources
from jobsched.domain.targets import TargetFailed, final_error_type, parse_target
from jobsched.logcontext import run_scope
from jobsched.ports import FakeClock, Target
from tests.conftest import T0

RUN_ID = "job_01m8zhesy6bj7zncxmyxbf1xq8-1796043600000"
SIZE = Resources(cpu=512, memory_mib=1024)
REGION = "us-east-1"
ENVELOPE = {
    "job_id": RUN_ID.split("-")[0],
    "run_id": RUN_ID,
    "tenant": "t",
    "scheduled_for": "2026-11-30T12:00:00.000Z",
    "attempt": 1,
    "effect_key": RUN_ID,
    "payload": {"n": 1},
}
ENDS = ("exit 0", "exit 3", "no exit code", "hangs")


class Ctx:
    cancelled = False

    def heartbeat(self, progress: Any = None) -> None:
        pass

    def note_task(self, task_arn: str) -> None:
        pass


class Runners:
    """How a backend makes a runner whose container ends as `end` says, and what it saw."""

    def runner(self, end: str) -> Target:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The environment the last container was given."""
        raise NotImplementedError

    def still_running(self) -> int:
        """How many containers still run."""
        raise NotImplementedError


class Fargate(Runners):
    def __init__(self) -> None:
        ec2 = boto3.client("ec2", region_name=REGION)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        group = ec2.create_security_group(GroupName="tasks", Description="tasks", VpcId=vpc)["GroupId"]
        self.client = boto3.client("ecs", region_name=REGION)
        self.client.create_cluster(clusterName="jobsched")
        self.place = EcsPlace(cluster="jobsched", subnets=(subnet,), security_groups=(group,))

    def tasks(self) -> list[Any]:
        return list(ecs_backends["123456789012"][REGION].tasks.get("jobsched", {}).values())

    def runner(self, end: str) -> Target:
        clock = FakeClock(T0)

        def sleep(seconds: float) -> None:  # each poll: the container ends as `end` says
            clock.advance(seconds)
            for task in self.tasks():
                if end == "hangs" and task.desired_status == "STOPPED":
                    task.containers[0].exitCode = 143  # StopTask's SIGTERM ended it (128 + 15)
                if end == "hangs" or task.last_status == "STOPPED":
                    continue
                task.last_status = "STOPPED"
                task.containers[0].exitCode = {"exit 0": 0, "exit 3": 3}.get(end)

        spec = parse_target(
            {"type": "ecs", "image": "busybox:1.36", "command": ["run"], "environment": {"A": "1"}}
        )
        return EcsTaskRunner(
            spec,  # type: ignore[arg-type]
            client=self.client,
            place=self.place,
            resources=SIZE,
            timeout_seconds=60,
            poll_seconds=5,
            clock=clock,
            sleep=sleep,
        )

    def environment(self) -> dict[str, str]:
        [override] = self.tasks()[-1].overrides["containerOverrides"]
        return {e["name"]: e["value"] for e in override["environment"]}

    def still_running(self) -> int:
        return sum(1 for t in self.tasks() if t.last_status != "STOPPED")


class Local(Runners):
    COMMANDS = {
        "exit 0": "import json, os; print(json.dumps(dict(os.environ)))",
        "exit 3": "raise SystemExit(3)",
        "no exit code": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        "hangs": "import time; time.sleep(30)",
    }

    def __init__(self) -> None:
        self.processes = LocalProcesses()
        self.lines: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: self.lines.append(record.getMessage())  # type: ignore[method-assign]
        self.handler = handler

    def runner(self, end: str) -> Target:
        spec = parse_target(
            {
                "type": "ecs",
                "image": "busybox:1.36",
                "command": [sys.executable, "-c", self.COMMANDS[end]],
                "environment": {"A": "1"},
            }
        )
        return LocalProcessRunner(
            spec,  # type: ignore[arg-type]
            resources=SIZE,
            timeout_seconds=1,
            poll_seconds=0.2,
            stop_grace_seconds=0.5,
            processes=self.processes,
        )

    def environment(self) -> dict[str, str]:
        printed: dict[str, str] = json.loads(self.lines[-1])
        return printed

    def still_running(self) -> int:
        return self.processes.running()


@pytest.fixture(params=["fargate", "local"])
def runners(request: pytest.FixtureRequest) -> Iterator[Runners]:
    if request.param == "local":
        local = Local()
        container_lines.addHandler(local.handler)
        previous = container_lines.level
        container_lines.setLevel(logging.INFO)
        try:
            yield local
        finally:
            container_lines.removeHandler(local.handler)
            container_lines.setLevel(previous)
        return
    with mock_aws():
        state_manager.set_transition(
            model_name="ecs::task", transition={"progression": "manual", "times": 10**6}
        )
        try:
            yield Fargate()
        finally:
            state_manager.unset_transition("ecs::task")


class CancelledCtx(Ctx):
    """A run whose cancel (POST /api/runs/{id}/cancel) its heartbeat has read."""

    cancelled = True


def invoke(target: Target, ctx: Ctx | None = None) -> Any:
    with run_scope(job_id=RUN_ID.split("-")[0], run_id=RUN_ID, tenant="t"):
        return target.invoke(ENVELOPE, ctx or Ctx())  # type: ignore[arg-type]


def test_exit_0_succeeds_with_the_targets_environment_and_the_envelope(runners: Runners) -> None:
    result = invoke(runners.runner("exit 0"))
    assert isinstance(result, dict) and result["exit_code"] == 0
    env = runners.environment()
    assert (
        env["A"] == "1"
        and env["JOBSCHED_RUN_ID"] == RUN_ID
        and json.loads(env["JOBSCHED_PAYLOAD"]) == {"n": 1}
    )


@pytest.mark.parametrize(
    ("end", "error_type", "says"),
    [
        ("exit 3", "ExitCode", "exit code 3"),
        ("no exit code", "TaskLost", "no exit code"),
        ("hangs", "Timeout", "stopped after"),
    ],
)
def test_an_end_other_than_exit_0_fails_the_attempt_with_its_error_type(
    runners: Runners, end: str, error_type: str, says: str
) -> None:
    with pytest.raises(TargetFailed) as failed:
        invoke(runners.runner(end))
    assert failed.value.error_type == error_type and says in str(failed.value)
    # And nothing is left running (a timed-out task was stopped)
    assert runners.still_running() == 0


def test_a_cancelled_runs_container_is_stopped_and_the_attempt_is_cancelled_never_retried(
    runners: Runners,
) -> None:
    # Given a container that would run past any wait, whose run is cancelled while it runs
    # When the runner follows it
    with pytest.raises(TargetFailed) as failed:
        invoke(runners.runner("hangs"), CancelledCtx())
    # Then the container was stopped for it (StopTask; SIGTERM locally), and the attempt failed with
    # Cancelled, an error type no retry policy retries
    assert failed.value.error_type == "Cancelled" and "cancel" in str(failed.value)
    assert final_error_type(failed.value.error_type)
    assert runners.still_running() == 0
