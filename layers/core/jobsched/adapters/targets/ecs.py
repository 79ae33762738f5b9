"""The ecs target (container jobs): one Fargate task per attempt, started and followed by the ECS worker.

    adopt: ListTasks startedBy=<run> (running and stopped) ──> one tagged with this attempt, or
        │ an earlier attempt's still meant to run (a takeover: attempt + 1 after its worker died)?
        │ follow it
        │ none (the usual case)
        v
    RunTask (FARGATE, cpu/memory overrides from the run's placed size, the command and environment,
        the envelope as JOBSCHED_* variables, startedBy=<run>, tags jobsched:run_id / attempt / ...)
        v
    ctx.note_task(arn): the task's ARN appended to the run row's ecs_tasks (adopted ones too: a
        worker that died between RunTask and its note leaves it to the adopter; noting is idempotent)
        v
    DescribeTasks every poll_seconds (ctx.heartbeat() between polls: the run's lease) until STOPPED:
        the container's exit code 0 ──> success {"task_arn", "exit_code": 0}
        any other code          ──> TargetFailed(ExitCode, "exit code N")
        no exit code, or gone   ──> TargetFailed(TaskLost): retried like a lost worker
        timeout_seconds passed  ──> StopTask, TargetFailed(Timeout)
        the run cancelled       ──> StopTask (SIGTERM), followed on: exit 0 succeeds, else
                                    TargetFailed(Cancelled), never retried (the worker's own task:
                                    not stopped, its handler sees ctx.cancelled)

Completion is tracked twice, and the first to record the attempt wins (a conditional write of the
attempt on the run row; the other finds it recorded and does nothing twice):
- by the worker that holds the run's lease, as the stepfunctions target with wait does: the lease is
  the durable part (a worker that dies stops heartbeating, the message returns, and the next
  attempt's worker finds the task by its startedBy and attempt tag and follows it instead of
  starting a second); its price is an ECS worker thread per running container (an idle poll is
  one DescribeTasks per poll_seconds). It is what the local stack uses.
- on AWS, by ECS's "ECS Task State Change" event for the STOPPED task (jobsched.services.task_events),
  which records the outcome even when no worker follows the task.
Both map the stopped task the same way: jobsched.domain.ecs_tasks.task_ended.

Where a task's output goes: a task definition jobsched registers for an image sends its container's
stdout and stderr to CloudWatch Logs (the awslogs driver) in the stack's container log group
(EcsPlace.log_group), stream `run/main/<task id>` (domain.logs.task_stream). GET /api/runs/{id}/logs
reads it by the task ids the run's attempts noted (ctx.note_task, when their task started or was
adopted). A `task_definition_arn` is the caller's: its log configuration is theirs, and jobsched
reads no stream of it (the run's logs hold the worker's own lines).

startedBy holds at most 36 characters: the run id when it fits, else "js-" and a digest of it; the
full run id is the jobsched:run_id tag.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from jobsched.adapters.targets._aws import target_call
from jobsched.domain.compute import Resources
from jobsched.domain.ecs_tasks import CANCEL_STOP_REASON, TIMEOUT_STOP_PREFIX, task_ended
from jobsched.domain.ecs_tasks import TASK_LOST as TASK_LOST  # the local process runner's too
from jobsched.domain.ecs_tasks import started_by as started_by
from jobsched.domain.logs import CONTAINER_STREAM_PREFIX, IMAGE_CONTAINER
from jobsched.domain.targets import EcsTarget, TargetFailed
from jobsched.handlers import RunContext
from jobsched.ports import Clock, SystemClock

DEFAULT_TIMEOUT_SECONDS = 3600
MAX_ENVIRONMENT_BYTES = 8192  # RunTask's containerOverrides limit


def _before(tags: Mapping[str, Any], attempt: str) -> bool:
    """Whether a task's `jobsched:attempt` tag names an attempt before `attempt`."""
    tagged = str(tags.get("jobsched:attempt", ""))
    return tagged.isdigit() and attempt.isdigit() and int(tagged) < int(attempt)


def image_family(image: str) -> str:
    """The task definition family jobsched registers for an image (one per image)."""
    return "jobsched-" + hashlib.sha256(image.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EcsPlace:
    """Where container targets run: the cluster, its network, and the roles of image task definitions."""

    cluster: str
    subnets: tuple[str, ...]
    security_groups: tuple[str, ...] = ()
    execution_role_arn: str = ""
    assign_public_ip: bool = True  # the cluster's VPC has public subnets and no NAT (constructs/ecs.py)
    log_group: str = ""
    """Where image tasks' output goes (awslogs); "": nowhere (their task definitions log nothing)."""
    worker_family: str = ""
    """The ECS worker's own task definition family (TargetFactory.for_worker_task); "": none."""


class EcsTaskRunner:
    """jobsched.ports.Target for an ecs target spec (see the module docstring)."""

    def __init__(
        self,
        spec: EcsTarget,
        *,
        client: Any,
        place: EcsPlace,
        resources: Resources,
        timeout_seconds: float | None = None,
        poll_seconds: float = 5.0,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        worker_task: bool = False,
    ) -> None:
        self.spec = spec
        # True for the ECS worker's own task running a Python run (TargetFactory.for_worker_task).
        # It records its attempt under the lease it was started on, which a takeover has moved, so a
        # takeover runs a task of its own instead of adopting it; and its handler sees a cancel as
        # ctx.cancelled (cooperative, as every Python handler), so the task is not stopped for it.
        self._worker_task = worker_task
        self._ecs = client
        self._place = place
        self._resources = resources
        self._timeout = timeout_seconds or DEFAULT_TIMEOUT_SECONDS
        self._poll = poll_seconds
        self._clock = clock or SystemClock()
        self._sleep = sleep

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Start (or adopt) this attempt's task and follow it to its end (see the module docstring)."""
        run_id, attempt = str(envelope["run_id"]), str(envelope["attempt"])
        deadline = self._clock.now() + timedelta(seconds=self._timeout)
        task_arn = self._adopt(run_id, attempt) or self._start(envelope)
        # Noted on the run (its attempt's task: where its output is) once the task exists; a worker
        # that died between RunTask and this note leaves it to the adopter, which notes it again
        # (noting is idempotent).
        ctx.note_task(task_arn)
        cancelling = False
        while True:
            with target_call("ECS DescribeTasks"):
                tasks = self._ecs.describe_tasks(cluster=self._place.cluster, tasks=[task_arn]).get(
                    "tasks", []
                )
            if not tasks:
                raise TargetFailed(f"{task_arn}: the task vanished", error_type=TASK_LOST)
            task = tasks[0]
            if task.get("lastStatus") == "STOPPED":
                return task_ended(task_arn, task, own_task=self._worker_task)
            if self._clock.now() >= deadline:
                self._stop_task(task_arn, f"{TIMEOUT_STOP_PREFIX}{self._timeout:g} s")
                raise TargetFailed(f"{task_arn}: stopped after {self._timeout:g} s", error_type="Timeout")
            ctx.heartbeat()
            if not self._worker_task and not cancelling and ctx.cancelled:
                # The run's cancel: the container gets SIGTERM (its stopTimeout to finish), and the
                # task's end, read as task_ended reads it, is the attempt's: Cancelled unless it exits 0.
                self._stop_task(task_arn, CANCEL_STOP_REASON)
                cancelling = True
            self._sleep(self._poll)

    def _stop_task(self, task_arn: str, reason: str) -> None:
        with target_call("ECS StopTask"):
            self._ecs.stop_task(cluster=self._place.cluster, task=task_arn, reason=reason)

    def _adopt(self, run_id: str, attempt: str) -> str | None:
        """This attempt's task, if a worker that died started it already; else an earlier attempt's
        task still meant to run (desiredStatus RUNNING, not STOPPED yet). The run path takes a dead
        worker's run over as attempt + 1, and its container runs on: following it keeps one
        container per run, where starting a second would run the two side by side. A retry never
        finds one: an attempt is recorded failed only once its task stopped, or was told to stop
        (Timeout: StopTask)."""
        arns: list[str] = []
        for status in ("RUNNING", "STOPPED"):
            with target_call("ECS ListTasks"):
                out = self._ecs.list_tasks(
                    cluster=self._place.cluster, startedBy=started_by(run_id), desiredStatus=status
                )
            arns += out.get("taskArns", [])
        if not arns:
            return None
        with target_call("ECS DescribeTasks"):
            tasks = self._ecs.describe_tasks(cluster=self._place.cluster, tasks=arns, include=["TAGS"])
        earlier: str | None = None
        for task in tasks.get("tasks", []):
            tags = {t.get("key"): t.get("value") for t in task.get("tags") or []}
            if tags.get("jobsched:run_id") != run_id:
                continue
            if tags.get("jobsched:attempt") == attempt:
                return str(task["taskArn"])
            running = task.get("desiredStatus") == "RUNNING" and task.get("lastStatus") != "STOPPED"
            if not self._worker_task and running and _before(tags, attempt):
                earlier = str(task["taskArn"])
        return earlier

    def _start(self, envelope: Mapping[str, Any]) -> str:
        definition, container = self._definition()
        override = container_override(self.spec, envelope, container)
        run_id = str(envelope["run_id"])
        network: dict[str, Any] = {"subnets": list(self._place.subnets)}
        if self._place.security_groups:
            network["securityGroups"] = list(self._place.security_groups)
        network["assignPublicIp"] = "ENABLED" if self._place.assign_public_ip else "DISABLED"
        with target_call("ECS RunTask"):
            out = self._ecs.run_task(
                cluster=self._place.cluster,
                taskDefinition=definition,
                launchType="FARGATE",
                count=1,
                startedBy=started_by(run_id),
                tags=[
                    {"key": "jobsched:run_id", "value": run_id},
                    {"key": "jobsched:attempt", "value": str(envelope["attempt"])},
                    {"key": "jobsched:job_id", "value": str(envelope["job_id"])},
                    {"key": "jobsched:tenant", "value": str(envelope["tenant"])},
                ],
                overrides={
                    "cpu": str(self._resources.cpu),
                    "memory": str(self._resources.memory_mib),
                    "containerOverrides": [override],
                },
                networkConfiguration={"awsvpcConfiguration": network},
            )
        tasks = out.get("tasks") or []
        if not tasks:
            failures = out.get("failures") or [{}]
            reason = failures[0].get("reason") or "no task started"
            raise TargetFailed(f"ECS RunTask: {reason}", error_type="RunTaskFailed")
        return str(tasks[0]["taskArn"])

    def _definition(self) -> tuple[str, str]:
        """(the task definition to run, its container's name): the caller's, or one for the image."""
        if self.spec.task_definition_arn is not None:
            with target_call("ECS DescribeTaskDefinition"):
                described = self._ecs.describe_task_definition(taskDefinition=self.spec.task_definition_arn)
            return self.spec.task_definition_arn, str(
                described["taskDefinition"]["containerDefinitions"][0]["name"]
            )
        assert self.spec.image is not None
        family = image_family(self.spec.image)
        log_config = self._log_configuration()
        try:
            with target_call("ECS DescribeTaskDefinition"):
                described = self._ecs.describe_task_definition(taskDefinition=family)
            definition = described["taskDefinition"]
            # A revision registered before its logs were configured (or for another group) is
            # replaced by one that has them: its tasks' output would be lost.
            if definition["containerDefinitions"][0].get("logConfiguration") == log_config:
                return str(definition["taskDefinitionArn"]), IMAGE_CONTAINER
        except TargetFailed:
            pass  # none yet: register it (a racing worker registers a second revision: harmless)
        registration: dict[str, Any] = {
            "family": family,
            "requiresCompatibilities": ["FARGATE"],
            "networkMode": "awsvpc",
            "cpu": "256",
            "memory": "512",  # every run overrides both with its placed size
            # A soft reservation only: a hard container limit would cap the task's memory override.
            "containerDefinitions": [
                {
                    "name": IMAGE_CONTAINER,
                    "image": self.spec.image,
                    "essential": True,
                    "memoryReservation": 128,
                }
            ],
        }
        if log_config is not None:
            registration["containerDefinitions"][0]["logConfiguration"] = log_config
        if self._place.execution_role_arn:
            registration["executionRoleArn"] = self._place.execution_role_arn
        with target_call("ECS RegisterTaskDefinition"):
            out = self._ecs.register_task_definition(**registration)
        return str(out["taskDefinition"]["taskDefinitionArn"]), IMAGE_CONTAINER

    def _log_configuration(self) -> dict[str, Any] | None:
        """awslogs into the place's log group, streams `run/main/<task id>`; None: no group."""
        if not self._place.log_group:
            return None
        return {
            "logDriver": "awslogs",
            "options": {
                "awslogs-group": self._place.log_group,
                "awslogs-region": str(self._ecs.meta.region_name),
                "awslogs-stream-prefix": CONTAINER_STREAM_PREFIX,
            },
        }


def container_override(spec: EcsTarget, envelope: Mapping[str, Any], container: str) -> dict[str, Any]:
    """RunTask's containerOverrides entry for a run: the target's command and environment, and the
    envelope as JOBSCHED_* variables; TargetFailed(PayloadTooLarge) past RunTask's 8 KiB."""
    environment = [{"name": k, "value": v} for k, v in spec.environment.items()]
    environment += [{"name": k, "value": v} for k, v in envelope_environment(envelope).items()]
    override: dict[str, Any] = {"name": container, "environment": environment}
    if spec.command:
        override["command"] = list(spec.command)
    if len(json.dumps(override).encode()) > MAX_ENVIRONMENT_BYTES:
        raise TargetFailed(
            f"the container overrides (environment, command, payload) pass {MAX_ENVIRONMENT_BYTES} bytes",
            error_type="PayloadTooLarge",
        )
    return override


def envelope_environment(envelope: Mapping[str, Any]) -> dict[str, str]:
    """The run's envelope as the container's JOBSCHED_* variables (the payload as JSON)."""
    return {
        "JOBSCHED_JOB_ID": str(envelope["job_id"]),
        "JOBSCHED_RUN_ID": str(envelope["run_id"]),
        "JOBSCHED_TENANT": str(envelope["tenant"]),
        "JOBSCHED_SCHEDULED_FOR": str(envelope["scheduled_for"]),
        "JOBSCHED_ATTEMPT": str(envelope["attempt"]),
        "JOBSCHED_EFFECT_KEY": str(envelope["effect_key"]),
        "JOBSCHED_PAYLOAD": json.dumps(envelope.get("payload") or {}, separators=(",", ":")),
    }
