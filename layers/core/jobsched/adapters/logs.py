"""Run log lines in CloudWatch Logs: read back by run (FilterLogEvents), and shipped there locally.

The worker's lines are powertools JSON, and every line of a run carries `run_id` and `tenant`
(jobsched.logcontext). CloudWatch's JSON filter (`{ $.run_id = "..." }`) would select them exactly,
but moto's filter_log_events supports terms and quoted terms only (a JSON pattern matches every
event there). So one pattern for both: the quoted run id (a coarse match: any line containing it),
then the adapter keeps the lines whose own `run_id` and `tenant` fields are the run's. The filter
runs server side on AWS, so a page costs what the run logged, plus lines that quote its id.

A container target's task prints plain text, which the awslogs driver writes to its own stream in the
container log group (domain.logs.task_stream); CloudWatchTaskLogs reads one such stream from its head
(GetLogEvents: no filter, nothing else's lines in it).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from jobsched.adapters.aws import aws_call
from jobsched.domain.logs import LogLine, LogPage, task_stream
from jobsched.logcontext import current_run

if TYPE_CHECKING:
    from mypy_boto3_logs import CloudWatchLogsClient

# FilterLogEvents calls one page may make: AWS answers pages with no match (and a nextToken) while
# it scans a large group; the reader follows next_cursor for the rest.
MAX_CALLS_PER_PAGE = 5


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


class _LogGroupReader:
    """One log group, read with a client given, or made by a factory at the first read."""

    def __init__(
        self, client: CloudWatchLogsClient | Callable[[], CloudWatchLogsClient], log_group: str
    ) -> None:
        """`client`: a client, or a factory called at the first read (the API function builds no
        `logs` client at its cold start: a boto3 client costs tens of ms, and most requests read no
        log lines)."""
        # A boto3 client is not callable, so a callable is the factory.
        self._factory = client if callable(client) else None
        self._client = None if callable(client) else client
        self._lock = threading.Lock()
        self.log_group = log_group

    @property
    def client(self) -> CloudWatchLogsClient:
        """The CloudWatch Logs client, built by the factory on first use."""
        with self._lock:
            if self._client is None:
                assert self._factory is not None
                self._client = self._factory()
            return self._client


class CloudWatchRunLogs(_LogGroupReader):
    """ports.RunLogs over one log group (the worker's); the cursor is FilterLogEvents' nextToken."""

    def page(self, run_id: str, *, tenant: str, since: datetime, cursor: str | None, limit: int) -> LogPage:
        """See ports.RunLogs."""
        lines: list[LogLine] = []
        token = cursor
        for _ in range(MAX_CALLS_PER_PAGE):
            args: dict[str, Any] = {
                "logGroupName": self.log_group,
                "filterPattern": json.dumps(run_id),  # a quoted term
                "startTime": _ms(since),
                "limit": limit - len(lines),  # events, before this adapter's own filter: never more lines
            }
            if token:
                args["nextToken"] = token
            with aws_call("CloudWatch Logs"):
                try:
                    out = self.client.filter_log_events(**args)
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                        return LogPage([], None)  # no group yet: nothing was logged
                    raise
            for event in out.get("events", []):
                line = _line_of(event, run_id=run_id, tenant=tenant)
                if line is not None:
                    lines.append(line)
            token = out.get("nextToken")
            if not token or lines:
                break
        return LogPage(lines, token or None)


class CloudWatchTaskLogs(_LogGroupReader):
    """ports.TaskLogs over the container log group; the cursor is GetLogEvents' nextForwardToken."""

    def page(self, task_arn: str, *, cursor: str | None, limit: int) -> LogPage:
        """See ports.TaskLogs. GetLogEvents answers a forward token even at the stream's end (the
        same one it was given, once there is nothing after it): that token is the end, for now."""
        token = cursor
        for _ in range(MAX_CALLS_PER_PAGE):
            args: dict[str, Any] = {
                "logGroupName": self.log_group,
                "logStreamName": task_stream(task_arn),
                "startFromHead": True,
                "limit": limit,
            }
            if token:
                args["nextToken"] = token
            with aws_call("CloudWatch Logs"):
                try:
                    out = self.client.get_log_events(**args)
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                        return LogPage([], None)  # no stream yet: the task printed nothing so far
                    raise
            lines = [
                LogLine(
                    at=datetime.fromtimestamp(int(event.get("timestamp", 0)) / 1000, tz=UTC),
                    message=str(event.get("message", "")),
                )
                for event in out.get("events", [])
            ]
            following = out.get("nextForwardToken")
            if not following or following == token:
                return LogPage(lines, None)
            token = following
            if lines:
                return LogPage(lines, token)
        return LogPage([], token)


def _line_of(event: Any, *, run_id: str, tenant: str) -> LogLine | None:
    """The event as a line of the run, or None (another run's line that quotes the id, plain text)."""
    try:
        record = json.loads(event.get("message", ""))
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("run_id") != run_id or record.get("tenant") != tenant:
        return None
    at = datetime.fromtimestamp(int(event.get("timestamp", 0)) / 1000, tz=UTC)
    return LogLine(at=at, message=str(record.get("message", "")))


class ShipRunLines(logging.Handler):
    """The local stack's stand-in for Lambda's log delivery: the lines logged inside a run's scope,
    formatted as the worker formats them, put into the worker's log group (moto's, locally).

    Only a run's lines (the same ones GET /api/runs/{id}/logs reads); a failure to ship is dropped,
    never a run's failure (as Lambda's own delivery is out of the run's way).
    """

    def __init__(self, client: CloudWatchLogsClient, log_group: str, stream: str) -> None:
        super().__init__()
        self.client = client
        self.log_group = log_group
        self.stream = stream
        self._ship_lock = threading.Lock()
        self._created = False

    def emit(self, record: logging.LogRecord) -> None:
        """Ship the record if it was logged inside a run's scope."""
        if not current_run():
            return
        try:
            message = self.format(record)
            with self._ship_lock:
                if not self._created:
                    self._create_stream()
                self.client.put_log_events(
                    logGroupName=self.log_group,
                    logStreamName=self.stream,
                    logEvents=[{"timestamp": int(record.created * 1000), "message": message}],
                )
        except Exception:
            self.handleError(record)

    def _create_stream(self) -> None:
        try:
            self.client.create_log_stream(logGroupName=self.log_group, logStreamName=self.stream)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                raise
        self._created = True
