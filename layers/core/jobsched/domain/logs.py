"""A run's log lines, as GET /api/runs/{run_id}/logs answers them, and where a container task's are."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a run logged: when, and its message (the line's own text, not its JSON envelope)."""

    at: datetime
    message: str


@dataclass(frozen=True, slots=True)
class LogPage:
    """Lines oldest first; `next_cursor` None: no more lines now (a running run may log more later)."""

    lines: list[LogLine] = field(default_factory=list)
    next_cursor: str | None = None


# A task definition jobsched registers for an image (adapters/targets/ecs.py) has one container,
# IMAGE_CONTAINER, whose output the awslogs driver writes to the stack's container log group, in
# the stream <CONTAINER_STREAM_PREFIX>/<IMAGE_CONTAINER>/<task id>.
IMAGE_CONTAINER = "main"
CONTAINER_STREAM_PREFIX = "run"


def task_id(task_arn: str) -> str:
    """An ECS task's id: the last part of its ARN (arn:aws:ecs:<region>:<account>:task/<cluster>/<id>)."""
    return task_arn.rsplit("/", 1)[-1]


def task_stream(task_arn: str) -> str:
    """The log stream of a task of a task definition jobsched registered (awslogs' naming)."""
    return f"{CONTAINER_STREAM_PREFIX}/{IMAGE_CONTAINER}/{task_id(task_arn)}"
