"""A job's alert policy is stored compactly on the job item, and is absent from it when unset."""

from __future__ import annotations

import boto3

from jobsched.domain.alerts import AlertPolicy
from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.wiring import Services


def job_item(svc: Services, job_id: str) -> dict:
    return boto3.client("dynamodb").get_item(
        TableName=svc.settings.jobs_table, Key={"PK": {"S": f"JOB#{job_id}"}, "SK": {"S": "META"}}
    )["Item"]


def test_the_alert_policy_is_one_short_attribute_and_survives_a_round_trip(svc: Services) -> None:
    # Given a job created with an alert policy
    policy = AlertPolicy(on=("failed", "dead_letter", "late"), late_after_seconds=300)
    created = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", alerts=policy),
        tenant="t",
        idempotency_key=None,
    )
    # Then the item holds it as one short string, and the job reads back with it
    assert job_item(svc, created.job_id)["alerts"] == {"S": "failed,dead_letter,late@300"}
    assert svc.job_service.get(created.job_id, tenant="t").job.alerts == policy
    # When the policy is cleared
    svc.schedule.edit(created.job_id, PatchJobRequest.model_validate({"alerts": None}), tenant="t")
    # Then the attribute is gone from the item
    assert "alerts" not in job_item(svc, created.job_id)
    assert svc.job_service.get(created.job_id, tenant="t").job.alerts is None
