"""The alert adapters: raised alerts kept in the alerts table (DynamoDB), and published to the topic (SNS).

The item (resources.ALERTS_TABLE): PK "TENANT#<tenant>", SK the alert id (the conditional put on it
keeps one alert per (run, kind)), `at_key` "<at>#<alert id>" (the recent index: newest first), and
`expires_at` (the TTL, ALERT_RETENTION_SECONDS after it was raised).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobsched import resources
from jobsched.adapters.aws import Refused, aws_call
from jobsched.adapters.dynamodb.codec import dec, enc
from jobsched.domain import times
from jobsched.domain.alerts import ALERT_RETENTION_SECONDS, Alert
from jobsched.domain.alerts import alert_partition as tenant_pk
from jobsched.domain.records import Cursor

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

SUBJECTS = {
    "failed": "an attempt failed",
    "dead_letter": "a run was dead-lettered",
    "late": "a run started late",
    "missed": "a tick never ran",
    "skipped": "a tick was skipped",
}


def at_key(at: datetime, alert_id: str) -> str:
    """The recent index's sort key: time order, unique."""
    return f"{times.stored(at)}#{alert_id}"


def alert_item(alert: Alert) -> dict[str, Any]:
    """The stored form of an alert."""
    item: dict[str, Any] = {
        "PK": enc(tenant_pk(alert.tenant)),
        "SK": enc(alert.alert_id),
        "at_key": enc(at_key(alert.at, alert.alert_id)),
        "tenant": enc(alert.tenant),
        "job_id": enc(alert.job_id),
        "run_id": enc(alert.run_id),
        "kind": enc(alert.kind),
        "scheduled_for": enc(times.stored(alert.scheduled_for)),
        "at": enc(times.stored(alert.at)),
        "expires_at": {"N": str(int(alert.at.timestamp()) + ALERT_RETENTION_SECONDS)},
    }
    if alert.detail:
        item["detail"] = enc(alert.detail)
    return item


def alert_from_item(raw: dict[str, Any]) -> Alert:
    """Inverse of alert_item."""
    item = dec(raw)
    return Alert(
        alert_id=item["SK"],
        tenant=item["tenant"],
        job_id=item["job_id"],
        run_id=item["run_id"],
        kind=item["kind"],
        scheduled_for=times.parse_stored(item["scheduled_for"]),
        at=times.parse_stored(item["at"]),
        detail=item.get("detail", ""),
    )


def message_of(alert: Alert) -> str:
    """The published message: the alert as JSON, every time ISO-8601 with its offset."""
    return json.dumps(alert.model_dump(mode="json"), separators=(",", ":"))


def subject_of(alert: Alert) -> str:
    """SNS subjects are at most 100 characters."""
    return f"jobsched: {SUBJECTS[alert.kind]} ({alert.job_id})"[:100]


def attributes_of(alert: Alert) -> dict[str, Any]:
    """The message attributes subscribers filter on (String: a filter policy matches them exactly)."""
    return {
        name: {"DataType": "String", "StringValue": value}
        for name, value in (("tenant", alert.tenant), ("job_id", alert.job_id), ("kind", alert.kind))
    }


@dataclass
class DynamoDBAlertStore:
    """AlertStore on the alerts table."""

    client: DynamoDBClient
    table: str

    def record(self, alert: Alert) -> bool:
        """Keep it unless its id is kept already (one conditional PutItem)."""
        try:
            with aws_call("DynamoDB"):
                self.client.put_item(
                    TableName=self.table,
                    Item=alert_item(alert),
                    ConditionExpression="attribute_not_exists(PK)",
                )
        except Refused:
            return False
        return True

    def recent(
        self, tenant: str, *, since: datetime | None, start: Cursor | None, limit: int
    ) -> tuple[list[Alert], Cursor | None]:
        """One descending range read of the tenant's partition on the recent index."""
        values: dict[str, Any] = {":pk": enc(tenant_pk(tenant))}
        condition = "PK = :pk"
        if since is not None:
            condition += " AND at_key >= :since"
            values[":since"] = enc(times.stored(since))
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": resources.ALERTS_RECENT_INDEX.name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        with aws_call("DynamoDB"):
            page = self.client.query(**kwargs)
        last = page.get("LastEvaluatedKey")
        return [alert_from_item(i) for i in page.get("Items", [])], dict(last) if last else None

    def workflow_item(self, alert: Alert) -> dict[str, Any]:
        """The item record() writes."""
        return alert_item(alert)


@dataclass
class SnsAlertPublisher:
    """AlertPublisher on the stack's alert topic."""

    client: SNSClient
    topic_arn: str

    def publish(self, alert: Alert) -> None:
        """One Publish with the tenant, job_id and kind attributes."""
        with aws_call("SNS"):
            self.client.publish(
                TopicArn=self.topic_arn,
                Subject=subject_of(alert),
                Message=message_of(alert),
                MessageAttributes=attributes_of(alert),
            )


@dataclass
class NoAlertStore:
    """AlertStore where no alerts table is configured: it keeps nothing, so nothing is raised (a raise
    publishes only what the store kept) and the listing is empty. The failure workflow still
    publishes dead letters, unrecorded, as the alert topic always did."""

    def record(self, alert: Alert) -> bool:
        """Nothing is kept: False."""
        return False

    def recent(
        self, tenant: str, *, since: datetime | None, start: Cursor | None, limit: int
    ) -> tuple[list[Alert], Cursor | None]:
        """Nothing kept: an empty page."""
        return [], None

    def workflow_item(self, alert: Alert) -> dict[str, Any]:
        """The item a table would hold (unused: the workflow records nothing without a table)."""
        return alert_item(alert)


@dataclass
class NoAlertTopic:
    """AlertPublisher where no topic is configured: publishing does nothing."""

    def publish(self, alert: Alert) -> None:
        """Nothing to publish to."""
