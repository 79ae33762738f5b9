"""GET /api/dead-letter and POST /api/dead-letter/{run_id}/replay through the API Lambda, against moto."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain import times
from jobsched.domain.keys import run_id_for
from jobsched.domain.models import Job
from jobsched.domain.status import JobStatus
from jobsched.local import events, lambdas
from jobsched.settings import Settings
from tests.integration.conftest import Call

BASE = datetime(2026, 11, 1, tzinfo=UTC)


def put_job(settings: Settings, job_id: str, tenant: str = "default") -> None:
    job = Job(
        job_id=job_id, tenant=tenant, type="recurring", status=JobStatus.SCHEDULED, handler="demo.fail",
        payload={}, cron_expr="* * * * *", created_at=BASE, updated_at=BASE,
    )  # fmt: skip
    boto3.client("dynamodb").put_item(TableName=settings.jobs_table, Item=job_to_item(job, shard_count=4))


def put_dead(settings: Settings, job_id: str, n: int, *, tenant: str = "default") -> str:
    """A run that the failure workflow dead-lettered (as its DeadLetter state writes it)."""
    sf = BASE + timedelta(minutes=n)
    run_id = run_id_for(job_id, sf)
    dead_at = times.stored(BASE + timedelta(days=1, seconds=n))
    boto3.client("dynamodb").put_item(
        TableName=settings.runs_table,
        Item={
            "PK": {"S": f"JOB#{job_id}"}, "SK": {"S": f"RUN#{times.stored(sf)}"}, "run_id": {"S": run_id},
            "job_id": {"S": job_id}, "tenant": {"S": tenant}, "scheduled_for": {"S": times.stored(sf)},
            "status": {"S": "DEAD_LETTER"}, "attempt": {"N": "3"}, "error_type": {"S": "DemoFailure"},
            "error_message": {"S": f"failure {n}"}, "dl_key": {"S": f"DL#{tenant}"},
            "dl_sk": {"S": f"{dead_at}#{run_id}"},
            "dead_at": {"S": dead_at},
        },
    )  # fmt: skip
    return run_id


def test_250_dead_letters_come_back_in_3_pages_none_missing_none_repeated_while_new_ones_arrive(
    call: Call,
    aws: Settings,
) -> None:
    put_job(aws, "job_a")
    put_job(aws, "job_b")
    expected = [put_dead(aws, "job_a" if n % 2 else "job_b", n) for n in range(250)]
    put_job(aws, "job_other", tenant="other")
    put_dead(aws, "job_other", 999, tenant="other")
    seen: list[str] = []
    cursor = ""
    pages = 0
    while True:
        status, page = call("GET", f"/api/dead-letter?limit=100{'&cursor=' + cursor if cursor else ''}")
        assert status == 200, page
        pages += 1
        seen += [i["run_id"] for i in page["items"]]
        # newer failures land between pages: they sort before the cursor, so later pages do not shift
        put_dead(aws, "job_a", 1000 + pages)
        if not page["next_cursor"]:
            break
        cursor = page["next_cursor"]
    assert pages == 3
    assert seen == list(reversed(expected))  # newest first, every one exactly once
    item = call("GET", "/api/dead-letter?limit=1")[1]["items"][0]
    assert set(item) >= {"job_id", "run_id", "last_error", "attempts"} and item["attempts"] == 3


def test_the_dead_letter_list_filters_by_job(call: Call, aws: Settings) -> None:
    put_job(aws, "job_a")
    put_job(aws, "job_b")
    for n in range(30):
        put_dead(aws, "job_a" if n % 3 == 0 else "job_b", n)
    status, page = call("GET", "/api/dead-letter?limit=4&job_id=job_a")
    assert status == 200 and len(page["items"]) == 4 and {i["job_id"] for i in page["items"]} == {"job_a"}
    rest = call("GET", f"/api/dead-letter?limit=100&job_id=job_a&cursor={page['next_cursor']}")[1]
    assert len(page["items"]) + len(rest["items"]) == 10 and rest["next_cursor"] is None


def wait_until(predicate: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_replay_with_the_same_key_is_done_once(call: Call, aws: Settings) -> None:
    put_job(aws, "job_a")
    run_id = put_dead(aws, "job_a", 1)
    first = call("POST", f"/api/dead-letter/{run_id}/replay", headers={"Idempotency-Key": "r-1"})
    assert first == (202, {"run_id": run_id, "job_id": "job_a", "status": "PENDING"})
    sfn = boto3.client("stepfunctions")
    wait_until(
        lambda: all(
            e["status"] != "RUNNING"
            for e in sfn.list_executions(stateMachineArn=aws.failure_workflow_arn)["executions"]
        )
    )
    # the run left the dead-letter list and is queued again with a fresh attempt series
    assert call("GET", "/api/dead-letter")[1]["items"] == []
    assert call("POST", f"/api/dead-letter/{run_id}/replay", headers={"Idempotency-Key": "r-1"}) == first
    assert len(sfn.list_executions(stateMachineArn=aws.failure_workflow_arn)["executions"]) == 1
    messages = boto3.client("sqs").receive_message(QueueUrl=aws.execution_queue_url, MaxNumberOfMessages=10)
    assert len(messages.get("Messages", [])) == 1
    # without the key, a second replay of a run no longer dead-lettered is a conflict
    status, err = call("POST", f"/api/dead-letter/{run_id}/replay")
    assert status == 409 and "not DEAD_LETTER" in err["error"]["message"]
    # the same key for another run is refused
    other = put_dead(aws, "job_a", 2)
    assert call("POST", f"/api/dead-letter/{other}/replay", headers={"Idempotency-Key": "r-1"})[0] == 409


@pytest.mark.parametrize(
    ("method", "path", "status", "word"),
    [
        ("POST", "/api/dead-letter/job_nope-123/replay", 404, "run"),
        ("POST", "/api/dead-letter/garbage/replay", 404, "run"),
        ("GET", "/api/dead-letter?cursor=not-a-cursor", 400, "cursor"),
        ("GET", "/api/dead-letter?cursor=eyJkbF9rZXkiOiJETCNvdGhlciJ9", 400, "cursor"),
        ("GET", "/api/dead-letter?limit=0", 400, "limit"),
        ("GET", "/api/dead-letter?limit=101", 400, "limit"),
        ("GET", "/api/dead-letter?limit=ten", 400, "limit"),
    ],
)
def test_bad_dead_letter_requests_are_clear_4xx(
    call: Call, method: str, path: str, status: int, word: str
) -> None:
    got, answer = call(method, path)
    assert got == status and set(answer["error"]) == {"code", "message"}
    assert word in answer["error"]["message"].lower()


def test_replaying_a_run_that_is_not_dead_lettered_is_a_conflict(call: Call, aws: Settings) -> None:
    created = call(
        "POST",
        "/api/jobs",
        {"type": "one_off", "run_at": datetime.now(UTC).isoformat(), "handler": "demo.echo"},
    )[1]
    run_id = call("GET", f"/api/jobs/{created['job_id']}")[1]["recent_executions"][0]["run_id"]
    status, err = call("POST", f"/api/dead-letter/{run_id}/replay")
    assert status == 409 and "PENDING" in err["error"]["message"]
    # another tenant cannot even see it
    assert call("POST", f"/api/dead-letter/{run_id}/replay", headers={"X-Tenant": "other"})[0] == 404


def test_a_replay_cut_off_by_the_function_timeout_holds_its_key_only_until_that_invocation_ends(
    aws: Settings, api: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an API invocation with 3 s left before its timeout, asked for a keyed replay
    records: list[dict[str, Any]] = []

    def replay_seen_mid_flight(run_id: str, *, tenant: str) -> Any:
        # (the replay reads powertools' in-progress record while it runs, then the function dies)
        table = boto3.client("dynamodb").scan(TableName=aws.jobs_table)["Items"]
        records.extend(i for i in table if i["PK"]["S"].startswith("idempotency#"))
        raise TimeoutError("the invocation ran out of time")

    monkeypatch.setattr(api.services.failures, "replay", replay_seen_mid_flight)
    context = lambdas.LambdaContext("api")
    monkeypatch.setattr(context, "get_remaining_time_in_millis", lambda: 3_000)
    event = events.api_gateway_event(
        "POST", "/api/dead-letter/run_x/replay", {"X-Tenant": "t", "Idempotency-Key": "cut-off"}, None
    )
    with contextlib.suppress(Exception):
        api.lambda_handler(event, context)
    # Then its key was "in progress" only until that invocation's deadline, not for the record's 24 h
    [record] = records
    assert record["idempotency_status"]["S"] == "INPROGRESS"
    deadline_ms = int(record["in_progress_expiration"]["N"])
    assert abs(deadline_ms - (time.time() * 1000 + 3_000)) < 60_000
