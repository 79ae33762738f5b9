"""The security review's infra findings (issue 17, item 5), each pinned on the synthesized template.

Limits, least privilege, encryption, the workflows' partition and log groups, the receive budget
behind maxReceiveCount, and the guard that refuses a lowered shard count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from jobsched import resources
from jobsched.services import run as run_service
from jobsched_infra import shard_guard
from jobsched_infra.stack import (
    API_BURST_LIMIT,
    API_RATE_LIMIT,
    API_RESERVED_CONCURRENCY,
    KEY_LOGICAL_ID,
    KEY_USE,
    QUEUE_DATA_ACTIONS,
    QUOTA_OPERATOR_ACTIONS,
    TABLE_DATA_ACTIONS,
    WAF_RATE_LIMIT,
    WORKER_TIMEOUT,
)
from tests.infra.synth import Synth, listed_actions, shared_synth, synthesize

pytestmark = pytest.mark.infra

KEY_ARN = {"Fn::GetAtt": [KEY_LOGICAL_ID, "Arn"]}
WORKFLOWS = (resources.FAILURE_WORKFLOW, resources.DAG_WORKFLOW)


@pytest.fixture(scope="module")
def synth() -> Synth:
    return shared_synth()


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The stack as `cdk deploy -c waf=true -c kms=aws-owned -c worker_invocations=120
    -c container_task_roles=<REPORT_ROLE>` makes it."""
    return synthesize(
        tmp_path_factory.mktemp("variant"),
        waf=True,
        kms_keys="aws-owned",
        worker_invocations=120,
        container_task_roles=[REPORT_ROLE],
    )


REPORT_ROLE = "arn:aws:iam::123456789012:role/report-task"


def _pass_role_statements(synth: Synth) -> list[dict[str, Any]]:
    role = synth.stack.scheduler.ecs.task_role
    return [s for s in synth.role_statements(role) if "iam:PassRole" in listed_actions(s)]


def test_the_ecs_worker_passes_no_callers_role_unless_the_deployer_lists_it(
    synth: Synth, variant: Synth
) -> None:
    # Given no container_task_roles, no statement names any role but the stack's own
    assert REPORT_ROLE not in json.dumps(_pass_role_statements(synth))
    # When the deployer lists a caller's role, the worker may pass exactly it, to ECS tasks only
    # (CDK merges it with the statement passing the worker's own two roles, the same condition)
    [listed] = [s for s in _pass_role_statements(variant) if REPORT_ROLE in json.dumps(s["Resource"])]
    named = listed["Resource"] if isinstance(listed["Resource"], list) else [listed["Resource"]]
    assert [r for r in named if isinstance(r, str)] == [REPORT_ROLE]
    assert all(isinstance(r, str) or "Fn::GetAtt" in r for r in named)
    assert listed["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}


def test_a_container_task_role_that_is_no_role_arn_fails_the_synth_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="container_task_roles: '\\*'"):
        synthesize(tmp_path, container_task_roles=["*"])


# --- limits -----------------------------------------------------------------------------------


def test_the_stage_throttles_every_method(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "MethodSettings": Match.array_with(
                [
                    Match.object_like(
                        {
                            "HttpMethod": "*",
                            "ResourcePath": "/*",
                            "ThrottlingRateLimit": API_RATE_LIMIT,
                            "ThrottlingBurstLimit": API_BURST_LIMIT,
                        }
                    )
                ]
            )
        },
    )


def test_a_usage_plan_throttles_and_caps_the_stage_per_day(synth: Synth) -> None:
    [plan] = synth.template.find_resources("AWS::ApiGateway::UsagePlan").values()
    props = plan["Properties"]
    stage_ids = list(synth.template.find_resources("AWS::ApiGateway::Stage"))

    assert props["Throttle"] == {"RateLimit": API_RATE_LIMIT, "BurstLimit": API_BURST_LIMIT}
    assert props["Quota"]["Period"] == "DAY" and props["Quota"]["Limit"] > 0
    assert [s["Stage"] for s in props["ApiStages"]] == [{"Ref": stage_ids[0]}]


@pytest.mark.parametrize(("name", "reserved"), [("api", API_RESERVED_CONCURRENCY), ("dispatcher", 2)])
def test_the_api_and_the_dispatcher_reserve_their_concurrency(synth: Synth, name: str, reserved: int) -> None:
    # A flood of runs cannot take the concurrency the api and the tick need, nor they the runs'
    props = synth.resource(synth.logical_id(synth.function(name)))["Properties"]

    assert props["ReservedConcurrentExecutions"] == reserved


def test_a_bigger_fleet_raises_the_workers_mapping_and_reserved_concurrency_together(variant: Synth) -> None:
    worker = variant.logical_id(variant.function("worker"))
    [mapping] = [
        m["Properties"]
        for m in variant.template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": worker}
    ]

    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 120}
    assert variant.resource(worker)["Properties"]["ReservedConcurrentExecutions"] == 120


def test_the_waf_rate_rule_is_off_by_default(synth: Synth) -> None:
    synth.template.resource_count_is("AWS::WAFv2::WebACL", 0)


def test_with_the_waf_flag_a_rate_rule_guards_the_stage(variant: Synth) -> None:
    [(acl_id, acl)] = variant.template.find_resources("AWS::WAFv2::WebACL").items()
    [rule] = acl["Properties"]["Rules"]
    [stage_id] = variant.template.find_resources("AWS::ApiGateway::Stage")
    [association] = variant.template.find_resources("AWS::WAFv2::WebACLAssociation").values()

    assert acl["Properties"]["Scope"] == "REGIONAL"
    assert rule["Action"] == {"Block": {}}
    assert rule["Statement"]["RateBasedStatement"]["Limit"] == WAF_RATE_LIMIT
    assert rule["Statement"]["RateBasedStatement"]["AggregateKeyType"] == "IP"
    assert association["Properties"]["WebACLArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    assert stage_id in json.dumps(association["Properties"]["ResourceArn"])


# --- the receive budget behind maxReceiveCount -----------------------------------------------------


def test_max_receive_count_covers_every_receive_a_run_may_use_before_it_runs_plus_poison() -> None:
    # Given the worker's waits, from where they are defined
    budget = resources.EXECUTION_RECEIVES
    lease = resources.EXECUTION_QUEUE.visibility_timeout_seconds
    worker_timeout = int(WORKER_TIMEOUT.to_seconds())
    hold = run_service.hold_seconds(lease)
    # Then the overlap waits cover the longest a Lambda holder keeps the slot: its run (the worker
    # timeout) and the hold a dead holder leaves behind, received a lease apart: ceil(80 / 60) = 2
    assert budget.overlap_waits * lease >= worker_timeout + hold > (budget.overlap_waits - 1) * lease
    assert budget.overlap_waits == 2
    # the wake retries cover the woken copy's pickup, looked at every WAKE_RETRY_SECONDS
    assert budget.wake_retries * run_service.WAKE_RETRY_SECONDS >= resources.WAKE_PICKUP_SECONDS
    # a buffered tick sleeps longer per receive than any Lambda holder holds: no further receives
    assert lease + run_service.MAX_BUFFER_WAIT_SECONDS >= worker_timeout + hold
    # and the count is the sum, with AWS's 5 for throttles and 3 workers killed for poison
    assert (budget.throttles, budget.poison, budget.early) == (5, 3, 1)
    assert resources.EXECUTION_QUEUE.max_receive_count == 3 + 5 + 2 + 5 + 1 == 16


def test_the_template_redrives_after_the_receive_budget(synth: Synth) -> None:
    props = synth.resource(resources.EXECUTION_QUEUE.logical_id)["Properties"]

    assert props["RedrivePolicy"]["maxReceiveCount"] == resources.EXECUTION_RECEIVES.max_receive_count


# --- least privilege --------------------------------------------------------------------------


def _allowed_resources(synth: Synth) -> list[str]:
    return [
        json.dumps(s["Resource"])
        for p in synth.template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Allow"
    ]


def test_no_role_is_granted_index_wildcards(synth: Synth) -> None:
    assert not [r for r in _allowed_resources(synth) if "/index/*" in r]


def _stack_role_arns(synth: Synth) -> list[dict[str, Any]]:
    roles = [synth.function(n).role for n in ("api", "dispatcher", "worker", "reconciler", "task_events")]
    roles += [synth.stack.workflows.failure_workflow.role, synth.stack.workflows.dag_workflow.role]
    roles += [synth.stack.ecs.task_role]  # the ECS worker runs the worker's code (constructs/ecs.py)
    return [{"Fn::GetAtt": [synth.logical_id(r), "Arn"]} for r in roles]


def _resources_of_type(synth: Synth, kind: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = synth.template.find_resources(kind)
    assert found, f"no {kind} in the template"
    return found


def _deny_to_all_but(statement: dict[str, Any], *, services_spared: bool = False) -> list[Any]:
    """The principals a Deny-to-everyone statement spares (its ArnNotEquals on aws:PrincipalArn);
    `services_spared`: and an AWS service acting itself (SQS's own redrive to the dead-letter queue)."""
    assert statement["Effect"] == "Deny" and statement["Principal"] == {"AWS": "*"}
    conditions = dict(statement["Condition"])
    if services_spared:
        assert conditions.pop("Bool") == {"aws:PrincipalIsAWSService": "false"}
    assert list(conditions) == ["ArnNotEquals"]
    spared: list[Any] = conditions["ArnNotEquals"]["aws:PrincipalArn"]
    return spared


def test_every_table_denies_its_data_to_every_principal_but_the_stacks_roles(synth: Synth) -> None:
    # Given every table of the template (the signing secrets', the quotas', the limits', ... any new one)
    tables = _resources_of_type(synth, "AWS::DynamoDB::Table")
    quota_operator = {"Fn::GetAtt": [synth.logical_id(synth.stack.scheduler.quota_operator_role), "Arn"]}

    for logical_id, table in tables.items():
        # When its resource policy is read
        policy = table["Properties"].get("ResourcePolicy", {}).get("PolicyDocument")
        assert policy is not None, f"{logical_id} has no resource policy"
        [statement] = policy["Statement"]

        # Then it denies every data-plane call to every principal but the stack's roles (and, on the
        # quotas table, the quota operator role that alone writes it)
        assert set(statement["Action"]) == set(TABLE_DATA_ACTIONS), logical_id
        expected = _stack_role_arns(synth)
        if logical_id == resources.QUOTAS_TABLE.logical_id:
            expected = [*expected, quota_operator]
        assert _deny_to_all_but(statement) == expected, logical_id


def test_the_quota_operator_role_alone_may_write_quotas_and_reads_nothing_else(synth: Synth) -> None:
    role = synth.stack.scheduler.quota_operator_role
    quotas = {"Fn::GetAtt": [resources.QUOTAS_TABLE.logical_id, "Arn"]}

    [policy] = synth.template.find_resources(
        "AWS::IAM::ManagedPolicy", {"Properties": {"Roles": [{"Ref": synth.logical_id(role)}]}}
    ).values()

    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": sorted(QUOTA_OPERATOR_ACTIONS), "Effect": "Allow", "Resource": quotas},
        {"Action": sorted(KEY_USE), "Effect": "Allow", "Resource": KEY_ARN},
    ]
    assert not synth.template.find_resources(
        "AWS::IAM::Policy", {"Properties": {"Roles": Match.array_with([{"Ref": synth.logical_id(role)}])}}
    )
    for name in ("api", "dispatcher", "worker", "reconciler"):
        assert not synth.actions_on(name, resources.QUOTAS_TABLE.logical_id) - {"dynamodb:GetItem"}


def test_every_queue_denies_its_messages_to_every_principal_but_the_stacks_roles(synth: Synth) -> None:
    queues = _resources_of_type(synth, "AWS::SQS::Queue")
    policies = _resources_of_type(synth, "AWS::SQS::QueuePolicy").values()

    for logical_id in queues:
        [policy] = [p for p in policies if p["Properties"]["Queues"] == [{"Ref": logical_id}]]
        [statement] = [
            s
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
            if s.get("Sid") == "OnlyTheStackUsesTheMessages"
        ]

        assert set(listed_actions(statement)) == set(QUEUE_DATA_ACTIONS), logical_id
        assert statement["Resource"] == {"Fn::GetAtt": [logical_id, "Arn"]}
        assert _deny_to_all_but(statement, services_spared=True) == _stack_role_arns(synth), logical_id


def _grants(synth: Synth, service: str) -> list[tuple[list[Any], set[str], Any]]:
    """(roles, actions, resource) of every Allow statement of the template's identity policies (inline,
    managed, and a role's own Policies) that lists a `service` action."""
    documents: list[tuple[list[Any], dict[str, Any]]] = []
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in synth.template.find_resources(kind).values():
            props = policy["Properties"]
            assert not props.get("Users") and not props.get("Groups"), "a policy on a user or group"
            documents.append((props.get("Roles", []), props["PolicyDocument"]))
    for logical_id, role in synth.template.find_resources("AWS::IAM::Role").items():
        for inline in role["Properties"].get("Policies", []):
            documents.append(([{"Ref": logical_id}], inline["PolicyDocument"]))
    return [
        (roles, listed_actions(s), s["Resource"])
        for roles, document in documents
        for s in document["Statement"]
        if s["Effect"] == "Allow" and any(a.startswith(f"{service}:") for a in listed_actions(s))
    ]


def _named(resource: Any, kind: str) -> list[str]:
    """The logical ids of `kind` resources a statement's Resource names one by one (no wildcard)."""
    items = resource if isinstance(resource, list) else [resource]
    names = []
    for item in items:
        assert isinstance(item, dict), f"a literal {kind} {item!r}: a wildcard or a foreign ARN"
        ((intrinsic, arg),) = item.items()
        names.append(arg if intrinsic == "Ref" else arg[0])
    return names


def test_only_the_stacks_roles_may_start_the_workflows_on_their_named_arns(synth: Synth) -> None:
    # Step Functions has no resource-based policy on a state machine (its IAM guide: "Resource-based
    # policies: No"): identity policies alone decide who starts one, so the template must grant
    # states:* to the stack's roles only, each on the workflows' own ARNs, never a wildcard.
    machines = set(_resources_of_type(synth, "AWS::StepFunctions::StateMachine"))
    stack_roles = {arn["Fn::GetAtt"][0] for arn in _stack_role_arns(synth)}

    grants = _grants(synth, "states")

    assert grants
    for roles, actions, resource in grants:
        assert actions <= {"states:StartExecution"}, actions  # no SendTask*, no states:*
        assert {r["Ref"] for r in roles} <= stack_roles
        assert set(_named(resource, "state machine")) <= machines


def test_only_the_stacks_roles_are_granted_the_queues_on_their_named_arns(synth: Synth) -> None:
    queues = set(_resources_of_type(synth, "AWS::SQS::Queue"))
    stack_roles = {arn["Fn::GetAtt"][0] for arn in _stack_role_arns(synth)}

    for roles, actions, resource in _grants(synth, "sqs"):
        assert not any(a.endswith("*") for a in actions), actions
        assert {r["Ref"] for r in roles} <= stack_roles
        assert set(_named(resource, "queue")) <= queues


@pytest.mark.parametrize("spec", WORKFLOWS, ids=lambda s: s.logical_id)
def test_each_workflow_names_the_stacks_partition_never_aws(
    synth: Synth, spec: resources.StateMachineSpec
) -> None:
    props = synth.resource(spec.logical_id)["Properties"]
    text = json.dumps(props["DefinitionString"])

    assert "arn:aws:" not in text
    assert "arn:${Partition}:states:::" in text
    assert props["DefinitionSubstitutions"] == {"Partition": {"Ref": "AWS::Partition"}}


@pytest.mark.parametrize("spec", WORKFLOWS, ids=lambda s: s.logical_id)
def test_each_workflow_logs_to_a_vendedlogs_group(synth: Synth, spec: resources.StateMachineSpec) -> None:
    props = synth.resource(spec.logical_id)["Properties"]
    [destination] = props["LoggingConfiguration"]["Destinations"]
    group_id = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    group = synth.resource(group_id)["Properties"]

    assert group["LogGroupName"].startswith("/aws/vendedlogs/states/")
    assert group["LogGroupName"].endswith(spec.suffix)


def test_the_api_execution_log_group_is_the_stacks_with_retention(synth: Synth) -> None:
    [rest_api] = synth.template.find_resources("AWS::ApiGateway::RestApi")
    [stage] = synth.template.find_resources("AWS::ApiGateway::Stage").values()
    groups = synth.template.find_resources("AWS::Logs::LogGroup")
    [(group_id, group)] = [
        (k, g) for k, g in groups.items() if "API-Gateway-Execution-Logs_" in json.dumps(g["Properties"])
    ]

    assert group["Properties"]["LogGroupName"] == {
        "Fn::Join": ["", ["API-Gateway-Execution-Logs_", {"Ref": rest_api}, "/v1"]]
    }
    assert group["Properties"]["RetentionInDays"] == 30
    assert group_id in stage.get("DependsOn", [])  # there before the stage can write to it


# --- encryption -------------------------------------------------------------------------------


def test_one_rotated_retained_customer_managed_key(synth: Synth) -> None:
    keys = synth.template.find_resources("AWS::KMS::Key")

    # (and the signing secrets' own key, whose policy is the list of who may read a secret)
    assert sorted(keys) == sorted([KEY_LOGICAL_ID, resources.SIGNING_KEY.logical_id])
    assert keys[KEY_LOGICAL_ID]["Properties"]["EnableKeyRotation"] is True
    assert keys[KEY_LOGICAL_ID]["DeletionPolicy"] == "Retain"


def test_the_key_encrypts_tables_queues_topic_logs_and_workflows(synth: Synth) -> None:
    for spec in (*resources.TABLES, resources.ALERTS_TABLE):
        assert synth.resource(spec.logical_id)["Properties"]["SSESpecification"]["KMSMasterKeyId"] == KEY_ARN
    for queue in resources.QUEUES:
        assert synth.resource(queue.logical_id)["Properties"]["KmsMasterKeyId"] == KEY_ARN
    assert synth.resource(resources.ALERT_TOPIC.logical_id)["Properties"]["KmsMasterKeyId"] == KEY_ARN
    for group in synth.template.find_resources("AWS::Logs::LogGroup").values():
        assert group["Properties"]["KmsKeyId"] == KEY_ARN
    for spec in WORKFLOWS:
        encryption = synth.resource(spec.logical_id)["Properties"]["EncryptionConfiguration"]
        assert encryption["Type"] == "CUSTOMER_MANAGED_KMS_KEY" and encryption["KmsKeyId"] == KEY_ARN


def test_with_aws_owned_keys_there_is_no_customer_managed_key(variant: Synth) -> None:
    # but the signing secrets' own: a secret is encrypted by the api with KMS Encrypt, which an
    # AWS-owned or AWS-managed key does not offer to callers
    assert list(variant.template.find_resources("AWS::KMS::Key")) == [resources.SIGNING_KEY.logical_id]
    for spec in resources.TABLES:
        props = variant.resource(spec.logical_id)["Properties"]
        assert "KMSMasterKeyId" not in json.dumps(props.get("SSESpecification", {}))
        assert props["DeletionProtectionEnabled"] is True
    for queue in resources.QUEUES:
        assert variant.resource(queue.logical_id)["Properties"]["SqsManagedSseEnabled"] is True
    for group in variant.template.find_resources("AWS::Logs::LogGroup").values():
        assert "KmsKeyId" not in group["Properties"]


# --- lowering -c shards ------------------------------------------------------------------------


def _event(kind: str, new: int, old: int | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"RequestType": kind, "ResourceProperties": {shard_guard.PROPERTY: str(new)}}
    if old is not None:
        event["OldResourceProperties"] = {shard_guard.PROPERTY: str(old)}
    return event


@pytest.mark.parametrize(("old", "new"), [(16, 8), (24, 23), (2, 1)])
def test_the_shard_guard_fails_a_deploy_that_lowers_the_shard_count(old: int, new: int) -> None:
    status, reason = shard_guard.decide(_event("Update", new, old))

    assert status == "FAILED"
    assert f"shards {new}..{old - 1}" in reason and f"-c shards={old}" in reason


@pytest.mark.parametrize(
    "event",
    [_event("Create", 16), _event("Update", 16, 16), _event("Update", 24, 16), _event("Delete", 8, 16)],
    ids=["create", "same", "raise", "delete"],
)
def test_the_shard_guard_lets_every_other_deploy_through(event: dict[str, Any]) -> None:
    assert shard_guard.decide(event)[0] == "SUCCESS"


def test_the_template_guards_the_deployed_shard_count_before_the_dispatcher(synth: Synth) -> None:
    guard = synth.resource("ShardCountGuard")
    dispatcher = synth.resource(synth.logical_id(synth.function("dispatcher")))

    assert guard["Type"] == "Custom::JobschedShardCount"
    assert guard["Properties"][shard_guard.PROPERTY] == "16"
    assert guard["Properties"]["ServiceToken"] == {
        "Fn::GetAtt": [synth.logical_id(synth.stack.shard_guard_function), "Arn"]
    }
    assert "ShardCountGuard" in dispatcher["DependsOn"]  # CloudFormation updates (and fails) it first
