"""A container target's Fargate task, as jobsched reads it: who started it, and how it ended.

One reading for both ways a task's end is learnt: the ECS worker's DescribeTasks polls
(jobsched.adapters.targets.ecs) and ECS's "ECS Task State Change" events
(jobsched.services.task_events). Both read the same task shape: an event's `detail` is the task
as DescribeTasks answers it, less its tags.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobsched.domain.targets import CANCELLED, TargetFailed

STARTED_BY_CHARS = 36
TASK_LOST = "TaskLost"
EXIT_CODE = "ExitCode"
# The exit code of a Python run's own task (Worker.run_in_own_task) whose handler ran and whose record
# of it failed (the store failed through every try): the attempt may have had its effect, so its
# readers record it TaskLost (an unknown outcome: retried only for an idempotent job), not ExitCode.
RAN_UNRECORDED = 4
MAX_REASON_CHARS = 2000
EVENT_SOURCE = "aws.ecs"
EVENT_DETAIL_TYPE = "ECS Task State Change"
# StopTask's reasons, which ECS keeps as the task's stoppedReason, so both readers (the worker's
# poll and the stop event) tell a task jobsched stopped from one that failed by itself.
CANCEL_STOP_REASON = "jobsched: cancelled"
TIMEOUT_STOP_PREFIX = "jobsched: over "
SERVICE_STARTED_BY_PREFIX = "ecs-svc/"
"""What ECS puts in startedBy for a service's tasks (the ECS worker's own): never a container target's."""


def started_by(run_id: str) -> str:
    """RunTask's startedBy for a run: the run id when it fits in 36 characters, else a digest of it."""
    if len(run_id) <= STARTED_BY_CHARS:
        return run_id
    return "js-" + hashlib.sha256(run_id.encode()).hexdigest()[: STARTED_BY_CHARS - 3]


def task_ended(task_arn: str, task: Mapping[str, Any], *, own_task: bool = False) -> dict[str, Any]:
    """A STOPPED task's outcome: {"task_arn", "exit_code": 0} for its first container's exit code 0;
    TargetFailed(ExitCode, "exit code N") for any other code; TargetFailed(TaskLost) for none. A task
    jobsched stopped and that did not exit 0 failed for that: TargetFailed(Cancelled) after its run's
    cancel, TargetFailed(Timeout) past its timeout, whichever reader records it. A Python run's own
    task (`own_task`) that exits RAN_UNRECORDED is TaskLost too: its handler ran, unrecorded."""
    containers = list(task.get("containers") or [])
    code = containers[0].get("exitCode") if containers else None
    reason = str(task.get("stoppedReason") or "")
    if code is None or int(code) != 0:
        said = "no exit code" if code is None else f"exit code {int(code)}"
        if reason == CANCEL_STOP_REASON:
            raise TargetFailed(f"{task_arn}: stopped by its run's cancel ({said})", error_type=CANCELLED)
        if reason.startswith(TIMEOUT_STOP_PREFIX):
            message = f"{task_arn}: stopped {reason.removeprefix('jobsched: ')}, {said}"
            raise TargetFailed(message[:MAX_REASON_CHARS], error_type="Timeout")
    if code is None:
        reason = task.get("stoppedReason") or "no exit code"
        raise TargetFailed(
            f"{task_arn}: stopped with no exit code: {reason}"[:MAX_REASON_CHARS], error_type=TASK_LOST
        )
    if own_task and int(code) == RAN_UNRECORDED:
        raise TargetFailed(unrecorded(task_arn), error_type=TASK_LOST)
    if int(code) != 0:
        raise TargetFailed(f"{task_arn}: exit code {int(code)}", error_type=EXIT_CODE)
    return {"task_arn": task_arn, "exit_code": 0}


def unrecorded(task: str) -> str:
    """The error message of an own task that exited RAN_UNRECORDED."""
    return f"{task}: its handler ran and its outcome could not be recorded (exit code {RAN_UNRECORDED})"


def task_outcome(
    task_arn: str, task: Mapping[str, Any], *, own_task: bool = False
) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """task_ended as (result, None) or (None, (error type, message)): the run path's pair."""
    try:
        return task_ended(task_arn, task, own_task=own_task), None
    except TargetFailed as exc:
        return None, (exc.error_type, str(exc))


def stopped_pattern(cluster_arn: str) -> dict[str, Any]:
    """The EventBridge pattern of container targets' stopped tasks in the cluster: STOPPED tasks of
    `cluster_arn` not started by an ECS service (the ECS worker's own tasks are a service's)."""
    return {
        "source": [EVENT_SOURCE],
        "detail-type": [EVENT_DETAIL_TYPE],
        "detail": {
            "clusterArn": [cluster_arn],
            "lastStatus": ["STOPPED"],
            "startedBy": [{"anything-but": {"prefix": SERVICE_STARTED_BY_PREFIX}}],
        },
    }


@dataclass(frozen=True, slots=True)
class StoppedTask:
    """A stopped task that jobsched started for a run's attempt."""

    task_arn: str
    run_id: str
    attempt: int
    task: Mapping[str, Any]
    """The event's detail: the task, as task_ended reads it."""
    stopped_at: str | None = None
    """ECS's stoppedAt (ISO-8601), when the event has it."""


def stopped_task(detail: Mapping[str, Any]) -> StoppedTask | None:
    """The run attempt a task state change is about, or None: not STOPPED, or not a task jobsched
    started (its container overrides carry no JOBSCHED_RUN_ID and JOBSCHED_ATTEMPT, as RunTask set
    them, or its startedBy is not that run's).

    The event carries the task's overrides but not its tags, and startedBy holds only a digest of a
    long run id: the run and attempt are read from the environment jobsched gave the container,
    and startedBy must agree with them."""
    if detail.get("lastStatus") != "STOPPED" or not detail.get("taskArn"):
        return None
    overrides = detail.get("overrides") or {}
    environment: dict[str, str] = {}
    for container in overrides.get("containerOverrides") or []:
        for pair in container.get("environment") or []:
            if isinstance(pair, Mapping) and "name" in pair:
                environment[str(pair["name"])] = str(pair.get("value", ""))
    run_id, attempt = environment.get("JOBSCHED_RUN_ID"), environment.get("JOBSCHED_ATTEMPT")
    if not run_id or not attempt or not attempt.isdigit():
        return None
    if detail.get("startedBy") != started_by(run_id):
        return None
    stopped_at = detail.get("stoppedAt")
    return StoppedTask(
        task_arn=str(detail["taskArn"]),
        run_id=run_id,
        attempt=int(attempt),
        task=detail,
        stopped_at=str(stopped_at) if stopped_at else None,
    )
