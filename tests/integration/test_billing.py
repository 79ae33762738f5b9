"""The cost benchmark's billing model (bench/billing.py) on small hand-made cases, so it cannot drift.

A table with one GSI ("by_owner": owner/created, INCLUDE "title"), on moto in-process; every case
is one request and the units DynamoDB on demand would bill for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from bench.billing import Meter, bill_write, item_size, shape_from_description
from botocore.exceptions import ClientError
from moto import mock_aws

TABLE = "billing-test"


@pytest.fixture
def metered() -> Iterator[tuple[Any, Meter]]:
    """A DynamoDB client whose calls the meter bills, and the meter."""
    with mock_aws():
        plain = boto3.session.Session(region_name="us-east-1")
        admin = plain.client("dynamodb")
        admin.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": "SK", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": a, "AttributeType": "S"} for a in ("PK", "SK", "owner", "created")
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_owner",
                    "KeySchema": [
                        {"AttributeName": "owner", "KeyType": "HASH"},
                        {"AttributeName": "created", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["title"]},
                }
            ],
        )
        shape = shape_from_description(admin.describe_table(TableName=TABLE)["Table"])
        meter = Meter(tables={TABLE: shape}, reader=admin)
        meter.serialise(plain)
        billed = boto3.session.Session(region_name="us-east-1")
        meter.attach(billed, source="app")
        yield billed.client("dynamodb"), meter


def key(pk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": "META"}}


def wru(meter: Meter, before: float) -> float:
    return meter.snapshot().total_wru - before


def test_it_sizes_items_by_dynamodbs_rules() -> None:
    # name bytes + value bytes; numbers 1 byte per 2 significant digits + 1; maps 3 + 1 per element
    assert item_size({"PK": {"S": "abc"}}) == 2 + 3
    assert item_size({"n": {"N": "12345"}}) == 1 + 3 + 1
    assert item_size({"n": {"N": "1000"}}) == 1 + 1 + 1  # trailing zeroes trimmed
    assert item_size({"m": {"M": {"a": {"S": "xy"}, "b": {"BOOL": True}}}}) == 1 + 3 + (1 + 2 + 1) + (
        1 + 1 + 1
    )
    assert item_size({"l": {"L": [{"S": "a"}, {"NULL": True}]}}) == 1 + 3 + (1 + 1) + (1 + 1)
    assert item_size({"ss": {"SS": ["ab", "c"]}}) == 2 + 3


def test_a_put_of_a_one_and_a_half_kb_item_costs_two_write_units(metered: tuple[Any, Meter]) -> None:
    client, meter = metered
    client.put_item(TableName=TABLE, Item={**key("a"), "blob": {"S": "x" * 1536}})
    usage = meter.snapshot()
    # "table:<name>" splits the base-table units by table (for the capacity plan): not billed twice
    assert usage.total_wru == 2 and usage.wru == {"table": 2, f"table:{TABLE}": 2}
    assert usage.calls == {"DynamoDB.PutItem": 1}


def test_an_update_that_moves_an_index_key_costs_one_plus_a_delete_and_a_put(
    metered: tuple[Any, Meter],
) -> None:
    client, meter = metered
    client.put_item(
        TableName=TABLE, Item={**key("a"), "owner": {"S": "ann"}, "created": {"S": "1"}, "title": {"S": "t"}}
    )
    assert meter.snapshot().wru == {"table": 1, f"table:{TABLE}": 1, "index:by_owner": 1}  # one put
    before = meter.snapshot().total_wru
    client.update_item(
        TableName=TABLE,
        Key=key("a"),
        UpdateExpression="SET #o = :bob",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":bob": {"S": "bob"}},
    )
    assert wru(meter, before) == 1 + 2


def test_an_update_of_a_projected_attribute_writes_the_index_once_and_removing_a_key_deletes(
    metered: tuple[Any, Meter],
) -> None:
    client, meter = metered
    client.put_item(TableName=TABLE, Item={**key("a"), "owner": {"S": "ann"}, "created": {"S": "1"}})
    before = meter.snapshot().total_wru
    client.update_item(
        TableName=TABLE,
        Key=key("a"),
        UpdateExpression="SET title = :t",
        ExpressionAttributeValues={":t": {"S": "new"}},
    )
    assert wru(meter, before) == 1 + 1
    before = meter.snapshot().total_wru
    client.update_item(TableName=TABLE, Key=key("a"), UpdateExpression="REMOVE created")
    assert wru(meter, before) == 1 + 1  # the entry leaves the sparse index: one delete


def test_an_update_not_touching_projected_attributes_writes_no_index(metered: tuple[Any, Meter]) -> None:
    client, meter = metered
    client.put_item(TableName=TABLE, Item={**key("a"), "owner": {"S": "ann"}, "created": {"S": "1"}})
    before = meter.snapshot()
    client.update_item(
        TableName=TABLE,
        Key=key("a"),
        UpdateExpression="SET lease = :l",
        ExpressionAttributeValues={":l": {"S": "worker-1"}},
    )
    after = meter.snapshot()
    assert after.total_wru - before.total_wru == 1
    assert after.wru["index:by_owner"] == before.wru["index:by_owner"]


def test_a_transaction_doubles_every_write_and_a_condition_check_costs_a_write(
    metered: tuple[Any, Meter],
) -> None:
    client, meter = metered
    client.put_item(TableName=TABLE, Item=key("checked"))
    before = meter.snapshot().total_wru
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": {**key("a"), "owner": {"S": "ann"}, "created": {"S": "1"}}}},
            {"Put": {"TableName": TABLE, "Item": key("b")}},
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": key("checked"),
                    "ConditionExpression": "attribute_exists(PK)",
                }
            },
        ]
    )
    # (1 + 1 index) + 1 + 1 condition check = 4, doubled
    assert wru(meter, before) == 8


def test_a_refused_conditional_write_still_costs_the_stored_items_size(metered: tuple[Any, Meter]) -> None:
    client, meter = metered
    client.put_item(TableName=TABLE, Item={**key("a"), "blob": {"S": "x" * 2500}})
    before = meter.snapshot().total_wru
    with pytest.raises(ClientError):
        client.put_item(TableName=TABLE, Item=key("a"), ConditionExpression="attribute_not_exists(PK)")
    assert wru(meter, before) == 3


def test_reads_cost_four_kb_units_halved_when_eventually_consistent(metered: tuple[Any, Meter]) -> None:
    client, meter = metered
    client.put_item(
        TableName=TABLE,
        Item={**key("a"), "owner": {"S": "ann"}, "created": {"S": "1"}, "blob": {"S": "x" * 5000}},
    )
    rru = meter.snapshot().rru
    client.get_item(TableName=TABLE, Key=key("a"), ConsistentRead=True)
    assert meter.snapshot().rru - rru == 2
    client.get_item(TableName=TABLE, Key=key("a"))
    client.get_item(TableName=TABLE, Key=key("missing"))
    assert meter.snapshot().rru - rru == 2 + 1 + 0.5
    rru = meter.snapshot().rru
    # the index entry holds no blob: one 4 KB unit, eventually consistent; a filter does not discount
    client.query(
        TableName=TABLE,
        IndexName="by_owner",
        KeyConditionExpression="#o = :o",
        FilterExpression="attribute_exists(nothing)",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "ann"}},
    )
    client.query(
        TableName=TABLE,
        KeyConditionExpression="PK = :pk",
        ProjectionExpression="PK",
        ExpressionAttributeValues={":pk": {"S": "a"}},
        ConsistentRead=True,
    )
    assert meter.snapshot().rru - rru == 0.5 + 2


def test_units_are_booked_to_the_phase_and_the_table_or_index_that_spent_them(
    metered: tuple[Any, Meter],
) -> None:
    client, meter = metered
    meter.phase = "dispatch"
    client.put_item(TableName=TABLE, Item={**key("a"), "owner": {"S": "ann"}, "created": {"S": "1"}})
    client.query(
        TableName=TABLE,
        IndexName="by_owner",
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "ann"}},
    )
    meter.phase = "run"
    client.get_item(TableName=TABLE, Key=key("a"), ConsistentRead=True)
    client.update_item(
        TableName=TABLE,
        Key=key("a"),
        UpdateExpression="SET note = :n",
        ExpressionAttributeValues={":n": {"S": "x"}},
    )
    by_phase = meter.snapshot().by_phase
    assert by_phase == {
        f"dispatch|wru|table:{TABLE}": 1,
        "dispatch|wru|index:by_owner": 1,
        "dispatch|rru|index:by_owner": 0.5,
        f"run|rru|table:{TABLE}": 1,
        f"run|wru|table:{TABLE}": 1,  # "note" is not projected: no index write
    }
    usage = meter.snapshot()
    assert sum(v for k, v in by_phase.items() if "|wru|" in k) == usage.total_wru
    assert sum(v for k, v in by_phase.items() if "|rru|" in k) == usage.rru


def test_the_pure_model_bills_an_index_entry_that_appears_as_one_put() -> None:
    shape = shape_from_description(
        {
            "TableName": "t",
            "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}],
            "GlobalSecondaryIndexes": [
                {
                    "IndexName": "i",
                    "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
        }
    )
    bill = bill_write(shape, {"PK": {"S": "a"}}, {"PK": {"S": "a"}, "k": {"S": "x"}})
    assert (bill.table, dict(bill.indexes)) == (1, {"i": 1})
    assert (
        bill_write(
            shape,
            {"PK": {"S": "a"}, "k": {"S": "x"}, "other": {"S": "y"}},
            {"PK": {"S": "a"}, "k": {"S": "x"}},
        ).indexes
        == {}
    )


def test_an_sqs_send_costs_a_request_per_64_kb_chunk_of_payload() -> None:
    with mock_aws():
        meter = Meter(tables={}, reader=None)
        billed = boto3.session.Session(region_name="us-east-1")
        meter.attach(billed, source="app")
        sqs = billed.client("sqs")
        url = sqs.create_queue(QueueName="billing-test")["QueueUrl"]
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x" * 40_000} for i in range(2)]
        )
        sqs.send_message(QueueUrl=url, MessageBody="small")
        usage = meter.snapshot()
    assert usage.calls["SQS.SendMessageBatch"] == 1 and usage.sqs_requests == 1 + 2 + 1  # create, 80 KB, 5 B
