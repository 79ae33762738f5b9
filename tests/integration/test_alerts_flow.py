"""Alerts through moto: the worker's and the failure workflow's (Step Functions executing for real)
reach an SNS subscriber with their tenant, job_id and kind attributes, once, and are listed.

Real time (the moto server executes the workflow); every job dead-letters on its first attempt, so
no Wait state sleeps.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from jobsched.domain.alerts import AlertPolicy
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import RunStatus
from jobsched.wiring import Services
from tests.support import await_workflows, drain, pump_until

pytestmark = pytest.mark.slow


def subscribe(svc: Services, filter_policy: dict[str, list[str]] | None = None) -> str:
    """An SQS queue subscribed to the alert topic (optionally filtered); its URL."""
    sqs, sns = svc.queue.client, svc.sns  # type: ignore[attr-defined]
    url = sqs.create_queue(QueueName=f"alerts-{len(sqs.list_queues().get('QueueUrls', []))}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    attributes = {"FilterPolicy": json.dumps(filter_policy)} if filter_policy else {}
    sns.subscribe(TopicArn=svc.settings.alert_topic_arn, Protocol="sqs", Endpoint=arn, Attributes=attributes)
    return str(url)


def received(svc: Services, url: str) -> list[dict[str, Any]]:
    """Every notification in the queue: its attributes as {name: value}, and its message (JSON)."""
    out: list[dict[str, Any]] = []
    while batch := svc.queue.client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for m in batch:
            envelope = json.loads(m["Body"])
            attributes = {k: v["Value"] for k, v in envelope.get("MessageAttributes", {}).items()}
            out.append({"attributes": attributes, "message": json.loads(envelope["Message"])})
            svc.queue.client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return out


def entered(svc: Services, prefix: str) -> list[str]:
    """The states the failure workflow's one execution named `prefix`-... entered, in order."""
    sfn = svc.failures.state_machines.client  # type: ignore[attr-defined]
    executions = sfn.list_executions(stateMachineArn=svc.settings.failure_workflow_arn)["executions"]
    [execution] = [e for e in executions if e["name"].startswith(prefix)]
    events = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if e["type"].endswith("StateEntered")]


def failing_job(svc: Services, alerts: AlertPolicy | None, tenant: str = "t") -> str:
    request = CreateJobRequest(
        type="one_off", handler="demo.fail", run_at=datetime.now(UTC), max_attempts=1, alerts=alerts
    )
    return svc.job_service.submit(request, tenant=tenant, idempotency_key=None).job_id


def dead(svc: Services, job_id: str) -> bool:
    runs = svc.runs.recent(job_id, limit=1)
    return bool(runs) and runs[0].status == RunStatus.DEAD_LETTER


def test_a_dead_letter_reaches_subscribers_with_its_attributes_once_and_is_listed(served: Services) -> None:
    svc = served
    # Given a subscriber of every alert, and one that filters on tenant t's dead letters
    everything = subscribe(svc)
    dead_letters_of_t = subscribe(svc, {"tenant": ["t"], "kind": ["dead_letter"]})
    # and a job of tenant t that alerts on failures and dead letters, and fails at once
    job_id = failing_job(svc, AlertPolicy(on=("failed", "dead_letter")))
    # When its only attempt fails and the failure workflow dead-letters it
    pump_until(svc, lambda: dead(svc, job_id))
    await_workflows(svc)
    # Then the worker's "failed" and the workflow's "dead_letter" reach the subscriber, each with
    # the tenant, job_id and kind attributes, about the same run
    [run] = svc.runs.recent(job_id, limit=1)
    got = received(svc, everything)
    assert sorted(n["attributes"]["kind"] for n in got) == ["dead_letter", "failed"]
    assert all(
        n["attributes"] == {"tenant": "t", "job_id": job_id, "kind": n["attributes"]["kind"]} for n in got
    )
    assert {n["message"]["run_id"] for n in got} == {run.run_id}
    # and the filtering subscriber got the dead letter alone
    [only] = received(svc, dead_letters_of_t)
    assert only["attributes"]["kind"] == "dead_letter" and only["message"]["error_type"] == "DemoFailure"
    # and both are listed for tenant t, newest first, and for no one else
    assert svc.alerts is not None
    page = svc.alerts.recent(tenant="t", since=None, cursor=None, limit=10)
    assert sorted(a.kind for a in page.items) == ["dead_letter", "failed"]
    assert svc.alerts.recent(tenant="other", since=None, cursor=None, limit=10).items == []
    # When the same failure is handed over once more (the reconciler's poison path: its own execution)
    job = svc.jobs.get_job(job_id)
    assert job is not None
    svc.failures.hand_over(
        job, run.model_copy(update={"status": RunStatus.FAILED}), retryable=False, origin="poison"
    )
    drain(svc)
    # Then its execution found the alert kept (RecordAlert refused) and published nothing
    assert entered(svc, "poison") == [
        *("Route", "CanRetry", "DeadLetter", "DeadJobRun", "FailJob"),
        *("AlertWanted", "RecordAlert", "Propagate", "Done"),
    ]
    # and no subscriber hears of it again
    assert received(svc, everything) == []


def test_a_job_without_alerts_still_alerts_its_dead_letter_and_nothing_else(served: Services) -> None:
    svc = served
    everything = subscribe(svc)
    job_id = failing_job(svc, None)
    pump_until(svc, lambda: dead(svc, job_id))
    await_workflows(svc)
    got = received(svc, everything)
    assert [n["attributes"] for n in got] == [{"tenant": "t", "job_id": job_id, "kind": "dead_letter"}]


def test_a_job_that_does_not_want_its_dead_letters_publishes_none(served: Services) -> None:
    svc = served
    everything = subscribe(svc)
    job_id = failing_job(svc, AlertPolicy(on=("late",), late_after_seconds=600))
    pump_until(svc, lambda: dead(svc, job_id))
    await_workflows(svc)
    assert received(svc, everything) == []
