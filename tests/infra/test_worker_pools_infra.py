"""The workers table (external worker pools) and the least-privilege grants on it."""

from __future__ import annotations

import pytest

from jobsched import constants as c
from jobsched import resources
from tests.infra.synth import Synth, shared_synth

pytestmark = pytest.mark.infra

WORKERS = resources.WORKERS_TABLE.logical_id


@pytest.fixture(scope="module")
def synth() -> Synth:
    return shared_synth()  # raises on an unacknowledged cdk-nag error


def test_the_workers_table_is_keyed_by_tenant_and_worker_with_no_index(synth: Synth) -> None:
    table = synth.resource(WORKERS)
    props = table["Properties"]

    assert table["DeletionPolicy"] == "Retain"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert "GlobalSecondaryIndexes" not in props


def test_only_the_api_and_the_worker_handing_off_may_touch_the_workers_table(synth: Synth) -> None:
    # Then the api makes exactly its adapter's calls (no Scan, no batch writes), the worker only puts
    # a due run in its pool's queue, and no other function makes any
    assert synth.actions_on("api", WORKERS) == {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:Query",
    }
    assert synth.actions_on("worker", WORKERS) == {"dynamodb:PutItem"}
    for name in ("dispatcher", "reconciler"):
        assert not synth.actions_on(name, WORKERS), name
    env = synth.resource(synth.logical_id(synth.function("api")))["Properties"]["Environment"]["Variables"]
    assert c.WORKERS_TABLE_ENV in env
