"""The local stack's resources have the shape of what `cdk deploy` ships.

Both sides are built from jobsched.resources and jobsched.asl; this compares what each side
actually made, the synthesized CloudFormation and what the emulated AWS reports for the resources
`create_local_resources` created, so neither can drift from the one definition unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from jobsched import constants as c
from jobsched import resources
from jobsched.local.stack import LocalConfig
from jobsched.settings import Settings
from tests.infra.synth import Synth, shared_synth, state_machine_definition

pytestmark = pytest.mark.infra


@dataclass(frozen=True)
class Local:
    made: dict[str, str]  # logical id -> table name, queue URL or ARN
    dynamodb: Any
    sqs: Any
    stepfunctions: Any


@pytest.fixture(scope="module")
def synth() -> Synth:
    """The stack as infra/app.py synthesizes it (cdk-nag on), with a no-deps layer: once per session."""
    return shared_synth()  # raises on an unacknowledged cdk-nag error


@pytest.fixture(scope="module")
def template(synth: Synth) -> dict[str, Any]:
    return dict(synth.template.to_json()["Resources"])


@pytest.fixture(scope="module")
def local() -> Iterator[Local]:
    """Every local resource, created once in an emulated account as `jobsched local` creates them."""
    with mock_aws():
        clients = {name: boto3.client(name) for name in ("dynamodb", "sqs", "sns", "stepfunctions", "kms")}
        made = resources.create_local_resources(prefix="shape", **clients)
        yield Local(made, clients["dynamodb"], clients["sqs"], clients["stepfunctions"])


# --- both sides in one shape ------------------------------------------------------------------


def _key_schema(keys: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(k["AttributeName"], k["KeyType"]) for k in keys]  # order matters: HASH, then RANGE


def _index_shape(index: dict[str, Any]) -> dict[str, Any]:
    projection = index["Projection"]
    return {
        "KeySchema": _key_schema(index["KeySchema"]),
        "ProjectionType": projection["ProjectionType"],
        "NonKeyAttributes": set(projection.get("NonKeyAttributes", [])),
    }


def _table_shape(table: dict[str, Any], *, billing_mode: str, ttl_attribute: str | None) -> dict[str, Any]:
    return {
        "KeySchema": _key_schema(table["KeySchema"]),
        "AttributeDefinitions": {
            (a["AttributeName"], a["AttributeType"]) for a in table["AttributeDefinitions"]
        },
        "GlobalSecondaryIndexes": {
            i["IndexName"]: _index_shape(i) for i in table.get("GlobalSecondaryIndexes", [])
        },
        "LocalSecondaryIndexes": {
            i["IndexName"]: _index_shape(i) for i in table.get("LocalSecondaryIndexes", [])
        },
        "BillingMode": billing_mode,
        "TimeToLiveAttribute": ttl_attribute,
    }


def _cfn_table_shape(props: dict[str, Any]) -> dict[str, Any]:
    ttl = props.get("TimeToLiveSpecification", {})
    return _table_shape(
        props,
        billing_mode=props.get("BillingMode", "PROVISIONED"),
        ttl_attribute=ttl["AttributeName"] if ttl.get("Enabled") else None,
    )


def _local_table_shape(local: Local, name: str) -> dict[str, Any]:
    table = local.dynamodb.describe_table(TableName=name)["Table"]
    ttl = local.dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    return _table_shape(
        table,
        billing_mode=table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED"),
        ttl_attribute=ttl.get("AttributeName") if ttl.get("TimeToLiveStatus") == "ENABLED" else None,
    )


def _queue_arn(local: Local, logical_id: str) -> str:
    url = local.made[logical_id]
    arn: str = local.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return arn


# --- tables -----------------------------------------------------------------------------------


def test_it_makes_a_table_locally_for_every_table_the_template_deploys(template: dict[str, Any]) -> None:
    deployed = {k for k, v in template.items() if v["Type"] == "AWS::DynamoDB::Table"}

    assert deployed == {spec.logical_id for spec in ALL_TABLES}


ALL_TABLES = (
    *resources.TABLES,
    resources.SIGNING_SECRETS_TABLE,
    resources.ALERTS_TABLE,
    *resources.LIMIT_TABLES,
    resources.WORKERS_TABLE,
)


@pytest.mark.parametrize("spec", ALL_TABLES, ids=lambda s: s.logical_id)
def test_it_makes_each_local_table_with_the_deployed_keys_indexes_billing_and_ttl(
    template: dict[str, Any], local: Local, spec: resources.TableSpec
) -> None:
    deployed = _cfn_table_shape(template[spec.logical_id]["Properties"])
    emulated = _local_table_shape(local, local.made[spec.logical_id])

    assert emulated == deployed
    assert set(deployed["GlobalSecondaryIndexes"]) == {i.name for i in spec.indexes}  # not vacuous
    assert set(deployed["LocalSecondaryIndexes"]) == {i.name for i in spec.local_indexes}


# --- queues -----------------------------------------------------------------------------------


def test_it_makes_a_queue_locally_for_every_queue_the_template_deploys(template: dict[str, Any]) -> None:
    deployed = {k for k, v in template.items() if v["Type"] == "AWS::SQS::Queue"}

    assert deployed == {spec.logical_id for spec in resources.QUEUES}


@pytest.mark.parametrize("spec", resources.QUEUES, ids=lambda s: s.logical_id)
def test_it_makes_each_local_queue_with_the_deployed_timeouts_and_redrive(
    template: dict[str, Any], local: Local, spec: resources.QueueSpec
) -> None:
    props = template[spec.logical_id]["Properties"]
    attributes = local.sqs.get_queue_attributes(QueueUrl=local.made[spec.logical_id], AttributeNames=["All"])[
        "Attributes"
    ]

    assert int(attributes["VisibilityTimeout"]) == props["VisibilityTimeout"]
    assert int(attributes["MessageRetentionPeriod"]) == props["MessageRetentionPeriod"]
    deployed_redrive = props.get("RedrivePolicy")
    if deployed_redrive is None:
        assert "RedrivePolicy" not in attributes
        return
    emulated_redrive = json.loads(attributes["RedrivePolicy"])
    assert int(emulated_redrive["maxReceiveCount"]) == deployed_redrive["maxReceiveCount"]
    target_id, _ = deployed_redrive["deadLetterTargetArn"]["Fn::GetAtt"]
    assert emulated_redrive["deadLetterTargetArn"] == _queue_arn(local, target_id)


# --- the worker's event-source mapping ---------------------------------------------------------


def test_the_local_worker_takes_the_deployed_batches_and_runs_as_many_of_a_batch_at_once(
    synth: Synth, template: dict[str, Any]
) -> None:
    # Given the deployed worker mapping and the worker function's environment
    worker = synth.logical_id(synth.function("worker"))
    [mapping] = [
        v["Properties"]
        for v in template.values()
        if v["Type"] == "AWS::Lambda::EventSourceMapping"
        and v["Properties"]["FunctionName"] == {"Ref": worker}
    ]
    deployed_env = template[worker]["Properties"]["Environment"]["Variables"]
    # When the local stack is configured as `jobsched local` configures it (no JOBSCHED_* set)
    local_batch = LocalConfig().batch_size
    local_concurrency = Settings.from_env(local_env()).worker_concurrency
    # Then it plays the same mapping: batches as large, and as many of a batch's runs at once
    assert local_batch == mapping["BatchSize"] == resources.WORKER_EVENT_SOURCE.batch_size
    assert str(local_concurrency) == deployed_env[c.WORKER_CONCURRENCY_ENV]
    assert local_concurrency == resources.WORKER_EVENT_SOURCE.concurrency > 1  # not vacuous


def local_env() -> dict[str, str]:
    """What the local stack's functions read: its resources, and no JOBSCHED_WORKER_CONCURRENCY."""
    return {
        c.JOBS_TABLE_ENV: "jobs",
        c.RUNS_TABLE_ENV: "runs",
        c.EXECUTION_QUEUE_URL_ENV: "http://127.0.0.1/queue/execution",
    }


# --- the workflows ----------------------------------------------------------------------------

WORKFLOWS = (resources.FAILURE_WORKFLOW, resources.DAG_WORKFLOW)


def test_it_makes_a_state_machine_locally_for_every_workflow_the_template_deploys(
    template: dict[str, Any], local: Local
) -> None:
    deployed = {k for k, v in template.items() if v["Type"] == "AWS::StepFunctions::StateMachine"}

    assert deployed == {spec.logical_id for spec in WORKFLOWS}
    assert deployed <= set(local.made)


@pytest.mark.parametrize("spec", WORKFLOWS, ids=lambda s: s.logical_id)
def test_it_runs_each_deployed_workflow_definition_and_type_locally(
    template: dict[str, Any], local: Local, spec: resources.StateMachineSpec
) -> None:
    deployed = template[spec.logical_id]
    emulated = local.stepfunctions.describe_state_machine(stateMachineArn=local.made[spec.logical_id])

    assert json.loads(emulated["definition"]) == state_machine_definition(deployed)
    assert emulated["type"] == deployed["Properties"]["StateMachineType"]
    assert emulated["name"] == resources.physical_name("shape", spec)


def test_it_makes_the_signing_secrets_key_locally_that_the_template_deploys(
    template: dict[str, Any], local: Local
) -> None:
    key = template[resources.SIGNING_KEY.logical_id]
    arn = local.made[resources.SIGNING_KEY.logical_id]

    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"].get("KeySpec", "SYMMETRIC_DEFAULT") == "SYMMETRIC_DEFAULT"
    assert boto3.client("kms").describe_key(KeyId=arn)["KeyMetadata"]["KeySpec"] == "SYMMETRIC_DEFAULT"


def test_it_makes_the_alert_topic_locally_that_the_template_deploys(
    template: dict[str, Any], local: Local
) -> None:
    arn = local.made[resources.ALERT_TOPIC.logical_id]

    assert template[resources.ALERT_TOPIC.logical_id]["Type"] == "AWS::SNS::Topic"
    assert arn.endswith(f":{resources.physical_name('shape', resources.ALERT_TOPIC)}")
