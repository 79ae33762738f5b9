"""GET /api/runs/{run_id}/logs over the fakes: the run's own lines, paged, tenant-scoped; and a
container run's, with what its tasks printed read from moto's CloudWatch Logs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import boto3
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from moto import mock_aws

from jobsched.adapters.logs import CloudWatchTaskLogs
from jobsched.adapters.memory import MemoryRunLogs
from jobsched.api import build_app
from jobsched.domain import times
from jobsched.domain.keys import run_id_for
from jobsched.domain.logs import task_stream
from jobsched.domain.records import Lease
from jobsched.services.runs import LogLinks
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}


def api(world: World, lines: MemoryRunLogs, logs: LogLinks | None = None) -> APIGatewayRestResolver:
    return build_app(
        world.svc.job_service,
        world.svc.failures,
        world.svc.schedule,
        tenant_source="header",
        logs=logs,
        run_logs=lines,
    )


def a_run(app: APIGatewayRestResolver) -> tuple[str, str]:
    run_at = T0 + timedelta(seconds=30)
    body = {"type": "one_off", "handler": "demo.echo", "run_at": run_at.isoformat()}
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    return str(created["job_id"]), run_id_for(str(created["job_id"]), run_at)


def test_a_runs_log_lines_read_back_oldest_first_a_page_at_a_time(world: World) -> None:
    # Given a run that logged three lines, beside a line of another run
    lines = MemoryRunLogs()
    app = api(world, lines)
    _, run_id = a_run(app)
    at = T0 + timedelta(seconds=30)
    for i in range(3):
        lines.append(run_id, "team-a", at + timedelta(seconds=i), f"line {i}")
        lines.append("job_other@x", "team-a", at, "not this run's")
    # When its owner reads them two at a time
    status, first = call(app, "GET", f"/api/runs/{quote(run_id)}/logs?limit=2", headers=A)
    assert status == 200, first
    status, rest = call(
        app, "GET", f"/api/runs/{quote(run_id)}/logs?limit=2&cursor={first['next_cursor']}", headers=A
    )
    # Then the pages hold its lines in order, with their instants, and the last page ends
    assert [(x["at"], x["message"]) for x in first["lines"]] == [
        (times.iso(at), "line 0"),
        (times.iso(at + timedelta(seconds=1)), "line 1"),
    ]
    assert status == 200 and [x["message"] for x in rest["lines"]] == ["line 2"]
    assert rest["next_cursor"] is None
    assert first["console_url"] is None  # no console locally


def test_another_tenants_run_logs_are_not_found(world: World) -> None:
    # Given team-a's run with a line
    lines = MemoryRunLogs()
    app = api(world, lines)
    _, run_id = a_run(app)
    lines.append(run_id, "team-a", T0 + timedelta(seconds=30), "secret")
    # When team-b asks for its logs; Then 404, as for an unknown run
    status, body = call(app, "GET", f"/api/runs/{quote(run_id)}/logs", headers=B)
    assert status == 404 and body["error"]["code"] == "not_found"
    status, _ = call(app, "GET", "/api/runs/nope/logs", headers=A)
    assert status == 404


def test_on_aws_the_answer_links_the_console_filtered_by_the_run_id(world: World) -> None:
    links = LogLinks(log_group="/aws/lambda/jobsched-worker", region="eu-west-1")
    app = api(world, MemoryRunLogs(), logs=links)
    _, run_id = a_run(app)
    status, body = call(app, "GET", f"/api/runs/{quote(run_id)}/logs", headers=A)
    assert status == 200 and body == {"lines": [], "next_cursor": None, "console_url": links.url(run_id)}


# A container job's run: what its tasks printed, read from the container log group (moto's CloudWatch
# Logs, written as the awslogs driver writes it), after the worker's own lines.
CONTAINER_GROUP = "jobsched-containers"
TASKS = [
    "arn:aws:ecs:eu-west-1:123456789012:task/jobsched/0000000000000000000000000000000a",
    "arn:aws:ecs:eu-west-1:123456789012:task/jobsched/0000000000000000000000000000000b",
]


def a_container_run(app: APIGatewayRestResolver, world: World, target: dict[str, object]) -> tuple[str, str]:
    run_at = T0 + timedelta(seconds=30)
    body = {"type": "one_off", "run_at": run_at.isoformat(), "target": target}
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    job_id = str(created["job_id"])
    # Its two attempts' tasks, noted on its row (PENDING: handed over at once) as each started
    sf = times.stored(run_at)
    for attempt, task in enumerate(TASKS, start=1):
        owner = f"w/{attempt}"
        until = T0 + timedelta(minutes=attempt * 10)
        lease = Lease(owner=owner, message=f"m{attempt}", worker="w", until=until)
        assert world.runs.claim(job_id, sf, lease=lease, now=until - timedelta(minutes=5)).applied
        assert world.runs.note_task(job_id, sf, owner=owner, task_arn=task)
    return job_id, run_id_for(job_id, run_at)


def printed(client: Any, task_arn: str, lines: list[str]) -> None:
    """What the awslogs driver writes for a task: its stream, made at its start, a line an event."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)  # CloudWatch keeps 14 days
    stream = task_stream(task_arn)
    client.create_log_stream(logGroupName=CONTAINER_GROUP, logStreamName=stream)
    client.put_log_events(
        logGroupName=CONTAINER_GROUP,
        logStreamName=stream,
        logEvents=[
            {"timestamp": int((at + timedelta(seconds=i)).timestamp() * 1000), "message": line}
            for i, line in enumerate(lines)
        ],
    )


def read_all(app: APIGatewayRestResolver, run_id: str, *, limit: int, headers: dict[str, str]) -> list[str]:
    messages: list[str] = []
    cursor = ""
    for _ in range(20):
        path = f"/api/runs/{quote(run_id)}/logs?limit={limit}" + (
            f"&cursor={quote(cursor)}" if cursor else ""
        )
        status, page = call(app, "GET", path, headers=headers)
        assert status == 200, page
        assert len(page["lines"]) <= limit
        messages += [line["message"] for line in page["lines"]]
        if page["next_cursor"] is None:
            return messages
        cursor = page["next_cursor"]
    raise AssertionError("the pages never ended")


@mock_aws
def test_a_container_runs_logs_hold_what_its_tasks_printed_after_the_workers_lines_paged(
    world: World,
) -> None:
    # Given a container job's run whose two attempts' tasks printed to the container log group
    client = boto3.client("logs", region_name="eu-west-1")
    client.create_log_group(logGroupName=CONTAINER_GROUP)
    worker_lines = MemoryRunLogs()
    links = LogLinks("/aws/lambda/jobsched-worker", "eu-west-1", container_log_group=CONTAINER_GROUP)
    app = build_app(
        world.svc.job_service,
        world.svc.failures,
        world.svc.schedule,
        tenant_source="header",
        logs=links,
        run_logs=worker_lines,
        task_logs=CloudWatchTaskLogs(client, CONTAINER_GROUP),
    )
    _, run_id = a_container_run(app, world, {"type": "ecs", "image": "busybox:1.36", "command": ["sh"]})
    worker_lines.append(run_id, "team-a", T0 + timedelta(seconds=30), "worker: starting task")
    printed(client, TASKS[0], ["try 1: hello", "try 1: exit 3"])
    printed(client, TASKS[1], ["try 2: hello", "try 2: done", "try 2: bye"])
    # When its owner reads them two lines at a time
    messages = read_all(app, run_id, limit=2, headers=A)
    # Then the worker's line, then each task's lines in the order the tasks started, each once
    assert messages == [
        "worker: starting task",
        "try 1: hello",
        "try 1: exit 3",
        "try 2: hello",
        "try 2: done",
        "try 2: bye",
    ]
    # And the run shows its tasks
    status, run = call(app, "GET", f"/api/runs/{quote(run_id)}", headers=A)
    assert status == 200 and run["ecs_tasks"] == TASKS
    # And the console link is the last task's stream
    status, first = call(app, "GET", f"/api/runs/{quote(run_id)}/logs", headers=A)
    assert status == 200 and first["console_url"] == links.task_url(TASKS[1])
    assert "0000000000000000000000000000000b" in first["console_url"]
    # And another tenant's read of the same run is a 404
    status, body = call(app, "GET", f"/api/runs/{quote(run_id)}/logs", headers=B)
    assert status == 404 and body["error"]["code"] == "not_found"


@mock_aws
def test_a_task_definition_arn_runs_logs_are_the_workers_own_lines_only(world: World) -> None:
    # Given a run of the caller's task definition (its log configuration is the caller's)
    client = boto3.client("logs", region_name="eu-west-1")
    client.create_log_group(logGroupName=CONTAINER_GROUP)
    worker_lines = MemoryRunLogs()
    app = build_app(
        world.svc.job_service,
        world.svc.failures,
        world.svc.schedule,
        tenant_source="header",
        run_logs=worker_lines,
        task_logs=CloudWatchTaskLogs(client, CONTAINER_GROUP),
    )
    arn = "arn:aws:ecs:eu-west-1:123456789012:task-definition/report:7"
    _, run_id = a_container_run(app, world, {"type": "ecs", "task_definition_arn": arn})
    worker_lines.append(run_id, "team-a", T0 + timedelta(seconds=30), "worker: starting task")
    printed(client, TASKS[0], ["not in jobsched's group on AWS"])
    # When its owner reads them; Then the worker's lines only
    assert read_all(app, run_id, limit=10, headers=A) == ["worker: starting task"]


def test_a_cursor_this_api_never_answered_is_a_400(world: World) -> None:
    app = api(world, MemoryRunLogs())
    _, run_id = a_run(app)
    status, body = call(app, "GET", f"/api/runs/{quote(run_id)}/logs?cursor=not-ours", headers=A)
    assert status == 400 and "cursor" in str(body), body
