"""The synthesized CloudFormation: resources made from jobsched.resources, least privilege, cdk-nag clean."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from aws_cdk.assertions import Annotations, Match

from jobsched import constants as c
from jobsched import resources
from jobsched.asl import dag_definition, failure_definition
from jobsched_infra.layer import build_layer, layer_requirements
from jobsched_infra.stack import (
    DEFAULT_DISPATCH_PACE,
    DEFAULT_SHARD_COUNT,
    KEY_LOGICAL_ID,
    JobschedStack,
    new_app,
    template_json,
)
from tests.infra.synth import (
    Synth,
    listed_actions,
    shared_synth,
    state_machine_definition,
    synthesize,
    task_resources,
)

pytestmark = pytest.mark.infra

# The cdk-nag rules this stack acknowledges, per pack (each with its reason, next to the resource it
# is about). A new one must be added here on purpose.
ACKNOWLEDGED_RULES = {
    # SQS3: the stopped-task events' dead-letter queue, which no queue redrives to (constructs/ecs.py)
    "AwsSolutions": {"IAM4", "IAM5", "L1", "APIG2", "APIG3", "COG4", "ECS2", "SQS3"},
    "HIPAA.Security": {
        "APIGWCacheEnabledAndEncrypted",
        "APIGWSSLEnabled",
        "DynamoDBInBackupPlan",
        "IAMNoInlinePolicy",
        "LambdaDLQ",
        "LambdaInsideVPC",
        # the ECS worker's VPC: public subnets, no NAT gateway (constructs/ecs.py)
        "VPCDefaultSecurityGroupClosed",
        "VPCNoUnrestrictedRouteToIGW",
        "VPCSubnetAutoAssignPublicIpDisabled",
    },
    "NIST.800.53.R5": {
        "APIGWAssociatedWithWAF",
        "APIGWCacheEnabledAndEncrypted",
        "APIGWSSLEnabled",
        "DynamoDBInBackupPlan",
        "IAMNoInlinePolicy",
        "LambdaDLQ",
        "LambdaInsideVPC",
        # the ECS worker's VPC: public subnets, no NAT gateway (constructs/ecs.py)
        "VPCDefaultSecurityGroupClosed",
        "VPCNoUnrestrictedRouteToIGW",
        "VPCSubnetAutoAssignPublicIpDisabled",
    },
    "Serverless": {
        "EventBusDLQ",
        "LambdaAsyncFailureDestination",
        "LambdaDLQ",
        "LambdaEventSourceMappingDestination",
        "LambdaLatestVersion",
        "LambdaTracing",
        "SQSRedrivePolicy",
    },
}


@pytest.fixture(scope="module")
def synth() -> Synth:
    """The stack as infra/app.py synthesizes it (cdk-nag on), with a no-deps layer: once per session."""
    return shared_synth()  # raises on an unacknowledged cdk-nag error


KEY_ARN = {"Fn::GetAtt": [KEY_LOGICAL_ID, "Arn"]}


# --- storage ----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", (*resources.TABLES, resources.ALERTS_TABLE), ids=lambda s: s.logical_id)
def test_it_makes_each_table_on_demand_with_pitr_ttl_retained_and_deletion_protected(
    synth: Synth, spec: resources.TableSpec
) -> None:
    table = synth.resource(spec.logical_id)

    assert table["Type"] == "AWS::DynamoDB::Table"
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"
    props = table["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": KEY_ARN}
    assert props["DeletionProtectionEnabled"] is True
    assert props["KeySchema"] == [
        {"AttributeName": spec.partition_key, "KeyType": "HASH"},
        {"AttributeName": spec.sort_key, "KeyType": "RANGE"},
    ]


def test_it_builds_the_due_index_exactly_as_specified(synth: Synth) -> None:
    table = synth.resource(resources.JOBS_TABLE.logical_id)["Properties"]

    (due,) = (i for i in table["GlobalSecondaryIndexes"] if i["IndexName"] == resources.DUE_INDEX.name)
    assert due["KeySchema"] == [
        {"AttributeName": resources.DUE_INDEX.partition_key, "KeyType": "HASH"},
        {"AttributeName": resources.DUE_INDEX.sort_key, "KeyType": "RANGE"},
    ]
    assert due["Projection"] == {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": list(resources.DUE_INDEX.non_key_attributes),
    }
    for key in (resources.DUE_INDEX.partition_key, resources.DUE_INDEX.sort_key):
        assert {"AttributeName": key, "AttributeType": "S"} in table["AttributeDefinitions"]


@pytest.mark.parametrize("spec", resources.TABLES, ids=lambda s: s.logical_id)
def test_it_builds_every_index_of_a_table_from_its_spec(synth: Synth, spec: resources.TableSpec) -> None:
    props = synth.resource(spec.logical_id)["Properties"]

    assert props.get("GlobalSecondaryIndexes", []) == [
        {
            "IndexName": index.name,
            "KeySchema": [
                {"AttributeName": index.partition_key, "KeyType": "HASH"},
                {"AttributeName": index.sort_key, "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(index.non_key_attributes)},
        }
        for index in spec.indexes
    ]


# --- queues -----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", resources.QUEUES, ids=lambda s: s.logical_id)
def test_it_makes_each_queue_from_its_spec(synth: Synth, spec: resources.QueueSpec) -> None:
    queue = synth.resource(spec.logical_id)

    assert queue["Type"] == "AWS::SQS::Queue"
    props = queue["Properties"]
    assert props["VisibilityTimeout"] == spec.visibility_timeout_seconds
    assert props["MessageRetentionPeriod"] == spec.retention_seconds
    assert props["KmsMasterKeyId"] == KEY_ARN
    # a dead-letter queue holds the runs to look at: retained
    retained = spec.logical_id in {q.redrive_to for q in resources.QUEUES}
    assert (queue.get("DeletionPolicy") == "Retain") is retained
    if spec.redrive_to:
        assert props["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [spec.redrive_to, "Arn"]},
            "maxReceiveCount": spec.max_receive_count,
        }
    else:
        assert "RedrivePolicy" not in props


def test_it_redrives_the_execution_queue_after_the_specified_receives(synth: Synth) -> None:
    props = synth.resource(resources.EXECUTION_QUEUE.logical_id)["Properties"]

    assert props["RedrivePolicy"]["maxReceiveCount"] == resources.EXECUTION_QUEUE.max_receive_count


@pytest.mark.parametrize("spec", resources.QUEUES, ids=lambda s: s.logical_id)
def test_it_denies_every_queue_call_without_tls(synth: Synth, spec: resources.QueueSpec) -> None:
    synth.template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": spec.logical_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            },
        },
    )


def test_it_exposes_tables_and_queues_under_their_spec_logical_ids(synth: Synth) -> None:
    template = template_json(synth.stack)

    for spec in resources.TABLES:
        assert template["Resources"][spec.logical_id]["Type"] == "AWS::DynamoDB::Table"
    for queue in resources.QUEUES:
        assert template["Resources"][queue.logical_id]["Type"] == "AWS::SQS::Queue"


# --- functions --------------------------------------------------------------------------------

FUNCTIONS = ("api", "dispatcher", "worker", "reconciler", "task_events")


def test_it_runs_five_arm64_python312_functions_on_the_shared_layer(synth: Synth) -> None:
    (layer_id,) = synth.template.find_resources("AWS::Lambda::LayerVersion")
    functions = {  # and the shard guard, which needs no layer (see the shard guard tests)
        k: v
        for k, v in synth.template.find_resources("AWS::Lambda::Function").items()
        if k != synth.logical_id(synth.stack.shard_guard_function)
    }
    layer = synth.resource(layer_id)["Properties"]

    assert len(functions) == len(FUNCTIONS) == 5
    for function in functions.values():
        props = function["Properties"]
        assert props["Architectures"] == ["arm64"]
        assert props["Runtime"] == "python3.12"
        assert props["Handler"] == "handler.lambda_handler"
        assert props["Layers"] == [{"Ref": layer_id}]
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["MemorySize"] == 256
    assert layer["CompatibleArchitectures"] == ["arm64"]
    assert layer["CompatibleRuntimes"] == ["python3.12"]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_it_tells_each_function_where_its_resources_are(synth: Synth, name: str) -> None:
    env = synth.resource(synth.logical_id(synth.function(name)))["Properties"]["Environment"]["Variables"]

    assert env[c.JOBS_TABLE_ENV] == {"Ref": resources.JOBS_TABLE.logical_id}
    assert env[c.RUNS_TABLE_ENV] == {"Ref": resources.RUNS_TABLE.logical_id}
    assert env[c.EXECUTION_QUEUE_URL_ENV] == {"Ref": resources.EXECUTION_QUEUE.logical_id}
    assert env[c.EXECUTION_DLQ_URL_ENV] == {"Ref": resources.EXECUTION_DLQ.logical_id}
    assert env[c.FAILURE_WORKFLOW_ARN_ENV] == {"Ref": resources.FAILURE_WORKFLOW.logical_id}
    assert env[c.DAG_WORKFLOW_ARN_ENV] == {"Ref": resources.DAG_WORKFLOW.logical_id}
    assert env[c.ALERT_TOPIC_ARN_ENV] == {"Ref": resources.ALERT_TOPIC.logical_id}
    assert env[c.SHARD_COUNT_ENV] == str(DEFAULT_SHARD_COUNT) == "16"
    assert env[c.LEASE_SECONDS_ENV] == str(resources.EXECUTION_QUEUE.visibility_timeout_seconds)
    assert env[c.TICK_SECONDS_ENV] == "60"  # the rule's rate
    # 80% of a due-index partition's 1,000 writes a second
    assert env[c.DISPATCH_PACE_ENV] == str(DEFAULT_DISPATCH_PACE) == "800"
    assert env["POWERTOOLS_SERVICE_NAME"] == f"jobsched-{name.replace('_', '-')}"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "jobsched"
    assert env.get(c.TENANT_SOURCE_ENV) == ("iam" if name == "api" else None)


@pytest.mark.parametrize(
    ("name", "seconds"),
    [("api", 10), ("dispatcher", 60), ("worker", 50), ("reconciler", 30), ("task_events", 30)],
)
def test_it_sets_each_function_timeout(synth: Synth, name: str, seconds: int) -> None:
    assert synth.resource(synth.logical_id(synth.function(name)))["Properties"]["Timeout"] == seconds


def test_it_kills_a_worker_before_its_lease_runs_out(synth: Synth) -> None:
    worker = synth.resource(synth.logical_id(synth.function("worker")))["Properties"]

    assert worker["Timeout"] < resources.EXECUTION_QUEUE.visibility_timeout_seconds


def test_it_kills_a_reconciler_before_its_dead_letter_message_comes_back(synth: Synth) -> None:
    reconciler = synth.resource(synth.logical_id(synth.function("reconciler")))["Properties"]

    assert reconciler["Timeout"] < resources.EXECUTION_DLQ.visibility_timeout_seconds


@pytest.mark.parametrize("name", FUNCTIONS)
def test_it_logs_each_function_to_its_own_group_with_retention(synth: Synth, name: str) -> None:
    props = synth.resource(synth.logical_id(synth.function(name)))["Properties"]
    group = synth.resource(props["LoggingConfig"]["LogGroup"]["Ref"])

    assert group["Type"] == "AWS::Logs::LogGroup"
    assert group["Properties"]["RetentionInDays"] == 30


# --- triggers ---------------------------------------------------------------------------------


def test_it_ticks_the_dispatcher_every_minute(synth: Synth) -> None:
    dispatcher_id = synth.logical_id(synth.function("dispatcher"))

    synth.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": "rate(1 minute)",
            "State": "ENABLED",
            "Targets": [Match.object_like({"Arn": {"Fn::GetAtt": [dispatcher_id, "Arn"]}})],
        },
    )
    synth.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {"Principal": "events.amazonaws.com", "FunctionName": {"Fn::GetAtt": [dispatcher_id, "Arn"]}},
    )


def test_a_fleet_ticks_several_dispatcher_invocations_each_with_its_shards(tmp_path: Path) -> None:
    fleet = synthesize(tmp_path, shard_count=24, dispatcher_invocations=6, dispatch_pace=750)
    rules = {  # the ticks (not the rule of container tasks' stop events)
        k: v
        for k, v in fleet.template.find_resources("AWS::Events::Rule").items()
        if "ScheduleExpression" in v["Properties"]
    }
    targets = [t for rule in rules.values() for t in rule["Properties"]["Targets"]]
    assert len(rules) == 2 and len(targets) == 6  # at most 5 targets per rule
    groups = [json.loads(t["Input"])["shards"] for t in targets]
    assert sorted(s for g in groups for s in g) == list(range(24)) and all(len(g) == 4 for g in groups)
    env = fleet.resource(fleet.logical_id(fleet.function("dispatcher")))["Properties"]["Environment"][
        "Variables"
    ]
    assert env[c.DISPATCH_PACE_ENV] == "750"


def test_it_feeds_the_worker_from_the_execution_queue_with_partial_batch_failures(synth: Synth) -> None:
    synth.template.resource_count_is("AWS::Lambda::EventSourceMapping", 2)  # and the reconciler's
    synth.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [resources.EXECUTION_QUEUE.logical_id, "Arn"]},
            "FunctionName": {"Ref": synth.logical_id(synth.function("worker"))},
            "BatchSize": 10,
            "MaximumBatchingWindowInSeconds": 0,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )


def test_it_feeds_the_reconciler_from_the_dead_letter_queue_with_partial_batch_failures(synth: Synth) -> None:
    mappings = synth.template.find_resources(
        "AWS::Lambda::EventSourceMapping",
        {"Properties": {"EventSourceArn": {"Fn::GetAtt": [resources.EXECUTION_DLQ.logical_id, "Arn"]}}},
    )

    ((_, mapping),) = mappings.items()
    props = mapping["Properties"]
    assert props["FunctionName"] == {"Ref": synth.logical_id(synth.function("reconciler"))}
    assert props["BatchSize"] == 10
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


# --- the workflows ----------------------------------------------------------------------------

WORKFLOWS = {
    resources.FAILURE_WORKFLOW: failure_definition,
    resources.DAG_WORKFLOW: dag_definition,
}


def test_it_deploys_exactly_the_failure_and_the_dag_workflows(synth: Synth) -> None:
    machines = synth.template.find_resources("AWS::StepFunctions::StateMachine")

    assert set(machines) == {spec.logical_id for spec in WORKFLOWS} == {"FailureWorkflow", "DagWorkflow"}


@pytest.mark.parametrize("spec", WORKFLOWS, ids=lambda s: s.logical_id)
def test_it_runs_each_workflow_from_its_one_definition(
    synth: Synth, spec: resources.StateMachineSpec
) -> None:
    workflow = synth.resource(spec.logical_id)

    assert workflow["Type"] == "AWS::StepFunctions::StateMachine"
    assert state_machine_definition(workflow) == WORKFLOWS[spec]()
    assert workflow["Properties"]["StateMachineType"] == "STANDARD"


@pytest.mark.parametrize("spec", WORKFLOWS, ids=lambda s: s.logical_id)
def test_it_traces_each_workflow_and_logs_every_transition_to_its_own_group(
    synth: Synth, spec: resources.StateMachineSpec
) -> None:
    props = synth.resource(spec.logical_id)["Properties"]
    logging = props["LoggingConfiguration"]
    (destination,) = logging["Destinations"]
    group_id = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    others = [synth.resource(o.logical_id)["Properties"] for o in WORKFLOWS if o != spec]

    assert props["TracingConfiguration"] == {"Enabled": True}
    assert logging["Level"] == "ALL"
    assert logging["IncludeExecutionData"] is False  # handler error messages stay out of the logs
    assert synth.resource(group_id)["Properties"]["RetentionInDays"] == 30
    assert all(group_id not in json.dumps(o["LoggingConfiguration"]) for o in others)


def test_it_makes_the_alert_topic_encrypted_and_tls_only(synth: Synth) -> None:
    topic = synth.resource(resources.ALERT_TOPIC.logical_id)

    assert topic["Type"] == "AWS::SNS::Topic"
    assert topic["Properties"]["KmsMasterKeyId"] == KEY_ARN
    synth.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "Topics": [{"Ref": resources.ALERT_TOPIC.logical_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "sns:Publish",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def _workflow_grants(synth: Synth, spec: resources.StateMachineSpec) -> dict[str, set[str]]:
    """The actions a workflow's role allows by resource (as JSON), log delivery and X-Ray checked apart."""
    workflows = synth.stack.workflows
    machine = {
        resources.FAILURE_WORKFLOW: workflows.failure_workflow,
        resources.DAG_WORKFLOW: workflows.dag_workflow,
    }
    role = machine[spec].role
    allowed: dict[str, set[str]] = {}
    for statement in synth.role_statements(role):
        assert statement["Effect"] == "Allow"
        if statement["Resource"] == KEY_ARN:  # the key its encrypted resources and logs use
            assert all(a.startswith("kms:") and "*" not in a for a in listed_actions(statement)), statement
            continue
        if statement["Resource"] == "*":  # log delivery and X-Ray take no resource-level permissions
            assert all(a.startswith(("logs:", "xray:")) for a in listed_actions(statement)), statement
            continue
        allowed.setdefault(json.dumps(statement["Resource"], sort_keys=True), set()).update(
            listed_actions(statement)
        )
    return allowed


RUNS_ARN = json.dumps({"Fn::GetAtt": [resources.RUNS_TABLE.logical_id, "Arn"]})
QUEUE_ARN = json.dumps({"Fn::GetAtt": [resources.EXECUTION_QUEUE.logical_id, "Arn"]})


def test_it_lets_the_failure_workflow_make_exactly_the_calls_of_its_definition(synth: Synth) -> None:
    assert _workflow_grants(synth, resources.FAILURE_WORKFLOW) == {
        json.dumps(
            [
                {"Fn::GetAtt": [resources.JOBS_TABLE.logical_id, "Arn"]},
                {"Fn::GetAtt": [resources.RUNS_TABLE.logical_id, "Arn"]},
            ]
        ): {"dynamodb:UpdateItem"},  # a run, and the job its dead letter ends (or its replay restores)
        QUEUE_ARN: {"sqs:SendMessage"},
        json.dumps({"Ref": resources.ALERT_TOPIC.logical_id}): {"sns:Publish"},
        # RecordAlert: the dead letter's alert, kept before it is published
        json.dumps({"Fn::GetAtt": [resources.ALERTS_TABLE.logical_id, "Arn"]}): {"dynamodb:PutItem"},
    }


def test_it_lets_the_dag_workflow_read_and_update_runs_and_send_released_runs_only(synth: Synth) -> None:
    assert _workflow_grants(synth, resources.DAG_WORKFLOW) == {
        RUNS_ARN: {"dynamodb:UpdateItem", "dynamodb:GetItem"},  # the table, never its index
        QUEUE_ARN: {"sqs:SendMessage"},
    }


@pytest.mark.parametrize(
    ("spec", "tasks"),
    [
        pytest.param(
            resources.FAILURE_WORKFLOW,
            {
                "arn:aws:states:::dynamodb:updateItem",  # in the Propagate Map's iterator too
                "arn:aws:states:::sqs:sendMessage",
                "arn:aws:states:::sns:publish",
                "arn:aws:states:::dynamodb:putItem",  # RecordAlert
            },
            id=resources.FAILURE_WORKFLOW.logical_id,
        ),
        pytest.param(
            resources.DAG_WORKFLOW,
            {
                "arn:aws:states:::dynamodb:updateItem",  # all inside the Dependants Map's iterator
                "arn:aws:states:::dynamodb:getItem",
                "arn:aws:states:::sqs:sendMessage",
            },
            id=resources.DAG_WORKFLOW.logical_id,
        ),
    ],
)
def test_it_grants_each_workflow_exactly_the_task_integrations_of_its_definition(
    synth: Synth, spec: resources.StateMachineSpec, tasks: set[str]
) -> None:
    # The grants are written by hand: this pins them to the definition's task resources, nested
    # ones included, so a new integration in the ASL fails here until the stack grants it.
    definition_tasks = task_resources(WORKFLOWS[spec]())
    # Request-response integrations only (no .sync or .waitForTaskToken): each calls one API,
    # "arn:aws:states:::dynamodb:updateItem" calls dynamodb:UpdateItem.
    integrations = [arn.removeprefix("arn:aws:states:::").split(":") for arn in definition_tasks]
    called = {f"{service}:{api[0].upper()}{api[1:]}" for service, api in integrations}
    granted = set().union(*_workflow_grants(synth, spec).values())

    assert definition_tasks == tasks
    assert all("." not in api for _, api in integrations)
    assert granted == called


# --- API --------------------------------------------------------------------------------------


def test_it_requires_iam_auth_on_every_api_method(synth: Synth) -> None:
    methods = synth.template.find_resources("AWS::ApiGateway::Method")

    assert len(methods) == 2  # ANY /api and ANY /api/{proxy+}
    for method in methods.values():
        assert method["Properties"]["AuthorizationType"] == "AWS_IAM"


def test_it_proxies_api_and_everything_under_it_to_the_api_function(synth: Synth) -> None:
    api_id = synth.logical_id(synth.function("api"))
    paths = synth.template.find_resources("AWS::ApiGateway::Resource")
    methods = synth.template.find_resources("AWS::ApiGateway::Method")

    assert sorted(r["Properties"]["PathPart"] for r in paths.values()) == ["api", "{proxy+}"]
    for method in methods.values():
        integration = method["Properties"]["Integration"]
        assert method["Properties"]["HttpMethod"] == "ANY"
        assert integration["Type"] == "AWS_PROXY"
        assert api_id in json.dumps(integration["Uri"])


def test_it_serves_stage_v1_with_access_and_execution_logs(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "StageName": "v1",
            "AccessLogSetting": Match.object_like({"DestinationArn": Match.any_value()}),
            "MethodSettings": Match.array_with(
                [Match.object_like({"HttpMethod": "*", "ResourcePath": "/*", "LoggingLevel": "ERROR"})]
            ),
            "TracingEnabled": True,
        },
    )


# --- least privilege --------------------------------------------------------------------------

TABLE_IDS = [t.logical_id for t in resources.TABLES]
QUEUE_ID = resources.EXECUTION_QUEUE.logical_id
CONSUME = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"}


@pytest.mark.parametrize("name", ["api", "dispatcher", "worker"])
def test_it_lets_every_function_but_the_reconciler_read_and_write_both_tables(
    synth: Synth, name: str
) -> None:
    for table_id in TABLE_IDS:
        actions = synth.actions_on(name, table_id)
        assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"} <= actions
        assert "dynamodb:ConditionCheckItem" in actions  # TransactWriteItems' condition checks


@pytest.mark.parametrize("name", ["api", "dispatcher"])
def test_it_lets_the_api_and_the_dispatcher_send_runs_but_never_take_them(synth: Synth, name: str) -> None:
    actions = synth.actions_on(name, QUEUE_ID)

    assert "sqs:SendMessage" in actions
    assert not actions & CONSUME


def test_it_lets_the_worker_take_extend_and_send_runs_for_the_copies_that_wake_buffered_ticks(
    synth: Synth,
) -> None:
    # (It sends the copy that wakes a buffer_one tick sleeping behind the run it held: without the
    # grant the wake failed on AWS, which the local stack, enforcing no IAM, never showed.)
    actions = synth.actions_on("worker", QUEUE_ID)

    assert actions >= CONSUME
    assert "sqs:SendMessage" in actions


def _sending_roles(synth: Synth) -> list[str]:
    """The logical ids of the roles that send runs: three functions' and both workflows'."""
    roles = [synth.function(name).role for name in ("api", "dispatcher", "worker")]
    roles += [synth.stack.workflows.failure_workflow.role, synth.stack.workflows.dag_workflow.role]
    roles += [synth.stack.ecs.task_role]  # its wake-ups and hand-backs (constructs/ecs.py)
    return [synth.logical_id(role) for role in roles]


def test_it_denies_sending_runs_to_every_principal_but_the_stacks_own_roles(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": QUEUE_ID}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Principal": {"AWS": "*"},
                                "Action": "sqs:SendMessage",
                                "Condition": {
                                    "ArnNotEquals": {
                                        "aws:PrincipalArn": [
                                            {"Fn::GetAtt": [role, "Arn"]} for role in _sending_roles(synth)
                                        ]
                                    }
                                },
                            }
                        )
                    ]
                )
            },
        },
    )


def test_the_worker_trusts_the_sessions_of_exactly_the_roles_that_send_runs(synth: Synth) -> None:
    worker = synth.template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "handler.lambda_handler"}}
    )
    envs = [r["Properties"]["Environment"]["Variables"] for r in worker.values()]
    [trusted] = [e[c.TRUSTED_SENDERS_ENV] for e in envs if c.TRUSTED_SENDERS_ENV in e]
    role_ids = [{"Fn::GetAtt": [role, "RoleId"]} for role in _sending_roles(synth)]
    assert trusted == {"Fn::Join": [",", role_ids]}


def _index_arn(table: resources.TableSpec, index: str) -> dict[str, object]:
    return {"Fn::Join": ["", [{"Fn::GetAtt": [table.logical_id, "Arn"]}, f"/index/{index}"]]}


def _indexes_queried(synth: Synth, name: str) -> list[object]:
    """Every index ARN function `name` may touch, each with the one action it may call there."""
    found = []
    for statement in synth.policy_statements(name):
        listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for resource in listed:
            if "/index/" in json.dumps(resource):
                assert listed_actions(statement) == {"dynamodb:Query"}, statement
                found.append(resource)
    return found


@pytest.mark.parametrize(
    ("name", "indexes"),
    [
        (
            "api",
            [
                (resources.ALERTS_TABLE, resources.ALERTS_RECENT_INDEX.name),
                (resources.RUNS_TABLE, resources.DEAD_LETTER_INDEX.name),
                (resources.JOBS_TABLE, resources.TENANT_JOBS_INDEX.name),
                (resources.JOBS_TABLE, resources.TENANT_NEXT_RUN_INDEX.name),
            ],
        ),
        ("dispatcher", [(resources.JOBS_TABLE, resources.DUE_INDEX.name)]),
        ("worker", []),
        ("reconciler", []),
    ],
)
def test_it_lets_each_function_query_only_the_indexes_it_reads_by_name(
    synth: Synth, name: str, indexes: list[tuple[resources.TableSpec, str]]
) -> None:
    # The api lists dead letters and jobs, the dispatcher reads the due index; nobody gets index/*
    expected = [_index_arn(table, index) for table, index in indexes]
    assert sorted(map(str, _indexes_queried(synth, name))) == sorted(map(str, expected))


@pytest.mark.parametrize(
    ("name", "jobs", "runs"),
    [
        (
            "api",
            {"GetItem", "Query", "PutItem", "UpdateItem", "ConditionCheckItem", "DeleteItem", "BatchGetItem"},
            {"GetItem", "Query", "PutItem", "UpdateItem", "ConditionCheckItem", "BatchGetItem"},
        ),
        (
            "dispatcher",
            {"GetItem", "Query", "PutItem", "UpdateItem", "ConditionCheckItem"},
            {"GetItem", "Query", "PutItem", "UpdateItem", "ConditionCheckItem"},
        ),
        (
            "worker",
            {"GetItem", "Query", "PutItem", "UpdateItem", "ConditionCheckItem"},
            {"GetItem", "Query", "PutItem", "UpdateItem", "ConditionCheckItem"},
        ),
        (
            "reconciler",
            {"GetItem", "Query", "PutItem"},  # PutItem on operation items only (the next test)
            {"GetItem", "Query", "PutItem", "UpdateItem", "ConditionCheckItem"},
        ),
    ],
)
def test_it_grants_each_function_an_explicit_list_of_table_actions(
    synth: Synth, name: str, jobs: set[str], runs: set[str]
) -> None:
    # Given the statements on each table itself (not its indexes)
    def on_table(table: resources.TableSpec) -> set[str]:
        arn = {"Fn::GetAtt": [table.logical_id, "Arn"]}
        return {
            a.removeprefix("dynamodb:")
            for s in synth.policy_statements(name)
            if s["Effect"] == "Allow"
            and (s["Resource"] == arn or (isinstance(s["Resource"], list) and arn in s["Resource"]))
            for a in listed_actions(s)
            if a.startswith("dynamodb:")
        }

    # Then they are exactly the calls its adapters make: no Scan, no batch writes, no DescribeTable,
    # DeleteItem for the api's replay idempotency records only, and BatchGetItem for the api's
    # listing page (the jobs its index entries name, and the runs of its packed one-offs)
    assert on_table(resources.JOBS_TABLE) == jobs
    assert on_table(resources.RUNS_TABLE) == runs


WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem")


def test_it_lets_the_reconciler_read_jobs_write_runs_and_take_dead_letters_only(synth: Synth) -> None:
    jobs = synth.actions_on("reconciler", resources.JOBS_TABLE.logical_id)
    runs = synth.actions_on("reconciler", resources.RUNS_TABLE.logical_id)

    assert {"dynamodb:GetItem", "dynamodb:Query"} <= jobs
    # its one write on the jobs table: PutItem of an operation item ("OP#..."), never of a job
    writes = [
        statement
        for statement in synth.policy_statements("reconciler")
        if resources.JOBS_TABLE.logical_id in json.dumps(statement["Resource"])
        and {a for a in listed_actions(statement) if a.endswith(WRITES)}
    ]
    assert [(listed_actions(s), s.get("Condition")) for s in writes] == [
        ({"dynamodb:PutItem"}, {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["OP#*"]}})
    ]
    assert {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"} <= runs
    assert synth.actions_on("reconciler", resources.EXECUTION_DLQ.logical_id) >= CONSUME
    assert "sqs:SendMessage" not in synth.actions_on("reconciler", resources.EXECUTION_DLQ.logical_id)
    assert not synth.actions_on("reconciler", QUEUE_ID)


@pytest.mark.parametrize("spec", WORKFLOWS, ids=lambda s: s.logical_id)
@pytest.mark.parametrize(
    ("name", "starts"), [("api", True), ("dispatcher", False), ("worker", True), ("reconciler", True)]
)
def test_it_lets_only_the_api_the_worker_and_the_reconciler_start_each_workflow(
    synth: Synth, spec: resources.StateMachineSpec, name: str, starts: bool
) -> None:
    actions = synth.actions_on(name, spec.logical_id)

    assert actions == ({"states:StartExecution"} if starts else set())


@pytest.mark.parametrize("name", ["api", "dispatcher", "worker"])
def test_it_grants_no_function_but_the_reconciler_anything_on_the_dead_letter_queue(
    synth: Synth, name: str
) -> None:
    assert not synth.actions_on(name, resources.EXECUTION_DLQ.logical_id)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_it_grants_no_function_any_wildcard_action(synth: Synth, name: str) -> None:
    for statement in synth.policy_statements(name):
        listed = listed_actions(statement)
        for action in listed:
            assert not action.endswith("*"), statement
        if statement["Resource"] == "*":  # only X-Ray, which has no resource-level permissions
            assert all(a.startswith("xray:") for a in listed), statement


# --- cdk-nag ----------------------------------------------------------------------------------


@pytest.mark.parametrize("pack", sorted(ACKNOWLEDGED_RULES))
def test_it_passes_each_cdk_nag_pack_with_only_the_expected_acknowledgements(synth: Synth, pack: str) -> None:
    report = json.loads((synth.assembly_dir / "validation-report.json").read_text())

    (nag,) = (r for r in report["pluginReports"] if r["pluginName"] == pack)
    assert nag["violations"] == []  # warnings too: they do not fail the synth
    assert nag["conclusion"] == "success"
    suppressed = nag["suppressedViolations"]
    assert all(s["reason"].strip() for s in suppressed)
    rules = {s["ruleName"].removeprefix(f"{pack}-").split("[")[0] for s in suppressed}
    assert rules == ACKNOWLEDGED_RULES[pack]


def test_the_operations_guide_states_each_packs_results_as_the_synth_reports_them(synth: Synth) -> None:
    # docs/operations.md "cdk-nag results": one row per pack, | pack | findings | acknowledgements | rules |
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    row = re.compile(r"^\| ([A-Za-z0-9.]+) \| (\d+) \| (\d+) \| (\d+) \|$", re.MULTILINE)
    documented = {m[1]: (int(m[2]), int(m[3]), int(m[4])) for m in row.finditer(guide)}

    report = json.loads((synth.assembly_dir / "validation-report.json").read_text())

    assert documented == {
        r["pluginName"]: (
            len(r["violations"]),
            len(r["suppressedViolations"]),
            len({s["ruleName"].split("[")[0] for s in r["suppressedViolations"]}),
        )
        for r in report["pluginReports"]
    }


def test_it_runs_the_four_cdk_nag_packs(synth: Synth) -> None:
    report = json.loads((synth.assembly_dir / "validation-report.json").read_text())

    assert {r["pluginName"] for r in report["pluginReports"]} == set(ACKNOWLEDGED_RULES)


def test_it_leaves_no_error_annotations(synth: Synth) -> None:
    # cdk-nag 3 reports through the validation report (above), not annotations: this catches
    # errors from CDK itself and from any other construct library.
    assert Annotations.from_stack(synth.stack).find_error("*", Match.any_value()) == []


# --- the layer --------------------------------------------------------------------------------


def test_it_builds_the_layer_as_python_jobsched_without_bytecode(tmp_path: Path) -> None:
    out = build_layer(tmp_path / "layer", with_dependencies=False)

    assert (out / "python" / "jobsched" / "resources.py").is_file()
    assert not list(out.rglob("__pycache__"))


def test_it_ships_the_runtime_dependencies_but_not_what_lambda_provides() -> None:
    names = {r.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip() for r in layer_requirements()}

    assert {"pydantic", "croniter", "aws-lambda-powertools"} <= names
    assert "boto3" not in names
    assert any(r.startswith("aws-lambda-powertools[tracer]") for r in layer_requirements())


def test_it_refuses_a_layer_directory_without_the_core_package(tmp_path: Path) -> None:
    app = new_app(outdir=str(tmp_path / "cdk.out"))

    with pytest.raises(ValueError, match="python/jobsched"):
        JobschedStack(app, "Broken", layer_dir=tmp_path)
