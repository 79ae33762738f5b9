"""The AlertStore and AlertPublisher contracts (jobsched.ports): one alert per id, a tenant's newest
first with a cursor and `since`, never another tenant's; published with its filterable attributes.
On the in-memory fakes and on the alerts table + SNS (moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from jobsched import resources
from jobsched.adapters.alerts import DynamoDBAlertStore, SnsAlertPublisher
from jobsched.adapters.memory import MemoryAlertPublisher, MemoryAlertStore
from jobsched.domain.alerts import Alert
from jobsched.ports import AlertStore
from tests.contract.conftest import T0


def alert(n: int, *, tenant: str = "t1", kind: str = "failed", minutes: int | None = None) -> Alert:
    """Alert number n, raised n minutes after T0 (or `minutes`)."""
    return Alert.model_validate(
        {
            "alert_id": f"job_{n}-1000.{kind}",
            "tenant": tenant,
            "job_id": f"job_{n}",
            "run_id": f"job_{n}-1000",
            "kind": kind,
            "scheduled_for": T0,
            "at": T0 + timedelta(minutes=n if minutes is None else minutes),
            "detail": f"number {n}",
        }
    )


def _moto_table() -> str:
    made = resources.create_local_resources(
        prefix="alerts", dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs")
    )
    return made[resources.ALERTS_TABLE.logical_id]


@pytest.fixture(params=["memory", "moto"])
def store(request: pytest.FixtureRequest) -> Iterator[AlertStore]:
    if request.param == "memory":
        yield MemoryAlertStore()
        return
    with mock_aws():
        yield DynamoDBAlertStore(client=boto3.client("dynamodb"), table=_moto_table())


def every_page(store: AlertStore, tenant: str, *, limit: int, since: Any = None) -> list[list[str]]:
    pages, start = [], None
    while True:
        items, start = store.recent(tenant, since=since, start=start, limit=limit)
        pages.append([a.alert_id for a in items])
        if start is None:
            return [p for p in pages if p]


def test_an_alert_is_kept_once_per_id_and_the_second_record_changes_nothing(store: AlertStore) -> None:
    # Given an alert kept once
    assert store.record(alert(1)) is True
    # When the same id is recorded again, later and with another detail
    again = alert(1, minutes=9).model_copy(update={"detail": "again"})
    # Then it is refused, and the first stands
    assert store.record(again) is False
    [kept], _ = store.recent("t1", since=None, start=None, limit=10)
    assert kept == alert(1)


def test_a_tenants_alerts_come_newest_first_page_by_page(store: AlertStore) -> None:
    # Given five alerts of one tenant, raised a minute apart (recorded out of order)
    for n in (3, 1, 5, 2, 4):
        store.record(alert(n))
    # When they are read two at a time
    pages = every_page(store, "t1", limit=2)
    # Then the pages hold all five, newest first, none twice
    assert [i for page in pages for i in page] == [f"job_{n}-1000.failed" for n in (5, 4, 3, 2, 1)]
    assert [len(p) for p in pages] == [2, 2, 1]


def test_since_keeps_only_the_alerts_raised_at_or_after_it(store: AlertStore) -> None:
    for n in (1, 2, 3, 4):
        store.record(alert(n))
    items, _ = store.recent("t1", since=T0 + timedelta(minutes=3), start=None, limit=10)
    assert [a.job_id for a in items] == ["job_4", "job_3"]


def test_another_tenants_alerts_are_never_listed(store: AlertStore) -> None:
    # Given alerts of two tenants, one with the very same alert id
    store.record(alert(1, tenant="t1"))
    store.record(alert(1, tenant="t2"))
    store.record(alert(2, tenant="t2"))
    # When each lists its own
    mine, _ = store.recent("t1", since=None, start=None, limit=10)
    theirs, _ = store.recent("t2", since=None, start=None, limit=10)
    # Then each sees only its own (the same id is kept once per tenant)
    assert [(a.tenant, a.job_id) for a in mine] == [("t1", "job_1")]
    assert [(a.tenant, a.job_id) for a in theirs] == [("t2", "job_2"), ("t2", "job_1")]


def test_the_workflow_item_is_the_item_record_keeps(store: AlertStore) -> None:
    # Given the item a workflow would write for an alert, written as the failure workflow writes it
    item = store.workflow_item(alert(7, kind="dead_letter"))
    assert item["PK"] == {"S": "TENANT#t1"} and item["SK"] == {"S": "job_7-1000.dead_letter"}
    # When record() is then asked to keep the same alert
    assert store.record(alert(7, kind="dead_letter")) is True
    # Then a second record is refused, as a workflow's put after it would be (attribute_not_exists)
    assert store.record(alert(7, kind="dead_letter")) is False


# -- the publisher ------------------------------------------------------------------------------------
def test_sns_publishes_the_alert_with_tenant_job_id_and_kind_attributes() -> None:
    with mock_aws():
        sns, sqs = boto3.client("sns"), boto3.client("sqs")
        topic = sns.create_topic(Name="alerts")["TopicArn"]
        queue = sqs.create_queue(QueueName="sub")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
        # When an alert is published
        SnsAlertPublisher(client=sns, topic_arn=topic).publish(alert(3, kind="late"))
        # Then the subscriber gets its JSON and the three String attributes
        [msg] = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0)["Messages"]
        envelope = json.loads(msg["Body"])
        attrs = {k: (v["Type"], v["Value"]) for k, v in envelope["MessageAttributes"].items()}
        assert attrs == {
            "tenant": ("String", "t1"),
            "job_id": ("String", "job_3"),
            "kind": ("String", "late"),
        }
        assert json.loads(envelope["Message"])["alert_id"] == "job_3-1000.late"


def test_the_memory_publisher_keeps_what_it_published_and_raises_what_it_is_told() -> None:
    from jobsched.errors import TransientStoreError

    publisher = MemoryAlertPublisher()
    publisher.publish(alert(1))
    publisher.failure = TransientStoreError("SNS is unavailable")
    with pytest.raises(TransientStoreError):
        publisher.publish(alert(2))
    assert publisher.published == [alert(1)]
