"""Long backfills and bulk actions through the API Lambda and the worker's chunks, on moto."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from jobsched.domain.operations import OperationMessage, is_operation_message
from jobsched.services.operations import ChunkOutcome, OperationService
from jobsched.settings import Settings
from jobsched.wiring import build
from tests.integration.conftest import Call
from tests.support import run_rows


def minutely(call: Call, tenant: str = "a") -> str:
    status, job = call(
        "POST", "/api/jobs", {"type": "recurring", "cron_expr": "* * * * *", "handler": "demo.echo"},
        {"X-Tenant": tenant},
    )  # fmt: skip
    assert status == 201, job
    return str(job["job_id"])


def operation_messages(settings: Settings) -> list[dict[str, Any]]:
    """The visible operation messages on the execution queue (received: in flight now)."""
    sqs = boto3.client("sqs")
    got = sqs.receive_message(QueueUrl=settings.execution_queue_url, MaxNumberOfMessages=10)
    return [m for m in got.get("Messages", []) if is_operation_message(m["Body"])]


def test_a_backfill_of_250_ticks_answers_202_and_the_worker_finishes_it_in_two_chunks(
    call: Call, aws: Settings
) -> None:
    # Given a minutely job of tenant a
    job_id = minutely(call)
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    window = {"from": (end - timedelta(minutes=250)).isoformat(), "to": end.isoformat()}
    # When 250 ticks are backfilled
    status, accepted = call("POST", f"/api/jobs/{job_id}/backfill", window, {"X-Tenant": "a"})
    # Then the API answers 202 at once, having written no run, with the operation to follow
    assert status == 202, accepted
    assert (accepted["status"], accepted["ticks"], accepted["done"], accepted["created"]) == (
        "RUNNING",
        250,
        0,
        0,
    )
    assert run_rows(aws.runs_table, job_id) == []
    path = f"/api/operations/{accepted['operation_id']}"
    status, shown = call("GET", path, headers={"X-Tenant": "a"})
    assert status == 200 and (shown["kind"], shown["status"], shown["total"]) == ("backfill", "RUNNING", 250)
    # and the queue holds chunk 0's message, which the worker's operation service carries out
    worker = OperationService(schedule=build(aws).schedule)
    [first] = operation_messages(aws)
    assert worker.advance(OperationMessage.model_validate_json(first["Body"])) == ChunkOutcome.ADVANCED
    status, shown = call("GET", path, headers={"X-Tenant": "a"})
    assert (shown["status"], shown["done"], shown["created"]) == ("RUNNING", 200, 200)
    # (chunk 1's message is held back until chunk 0's 200 runs have started: 20 s at 10 a second)
    assert (
        worker.advance(OperationMessage(operation_id=accepted["operation_id"], chunk=1))
        == "operation_advanced"
    )
    status, shown = call("GET", path, headers={"X-Tenant": "a"})
    assert (shown["status"], shown["done"], shown["created"], shown["existing"]) == ("SUCCEEDED", 250, 250, 0)
    assert len(run_rows(aws.runs_table, job_id)) == 250
    # and another tenant cannot see it
    status, err = call("GET", path, headers={"X-Tenant": "b"})
    assert status == 404 and err["error"]["code"] == "not_found"


def test_a_short_backfill_is_done_inline_and_its_operation_is_already_finished(
    call: Call, aws: Settings
) -> None:
    # Given a minutely job
    job_id = minutely(call)
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    window = {"from": (end - timedelta(minutes=3)).isoformat(), "to": end.isoformat()}
    # When three ticks are backfilled
    status, done = call("POST", f"/api/jobs/{job_id}/backfill", window, {"X-Tenant": "a"})
    # Then the answer is the finished work, and its operation says the same
    assert status == 202 and (done["status"], done["created"], done["done"]) == ("SUCCEEDED", 3, 3)
    status, shown = call("GET", f"/api/operations/{done['operation_id']}", headers={"X-Tenant": "a"})
    assert status == 200 and (shown["status"], shown["created"]) == ("SUCCEEDED", 3)
    assert len(run_rows(aws.runs_table, job_id)) == 3


def test_a_bulk_pause_of_25_jobs_answers_202_and_its_results_appear_on_the_operation(
    call: Call, aws: Settings
) -> None:
    # Given 25 jobs of tenant a
    ids = [minutely(call) for _ in range(25)]
    # When they are paused in one request
    status, accepted = call(
        "POST", "/api/jobs/actions", {"action": "pause", "job_ids": ids}, {"X-Tenant": "a"}
    )
    # Then it is accepted (202), and tenant b does not see the operation
    assert status == 202 and (accepted["status"], accepted["total"], accepted["items"]) == ("RUNNING", 25, [])
    path = f"/api/operations/{accepted['operation_id']}"
    assert call("GET", path, headers={"X-Tenant": "b"})[0] == 404
    # and the worker's two chunks pause every job, one result per job in the order asked
    worker = OperationService(schedule=build(aws).schedule)
    for chunk in (0, 1):
        assert (
            worker.advance(OperationMessage(operation_id=accepted["operation_id"], chunk=chunk))
            == "operation_advanced"
        )
    status, shown = call("GET", path, headers={"X-Tenant": "a"})
    assert (shown["status"], shown["done"], shown["failed"]) == ("SUCCEEDED", 25, 0)
    assert [i["job_id"] for i in shown["items"]] == ids and {i["status"] for i in shown["items"]} == {
        "PAUSED"
    }
    assert {call("GET", f"/api/jobs/{i}", headers={"X-Tenant": "a"})[1]["status"] for i in ids} == {"PAUSED"}


def test_a_bulk_action_of_at_most_20_jobs_still_answers_200_with_its_results(call: Call) -> None:
    # Given two jobs
    ids = [minutely(call) for _ in range(2)]
    # When they are paused in one request
    status, done = call("POST", "/api/jobs/actions", {"action": "pause", "job_ids": ids}, {"X-Tenant": "a"})
    # Then the answer has every result and names no operation
    assert status == 200 and done["operation_id"] is None and done["succeeded"] == 2 and done["total"] == 2
