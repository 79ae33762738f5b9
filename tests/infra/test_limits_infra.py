"""The limits and quotas tables and their grants: the worker takes key slots, the api takes a day's
backfill budget and reads quotas; no function may write a quota (an operator's credentials do)."""

from __future__ import annotations

import pytest

from jobsched import constants as c
from jobsched import resources
from tests.infra.synth import Synth, shared_synth

pytestmark = pytest.mark.infra

LIMITS = resources.LIMITS_TABLE.logical_id
QUOTAS = resources.QUOTAS_TABLE.logical_id
FUNCTIONS = ("api", "dispatcher", "worker", "reconciler")


@pytest.fixture(scope="module")
def synth() -> Synth:
    return shared_synth()  # raises on an unacknowledged cdk-nag error


@pytest.mark.parametrize("logical_id", [LIMITS, QUOTAS])
def test_the_limits_and_quotas_tables_are_keyed_as_the_specs_say_and_deletion_protected(
    synth: Synth, logical_id: str
) -> None:
    props = synth.resource(logical_id)["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert props["DeletionProtectionEnabled"] is True
    assert "GlobalSecondaryIndexes" not in props


def test_the_limits_tables_day_budgets_expire(synth: Synth) -> None:
    ttl = synth.resource(LIMITS)["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expires_at", "Enabled": True}


def test_the_worker_takes_renews_and_frees_key_slots_and_does_nothing_else_with_limits(synth: Synth) -> None:
    assert synth.actions_on("worker", LIMITS) == {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    }


def test_the_api_takes_backfill_budgets_and_only_reads_quotas(synth: Synth) -> None:
    assert synth.actions_on("api", LIMITS) == {"dynamodb:UpdateItem"}
    assert synth.actions_on("api", QUOTAS) == {"dynamodb:GetItem"}


@pytest.mark.parametrize("name", ["dispatcher", "worker"])
def test_the_dispatcher_and_the_worker_only_read_quotas_for_run_time_limits(
    synth: Synth, name: str
) -> None:
    # max_runs_per_second at hand-over, max_concurrent_runs at a run's start (docs/api.md)
    assert synth.actions_on(name, QUOTAS) == {"dynamodb:GetItem"}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_function_may_write_a_quota(synth: Synth, name: str) -> None:
    writes = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
    assert synth.actions_on(name, QUOTAS) & writes == set()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_function_is_told_where_the_limits_and_quotas_are(synth: Synth, name: str) -> None:
    env = synth.resource(synth.logical_id(synth.function(name)))["Properties"]["Environment"]["Variables"]
    assert env[c.LIMITS_TABLE_ENV] == {"Ref": LIMITS}
    assert env[c.QUOTAS_TABLE_ENV] == {"Ref": QUOTAS}


CAPACITY = resources.FARGATE_VCPU_TABLE.logical_id


def test_the_fargate_vcpu_table_is_keyed_by_its_spec_with_no_ttl_to_drop_a_reservation(synth: Synth) -> None:
    props = synth.resource(CAPACITY)["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert props["DeletionProtectionEnabled"] is True
    assert "TimeToLiveSpecification" not in props


def test_only_the_worker_reserves_releases_and_sweeps_fargate_vcpu(synth: Synth) -> None:
    assert synth.actions_on("worker", CAPACITY) == {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:Query",
    }
    for name in ("api", "dispatcher", "reconciler"):
        assert synth.actions_on(name, CAPACITY) == set(), name


def test_the_functions_find_the_fargate_vcpu_table_and_the_accounts_vcpu_quota(synth: Synth) -> None:
    env = synth.resource(synth.logical_id(synth.function("worker")))["Properties"]["Environment"]["Variables"]
    assert env[c.FARGATE_VCPU_TABLE_ENV] == {"Ref": CAPACITY}
    assert env[c.FARGATE_VCPU_QUOTA_ENV] == "6"
