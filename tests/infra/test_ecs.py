"""The ECS Fargate worker in the template: cluster, Fargate task definition, service scaled on queue depth
to zero, least-privilege task role, logs; the Lambda worker's limits are the placement's constants."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from jobsched import constants as c
from jobsched import resources
from jobsched_infra.stack import KEY_LOGICAL_ID
from tests.infra.synth import Synth, listed_actions, shared_synth

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def synth() -> Synth:
    return shared_synth()


def _task_definition(synth: Synth) -> dict[str, Any]:
    [task] = synth.template.find_resources("AWS::ECS::TaskDefinition").values()
    return task["Properties"]


def test_it_has_a_cluster_with_container_insights(synth: Synth) -> None:
    synth.template.resource_count_is("AWS::ECS::Cluster", 1)
    synth.template.has_resource_properties(
        "AWS::ECS::Cluster",
        {"ClusterSettings": [{"Name": "containerInsights", "Value": "enabled"}]},
    )


def test_the_task_definition_is_fargate_arm64_at_the_ecs_worker_size_running_the_ecs_worker(
    synth: Synth,
) -> None:
    task = _task_definition(synth)
    assert task["RequiresCompatibilities"] == ["FARGATE"]
    assert (task["Cpu"], task["Memory"]) == (
        str(resources.ECS_WORKER_CPU),
        str(resources.ECS_WORKER_MEMORY_MIB),
    )
    assert task["RuntimePlatform"]["CpuArchitecture"] == "ARM64"
    [container] = task["ContainerDefinitions"]
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env[c.WORKER_LANE_ENV] == "ecs"
    assert env[c.ECS_QUEUE_URL_ENV] == {"Ref": resources.ECS_QUEUE.logical_id}
    assert c.TRUSTED_SENDERS_ENV in env
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"
    assert container["ReadonlyRootFilesystem"] is True


def test_the_image_is_an_asset_of_the_same_package_and_its_dockerfile(synth: Synth) -> None:
    # Synth staged the context (no Docker needed): the Dockerfile runs jobsched.ecsworker
    manifest = json.loads(next(synth.assembly_dir.glob("*.assets.json")).read_text())
    [image] = manifest["dockerImages"].values()
    context = synth.assembly_dir / image["source"]["directory"]
    assert "jobsched.ecsworker" in (context / "Dockerfile").read_text()
    assert (context / "python" / "jobsched" / "ecsworker.py").is_file()


def test_the_service_starts_at_zero_and_scales_on_visible_plus_in_flight_messages(synth: Synth) -> None:
    synth.template.has_resource_properties("AWS::ECS::Service", {"LaunchType": "FARGATE", "DesiredCount": 0})
    synth.template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"MinCapacity": 0, "ScalableDimension": "ecs:service:DesiredCount", "ServiceNamespace": "ecs"},
    )
    policies = synth.template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    steps = [p["Properties"]["StepScalingPolicyConfiguration"] for p in policies.values()]
    assert steps and all(s["AdjustmentType"] == "ExactCapacity" for s in steps)
    alarms = json.dumps(synth.template.find_resources("AWS::CloudWatch::Alarm"))
    assert "visible + inflight" in alarms
    assert "ApproximateNumberOfMessagesNotVisible" in alarms
    # the lower alarm's step sets the service to zero tasks
    adjustments = [a["ScalingAdjustment"] for s in steps for a in s["StepAdjustments"]]
    assert 0 in adjustments


def test_the_task_role_has_the_worker_functions_table_calls_and_no_scan(synth: Synth) -> None:
    statements = synth.role_statements(synth.stack.ecs.task_role)
    actions = {
        a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert {
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
    } <= actions
    assert not {"dynamodb:Scan", "dynamodb:*", "sqs:*"} & actions
    # DeleteItem only on the Fargate vCPU table: a released reservation (adapters/dynamodb/fargate_vcpu)
    deleting = [s for s in statements if "dynamodb:DeleteItem" in json.dumps(s["Action"])]
    capacity = resources.FARGATE_VCPU_TABLE.logical_id
    assert deleting and all(capacity in json.dumps(s["Resource"]) for s in deleting)


def test_the_lambda_worker_is_deployed_with_the_placements_timeout_and_memory(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::Lambda::Function",
        Match.object_like(
            {
                "Description": "jobsched worker",
                "Timeout": resources.WORKER_TIMEOUT_SECONDS,
                "MemorySize": resources.WORKER_MEMORY_MIB,
            }
        ),
    )


def test_the_ecs_worker_may_run_follow_and_stop_container_tasks_in_its_cluster_only(synth: Synth) -> None:
    statements = synth.role_statements(synth.stack.ecs.task_role)
    running = [s for s in statements if "ecs:RunTask" in json.dumps(s["Action"])]
    assert running and all("ecs:cluster" in json.dumps(s.get("Condition", {})) for s in running)
    tagging = [s for s in statements if "ecs:TagResource" in json.dumps(s["Action"])]
    assert tagging and all(
        s["Condition"] == {"StringEquals": {"ecs:CreateAction": "RunTask"}} for s in tagging
    )
    passing = [s for s in statements if "iam:PassRole" in json.dumps(s["Action"])]
    assert passing and all(
        "ContainerExecutionRole" in json.dumps(s["Resource"])
        or s.get("Condition") == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
        for s in passing
    )


def test_the_ecs_worker_may_run_its_own_definition_at_another_size_passing_only_its_own_roles(
    synth: Synth,
) -> None:
    # A Python run bigger than the worker's task: RunTask of the worker's own family with overrides
    task = _task_definition(synth)
    family = synth.stack.ecs.family
    assert task["Family"] == family
    [container] = task["ContainerDefinitions"]
    assert "Memory" not in container  # no hard limit: the task's memory override is the run's
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env[c.ECS_WORKER_FAMILY_ENV] == family
    statements = synth.role_statements(synth.stack.ecs.task_role)
    # RunTask (any definition, this one's included), DescribeTasks and StopTask: in the cluster only
    for action in ("ecs:RunTask", "ecs:DescribeTasks", "ecs:StopTask"):
        allowing = [s for s in statements if action in listed_actions(s)]
        assert allowing, action
        assert all(list(s["Condition"]["ArnEquals"]) == ["ecs:cluster"] for s in allowing), action
    # PassRole of the definition's own task and execution roles, to ECS tasks only
    own = synth.logical_id(synth.stack.ecs.task_role.node.default_child)
    execution = synth.logical_id(synth.stack.ecs.task_definition.obtain_execution_role().node.default_child)
    [passing] = [
        s
        for s in statements
        if "iam:PassRole" in listed_actions(s) and "iam:PassedToService" in json.dumps(s.get("Condition", {}))
    ]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
    assert sorted(json.dumps(r) for r in passing["Resource"]) == sorted(
        json.dumps({"Fn::GetAtt": [logical_id, "Arn"]}) for logical_id in (own, execution)
    )


def test_the_ecs_worker_is_told_where_container_tasks_run(synth: Synth) -> None:
    defs = [
        d
        for d in synth.template.find_resources("AWS::ECS::TaskDefinition").values()
        for d in d["Properties"]["ContainerDefinitions"]
    ]
    names = {e["Name"] for d in defs for e in d.get("Environment", [])}
    assert {
        c.ECS_CLUSTER_ENV,
        c.ECS_SUBNETS_ENV,
        c.ECS_SECURITY_GROUPS_ENV,
        c.ECS_EXECUTION_ROLE_ARN_ENV,
    } <= names


def test_container_targets_output_has_a_log_group_kept_a_month_under_the_stacks_key(synth: Synth) -> None:
    resource = synth.resource(resources.CONTAINER_LOG_GROUP.logical_id)  # the one definition's id
    assert resource["Type"] == "AWS::Logs::LogGroup"
    group = resource["Properties"]
    assert group["RetentionInDays"] == resources.CONTAINER_LOG_GROUP.retention_days == 30
    assert group["KmsKeyId"] == {"Fn::GetAtt": [KEY_LOGICAL_ID, "Arn"]}


def test_the_container_execution_role_writes_streams_and_events_in_that_group_only(synth: Synth) -> None:
    group_arn = {"Fn::GetAtt": [resources.CONTAINER_LOG_GROUP.logical_id, "Arn"]}
    statements = synth.role_statements(synth.stack.ecs.container_execution_role)
    logging = [s for s in statements if any(a.startswith("logs:") for a in listed_actions(s))]
    assert [(sorted(listed_actions(s)), s["Resource"]) for s in logging] == [
        (["logs:CreateLogStream", "logs:PutLogEvents"], group_arn)
    ]


def test_the_ecs_worker_writes_and_the_api_reads_that_group_by_name(synth: Synth) -> None:
    group_id = resources.CONTAINER_LOG_GROUP.logical_id
    [worker] = [
        d
        for t in synth.template.find_resources("AWS::ECS::TaskDefinition").values()
        for d in t["Properties"]["ContainerDefinitions"]
    ]
    env = {e["Name"]: e["Value"] for e in worker["Environment"]}
    assert env[c.ECS_LOG_GROUP_ENV] == {"Ref": group_id}
    api = synth.resource(synth.logical_id(synth.function("api")))["Properties"]
    assert api["Environment"]["Variables"][c.ECS_LOG_GROUP_ENV] == {"Ref": group_id}
    # the api reads its streams (GetLogEvents), nothing more, and no other group's
    assert synth.actions_on("api", group_id) == {"logs:GetLogEvents"}
