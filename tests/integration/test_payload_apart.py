"""A large payload is stored in an item of its own, so the job item every hot write rewrites stays small."""

from __future__ import annotations

import json
from datetime import timedelta

import boto3
import pytest

from jobsched.adapters.dynamodb import INLINE_PAYLOAD_BYTES
from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.domain.status import RunStatus
from jobsched.ports import FakeClock
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import Pump

BIG = {"blob": "x" * 4000, "n": 1}


def items_of(svc: Services, job_id: str) -> dict[str, dict]:
    """The job's items in the jobs table, by sort key."""
    got = boto3.client("dynamodb").query(
        TableName=svc.settings.jobs_table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": f"JOB#{job_id}"}},
        ConsistentRead=True,
    )["Items"]
    return {item["SK"]["S"]: item for item in got}


def size(item: dict) -> int:
    return len(json.dumps(item))


def test_a_4_kb_payload_is_stored_apart_and_the_run_gets_it(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a job every minute with a 4 KB payload
    created = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", payload=BIG),
        tenant="t",
        idempotency_key="big",
    )
    # Then the job item names the payload and stays under 1 KB; the payload has an item of its own
    items = items_of(svc, created.job_id)
    meta = items.pop("META")
    assert "payload" not in meta and "payload_ref" in meta and size(meta) < 1024
    [(sk, stored)] = items.items()
    assert sk == f"PAYLOAD#{meta['payload_ref']['S']}" and json.loads(stored["payload"]["S"]) == BIG
    # and reading the job answers it whole
    assert svc.job_service.get(created.job_id, tenant="t").job.payload == BIG
    # When its first tick runs
    clock.set(T0 + timedelta(minutes=1))
    svc.dispatcher.dispatch_all()
    assert pump.run_due(T0 + timedelta(minutes=2))["succeeded"] >= 1
    # Then the handler got the whole payload
    [run, *_] = svc.job_service.get(created.job_id, tenant="t").runs
    assert run.status == RunStatus.SUCCEEDED and run.result == BIG


def test_an_edit_moves_the_payload_in_and_out_of_the_job_item(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    created = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", payload={"small": 1}),
        tenant="t",
        idempotency_key=None,
    )
    assert "payload" in items_of(svc, created.job_id)["META"]
    # When the payload grows past the inline limit, the job item names it instead
    edited = svc.schedule.edit(created.job_id, PatchJobRequest(payload=BIG), tenant="t")
    assert edited.payload == BIG
    meta = items_of(svc, created.job_id)["META"]
    assert "payload" not in meta and "payload_ref" in meta
    assert svc.jobs.get_job(created.job_id).payload == BIG  # type: ignore[union-attr]
    # and back: a small payload is inline again, the reference gone
    svc.schedule.edit(created.job_id, PatchJobRequest(payload={"small": 2}), tenant="t")
    meta = items_of(svc, created.job_id)["META"]
    assert json.loads(meta["payload"]["S"]) == {"small": 2} and "payload_ref" not in meta
    assert svc.jobs.get_job(created.job_id).payload == {"small": 2}  # type: ignore[union-attr]


def test_an_edit_refused_for_its_version_leaves_no_payload_behind(svc: Services) -> None:
    created = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *"),
        tenant="t",
        idempotency_key=None,
    )
    job = svc.jobs.get_job(created.job_id)
    assert job is not None
    stale = job.model_copy(update={"payload": BIG})
    assert svc.jobs.save_definition(stale, expected_version=job.version + 1) is False
    assert list(items_of(svc, created.job_id)) == ["META"]


def test_the_limit_is_on_the_compact_json(svc: Services) -> None:
    at_limit = {"b": "y" * (INLINE_PAYLOAD_BYTES - len('{"b":""}'))}
    created = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", payload=at_limit),
        tenant="t",
        idempotency_key=None,
    )
    assert list(items_of(svc, created.job_id)) == ["META"]
    one_more = {"b": at_limit["b"] + "y"}
    created = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", payload=one_more),
        tenant="t",
        idempotency_key=None,
    )
    assert len(items_of(svc, created.job_id)) == 2


@pytest.mark.parametrize("policy", ["skip", "allow"])
def test_a_run_of_a_big_payload_job_reads_its_payload_once_eventually_consistent(
    svc: Services, pump: Pump, clock: FakeClock, policy: str
) -> None:
    svc.job_service.submit(
        CreateJobRequest(
            type="recurring", handler="demo.echo", cron_expr="* * * * *", payload=BIG, overlap_policy=policy
        ),
        tenant="t",
        idempotency_key=None,
    )
    clock.set(T0 + timedelta(minutes=1))
    svc.dispatcher.dispatch_all()
    gets: list[dict] = []
    svc.jobs.client.meta.events.register(
        "before-parameter-build.dynamodb.GetItem", lambda params, **_: gets.append(dict(params))
    )
    assert pump.run_due(T0 + timedelta(minutes=1, seconds=59))["succeeded"] == 1
    # Then the run read its payload item once, eventually consistent (half a read unit per 4 KB),
    # on top of what a small job's run reads
    payload_reads = [g for g in gets if g["Key"]["SK"]["S"].startswith("PAYLOAD#")]
    assert len(payload_reads) == 1 and payload_reads[0]["ConsistentRead"] is False


def test_a_one_off_reads_its_payload_once_although_its_run_reads_the_job_three_times(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # The run reads the job, again for its dependants, and gets it back when it completes it:
    # the payload, content-addressed, is read once.
    svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5), payload=BIG),
        tenant="t",
        idempotency_key=None,
    )
    gets: list[dict] = []
    svc.jobs.client.meta.events.register(
        "before-parameter-build.dynamodb.GetItem", lambda params, **_: gets.append(dict(params))
    )
    assert pump.run_due(T0 + timedelta(seconds=5))["succeeded"] == 1
    assert len([g for g in gets if g["Key"]["SK"]["S"].startswith("PAYLOAD#")]) == 1
