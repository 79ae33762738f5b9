"""The alerts table, its recent index, and the grants of those that raise and list alerts."""

from __future__ import annotations

import pytest

from jobsched import constants as c
from jobsched import resources
from tests.infra.synth import Synth, shared_synth

pytestmark = pytest.mark.infra

ALERTS = resources.ALERTS_TABLE.logical_id


@pytest.fixture(scope="module")
def synth() -> Synth:
    return shared_synth()  # raises on an unacknowledged cdk-nag error


def test_the_alerts_table_sorts_each_tenants_partition_by_time_in_a_local_index(synth: Synth) -> None:
    props = synth.resource(ALERTS)["Properties"]

    assert props["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert props["LocalSecondaryIndexes"] == [
        {
            "IndexName": resources.ALERTS_RECENT_INDEX.name,
            "KeySchema": [
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": resources.ALERTS_RECENT_INDEX.sort_key, "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        }
    ]
    assert "GlobalSecondaryIndexes" not in props


@pytest.mark.parametrize("name", ["api", "dispatcher", "worker", "reconciler"])
def test_each_function_that_detects_alerts_may_put_one_and_publish_it_and_nothing_more(
    synth: Synth, name: str
) -> None:
    # Given what the function may do on the alerts table (its ARN and its index's)
    on_table = synth.actions_on(name, ALERTS)
    # Then it keeps an alert with one conditional PutItem and never updates, deletes or scans
    assert on_table - {"dynamodb:Query"} == {"dynamodb:PutItem"}
    # and it publishes to the alert topic
    assert "sns:Publish" in synth.actions_on(name, resources.ALERT_TOPIC.logical_id)
    # and it is told where the table is
    env = synth.resource(synth.logical_id(synth.function(name)))["Properties"]["Environment"]["Variables"]
    assert env[c.ALERTS_TABLE_ENV] == {"Ref": ALERTS}


def test_only_the_api_reads_alerts_and_only_through_the_recent_index(synth: Synth) -> None:
    index_arn = f"/index/{resources.ALERTS_RECENT_INDEX.name}"
    for name in ("api", "dispatcher", "worker", "reconciler"):
        reads = {
            str(s["Resource"])
            for s in synth.policy_statements(name)
            if s["Effect"] == "Allow"
            and ALERTS in str(s["Resource"])
            and "dynamodb:Query" in str(s["Action"])
        }
        assert reads == ({s for s in reads if index_arn in s} if name == "api" else set()), (name, reads)
        assert bool(reads) == (name == "api")
