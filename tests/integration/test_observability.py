"""What the Lambda entry points print for CloudWatch: EMF metrics and run-scoped structured log lines."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger

from jobsched import constants as c
from jobsched import telemetry
from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain import times
from jobsched.domain.keys import run_id_for
from jobsched.domain.models import Job, RunMessage
from jobsched.domain.operations import OperationMessage
from jobsched.domain.status import JobStatus
from jobsched.handlers import RunContext, registry
from jobsched.local import lambdas
from jobsched.settings import Settings

EVENTS = Path(__file__).resolve().parents[1] / "events"


@pytest.fixture
def env(aws: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    return aws


def due_job(settings: Settings, job_id: str, handler: str, *, late_seconds: int = 0) -> tuple[str, str]:
    """A one-off stored due now (scheduled `late_seconds` ago); (its run id, the SQS body of its run)."""
    sf = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=late_seconds)
    job = Job(
        job_id=job_id, tenant="tenant-a", type="one_off", status=JobStatus.SCHEDULED, handler=handler,
        payload={}, run_at=sf, created_at=sf, updated_at=sf,
    )  # fmt: skip
    boto3.client("dynamodb").put_item(
        TableName=settings.jobs_table, Item=job_to_item(job, shard_count=settings.shard_count)
    )
    return run_id_for(job_id, sf), RunMessage(job_id=job_id, scheduled_for=times.stored(sf)).model_dump_json()


def sqs_event(body: str) -> dict[str, Any]:
    event = json.loads((EVENTS / "sqs_run_batch.json").read_text().replace('"__BODY_0__"', json.dumps(body)))
    event["Records"] = event["Records"][:1]
    return event


def printed_json(out: str) -> list[dict[str, Any]]:
    lines = []
    for line in out.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines


def test_the_worker_entry_point_prints_the_runs_metrics_as_emf(
    env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a one-off that was due 3 s ago
    _, body = due_job(env, "job_emf", "demo.echo", late_seconds=3)
    worker = lambdas.load("worker")
    capsys.readouterr()
    # When the worker Lambda processes its message
    worker.lambda_handler(sqs_event(body), lambdas.LambdaContext("worker"))
    # Then one EMF document in the jobsched namespace, dimensioned by service only, holds its figures
    docs = [d for d in printed_json(capsys.readouterr().out) if "_aws" in d]
    assert len(docs) == 1
    (directive,) = docs[0]["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == telemetry.NAMESPACE and directive["Dimensions"] == [["service"]]
    names = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert names[telemetry.LATENESS] == "Milliseconds" and names[telemetry.DURATION] == "Milliseconds"
    assert names[telemetry.runs("succeeded")] == "Count"
    assert docs[0]["service"] == "worker" and docs[0][telemetry.runs("succeeded")] == [1.0]
    assert docs[0][telemetry.LATENESS][0] >= 3000


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_every_line_a_handler_logs_during_its_run_carries_the_runs_keys(
    env: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], concurrency: str
) -> None:
    # Given a handler that logs through stdlib `logging` and through powertools, on the worker's
    # in-line path (1) or its thread-per-run path (4)
    monkeypatch.setenv(c.WORKER_CONCURRENCY_ENV, concurrency)

    def chatty(payload: dict[str, Any], ctx: RunContext) -> str:
        logging.getLogger("tests.chatty").warning("stdlib line of %s", ctx.job_id)
        Logger(child=True).warning(f"powertools line of {ctx.job_id}")
        return "ok"

    registry.register("test.chatty", chatty)
    run_a, body_a = due_job(env, "job_log_a", "test.chatty")
    run_b, body_b = due_job(env, "job_log_b", "test.chatty")
    event = sqs_event(body_a)
    second = dict(event["Records"][0], messageId="b-1", body=body_b)
    event["Records"].append(second)
    worker = lambdas.load("worker")
    capsys.readouterr()
    # When the worker Lambda runs both runs in one batch
    out = worker.lambda_handler(event, lambdas.LambdaContext("worker"))
    logging.getLogger("tests.chatty").warning("after the runs")
    # Then each of the handler's lines is a JSON line with its own run's keys, and a line after
    # the runs has none
    assert out == {"batchItemFailures": []}
    lines = {d["message"]: d for d in printed_json(capsys.readouterr().out) if "message" in d}
    for job_id, run_id in (("job_log_a", run_a), ("job_log_b", run_b)):
        for message in (f"stdlib line of {job_id}", f"powertools line of {job_id}"):
            assert {k: lines[message].get(k) for k in ("job_id", "run_id", "tenant")} == {
                "job_id": job_id,
                "run_id": run_id,
                "tenant": "tenant-a",
            }
    assert "run_id" not in lines["after the runs"]


def test_the_worker_entry_point_counts_an_operation_chunk_as_an_operation_not_a_run(
    env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an operation chunk's message for an operation that is over (or never was)
    body = OperationMessage(operation_id="op_gone", chunk=0).model_dump_json()
    worker = lambdas.load("worker")
    capsys.readouterr()
    # When the worker Lambda processes it
    worker.lambda_handler(sqs_event(body), lambdas.LambdaContext("worker"))
    # Then its EMF document counts Operations_stale, and no Runs_ figure at all
    [doc] = [d for d in printed_json(capsys.readouterr().out) if "_aws" in d]
    (directive,) = doc["_aws"]["CloudWatchMetrics"]
    names = [m["Name"] for m in directive["Metrics"]]
    assert names == [telemetry.operations("stale")] and doc[telemetry.operations("stale")] == [1.0], names
