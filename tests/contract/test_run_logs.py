"""The RunLogs contract (jobsched.ports): a run's own lines, oldest first, paged, of its tenant only;
on the in-memory fake and on CloudWatch Logs (moto), where the lines arrive as the worker writes them.
And the TaskLogs contract: what a container task printed, oldest first, paged, read from the stream
the awslogs driver writes it to (moto: the stream created and its events put as awslogs would)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from jobsched import resources
from jobsched.adapters.logs import CloudWatchRunLogs, CloudWatchTaskLogs, ShipRunLines
from jobsched.adapters.memory import MemoryRunLogs, MemoryTaskLogs
from jobsched.domain.logs import LogLine, task_stream
from jobsched.logcontext import run_scope
from jobsched.ports import RunLogs, TaskLogs

# CloudWatch keeps events of the last 14 days only: the lines are stamped relative to now.
BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
RUN = "job_a@2026-11-30T12:00:00Z"


class Backend:
    logs: RunLogs

    def write(self, run_id: str, tenant: str, at: datetime, message: str) -> None:
        raise NotImplementedError


class Memory(Backend):
    def __init__(self) -> None:
        self.logs = self.store = MemoryRunLogs()

    def write(self, run_id: str, tenant: str, at: datetime, message: str) -> None:
        self.store.append(run_id, tenant, at, message)


class Moto(Backend):
    def __init__(self) -> None:
        self.client = boto3.client("logs", region_name="us-east-1")
        made = resources.create_local_resources(
            prefix="c", dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs"), logs=self.client
        )
        self.group = made[resources.WORKER_LOG_GROUP.logical_id]
        self.client.create_log_stream(logGroupName=self.group, logStreamName="s")
        self.logs = CloudWatchRunLogs(self.client, self.group)

    def write(self, run_id: str, tenant: str, at: datetime, message: str) -> None:
        # A line as the worker's powertools formatter writes it (fields the adapter ignores too).
        line = {"level": "INFO", "message": message, "service": "jobsched-worker", "job_id": "job_a"}
        line |= {"run_id": run_id, "tenant": tenant}
        self.client.put_log_events(
            logGroupName=self.group,
            logStreamName="s",
            logEvents=[{"timestamp": int(at.timestamp() * 1000), "message": json.dumps(line)}],
        )


@pytest.fixture(params=["memory", "moto"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        yield Memory()
        return
    with mock_aws():
        yield Moto()


def all_lines(logs: RunLogs, run_id: str, tenant: str, *, limit: int) -> list[LogLine]:
    out: list[LogLine] = []
    cursor = None
    for _ in range(50):
        page = logs.page(run_id, tenant=tenant, since=BASE, cursor=cursor, limit=limit)
        assert len(page.lines) <= limit
        out.extend(page.lines)
        cursor = page.next_cursor
        if cursor is None:
            return out
    raise AssertionError("the pages never ended")


def test_a_runs_lines_read_back_oldest_first_and_only_its_own(backend: Backend) -> None:
    # Given two lines of the run, a line of another run, and a line that only quotes the run's id
    backend.write(RUN, "t", BASE + timedelta(seconds=1), "first")
    backend.write("job_b@2026-11-30T12:00:00Z", "t", BASE + timedelta(seconds=2), "another run")
    backend.write("job_c@x", "t", BASE + timedelta(seconds=3), f"mentions {RUN}")
    backend.write(RUN, "t", BASE + timedelta(seconds=4), "second")
    # When the run's lines are read; Then its two, in order, with their instants
    page = backend.logs.page(RUN, tenant="t", since=BASE, cursor=None, limit=100)
    assert page.lines == [
        LogLine(BASE + timedelta(seconds=1), "first"),
        LogLine(BASE + timedelta(seconds=4), "second"),
    ]
    assert page.next_cursor is None


def test_a_line_of_another_tenant_is_never_answered(backend: Backend) -> None:
    backend.write(RUN, "other", BASE + timedelta(seconds=1), "theirs")
    assert all_lines(backend.logs, RUN, "t", limit=10) == []


def test_paging_reads_every_line_once(backend: Backend) -> None:
    # Given five lines of the run; When they are read two at a time; Then each once, in order
    for i in range(5):
        backend.write(RUN, "t", BASE + timedelta(seconds=i), f"line {i}")
    assert [line.message for line in all_lines(backend.logs, RUN, "t", limit=2)] == [
        f"line {i}" for i in range(5)
    ]


def test_lines_before_since_are_left_out(backend: Backend) -> None:
    backend.write(RUN, "t", BASE - timedelta(minutes=5), "old")
    backend.write(RUN, "t", BASE + timedelta(seconds=1), "new")
    page = backend.logs.page(RUN, tenant="t", since=BASE, cursor=None, limit=10)
    assert [line.message for line in page.lines] == ["new"]


@mock_aws
def test_the_local_shipper_puts_a_runs_lines_where_the_adapter_reads_them_and_nothing_else() -> None:
    # Given the worker's log group (moto's) and the local stack's shipper on a powertools logger
    backend = Moto()
    logger = Logger(service="contract-shipper", level="INFO")  # whatever POWERTOOLS_LOG_LEVEL says
    shipper = ShipRunLines(backend.client, backend.group, stream="local")
    shipper.setFormatter(logger.registered_formatter)
    logger.addHandler(shipper)
    plain = logging.getLogger("contract-shipper-plain")
    plain.addHandler(shipper)
    plain.setLevel(logging.INFO)
    try:
        # When lines are logged inside a run's scope, and one outside
        with run_scope(job_id="job_a", run_id=RUN, tenant="t"):
            logger.info("from powertools")
            plain.info("from stdlib")
        logger.info("outside any run")
    finally:
        logger.removeHandler(shipper)
        plain.removeHandler(shipper)
    # Then the run's two lines read back by run id; the line outside was never shipped
    page: Any = CloudWatchRunLogs(backend.client, backend.group).page(
        RUN, tenant="t", since=BASE, cursor=None, limit=10
    )
    assert [line.message for line in page.lines] == ["from powertools", "from stdlib"]
    shipped = backend.client.filter_log_events(logGroupName=backend.group)["events"]
    assert len(shipped) == 2


TASK = "arn:aws:ecs:us-east-1:123456789012:task/jobsched/0123456789abcdef0123456789abcdef"
OTHER_TASK = "arn:aws:ecs:us-east-1:123456789012:task/jobsched/fedcba9876543210fedcba9876543210"


class TaskBackend:
    logs: TaskLogs

    def print(self, task_arn: str, at: datetime, message: str) -> None:
        raise NotImplementedError


class MemoryTasks(TaskBackend):
    def __init__(self) -> None:
        self.logs = self.store = MemoryTaskLogs()

    def print(self, task_arn: str, at: datetime, message: str) -> None:
        self.store.print(task_arn, at, message)


class MotoTasks(TaskBackend):
    GROUP = "jobsched-containers"

    def __init__(self) -> None:
        self.client = boto3.client("logs", region_name="us-east-1")
        self.client.create_log_group(logGroupName=self.GROUP)
        self.streams: set[str] = set()
        self.logs = CloudWatchTaskLogs(lambda: self.client, self.GROUP)  # the API's lazy client

    def print(self, task_arn: str, at: datetime, message: str) -> None:
        # As the awslogs driver does: the task's stream made at its start, a plain-text event a line.
        stream = task_stream(task_arn)
        if stream not in self.streams:
            self.client.create_log_stream(logGroupName=self.GROUP, logStreamName=stream)
            self.streams.add(stream)
        self.client.put_log_events(
            logGroupName=self.GROUP,
            logStreamName=stream,
            logEvents=[{"timestamp": int(at.timestamp() * 1000), "message": message}],
        )


@pytest.fixture(params=["memory", "moto"])
def tasks(request: pytest.FixtureRequest) -> Iterator[TaskBackend]:
    if request.param == "memory":
        yield MemoryTasks()
        return
    with mock_aws():
        yield MotoTasks()


def all_task_lines(logs: TaskLogs, task_arn: str, *, limit: int) -> list[LogLine]:
    out: list[LogLine] = []
    cursor = None
    for _ in range(50):
        page = logs.page(task_arn, cursor=cursor, limit=limit)
        assert len(page.lines) <= limit
        out.extend(page.lines)
        cursor = page.next_cursor
        if cursor is None:
            return out
    raise AssertionError("the pages never ended")


def test_a_tasks_printed_lines_read_back_oldest_first_a_page_at_a_time_and_only_its_own(
    tasks: TaskBackend,
) -> None:
    # Given a task that printed five lines, beside another task's line
    for i in range(5):
        tasks.print(TASK, BASE + timedelta(seconds=i), f"line {i}")
    tasks.print(OTHER_TASK, BASE, "not this task's")
    # When they are read two at a time; Then each once, in order, with its instant
    lines = all_task_lines(tasks.logs, TASK, limit=2)
    assert lines == [LogLine(BASE + timedelta(seconds=i), f"line {i}") for i in range(5)]


def test_a_task_that_printed_nothing_yet_has_no_lines_and_no_cursor(tasks: TaskBackend) -> None:
    page = tasks.logs.page(TASK, cursor=None, limit=10)
    assert page.lines == [] and page.next_cursor is None
