"""Container targets' stopped tasks in the template: an EventBridge rule on the stack's cluster for
STOPPED tasks no ECS service started, targeting the task_events function with a retry policy and a
dead-letter queue; EventBridge's permission to invoke it; the function's least-privilege policy."""

from __future__ import annotations

from typing import Any

import pytest

from jobsched import resources
from jobsched.domain.ecs_tasks import stopped_pattern
from tests.infra.synth import Synth, listed_actions, shared_synth

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def synth() -> Synth:
    return shared_synth()


def _rule(synth: Synth) -> dict[str, Any]:
    rules = synth.template.find_resources(
        "AWS::Events::Rule", {"Properties": {"EventPattern": {"source": ["aws.ecs"]}}}
    )
    (rule,) = rules.values()
    return dict(rule["Properties"])


def test_the_rule_matches_stopped_tasks_of_the_stacks_cluster_not_started_by_a_service(synth: Synth) -> None:
    # Then the pattern is the domain's, on this stack's cluster
    cluster = synth.logical_id(synth.stack.ecs.cluster)
    assert _rule(synth)["EventPattern"] == stopped_pattern({"Fn::GetAtt": [cluster, "Arn"]})  # type: ignore[arg-type]
    assert _rule(synth)["EventPattern"]["detail"]["startedBy"] == [{"anything-but": {"prefix": "ecs-svc/"}}]


def test_the_rule_targets_the_task_events_function_with_retries_and_a_dead_letter_queue(synth: Synth) -> None:
    function = synth.logical_id(synth.stack.task_events.function)
    dlq = resources.TASK_EVENTS_DLQ.logical_id  # the queue the spec defines (the local stack makes it too)
    (target,) = _rule(synth)["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function, "Arn"]}
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq, "Arn"]}}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    # And EventBridge may invoke it, from this rule only
    rule = synth.logical_id(synth.stack.ecs.stopped_tasks_rule)
    synth.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Fn::GetAtt": [function, "Arn"]},
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [rule, "Arn"]},
        },
    )
    # And what the function fails past its own retries lands in the same queue
    synth.template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": {"Ref": function},
            "MaximumRetryAttempts": 2,
            "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": [dlq, "Arn"]}}},
        },
    )
    # And EventBridge may encrypt to it under the stack's key, for this account only
    key = synth.resource("JobschedKey")["Properties"]["KeyPolicy"]["Statement"]
    (events,) = [s for s in key if "events.amazonaws.com" in str(s.get("Principal"))]
    assert set(events["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert events["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_the_function_may_only_read_and_record_runs_and_settle_them(synth: Synth) -> None:
    role = synth.stack.task_events.function.role
    assert role is not None
    statements = [s for s in synth.role_statements(role) if s["Effect"] == "Allow"]
    by_resource: dict[str, set[str]] = {}
    for statement in statements:
        listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for resource in listed:
            key = resource if isinstance(resource, str) else str(next(iter(resource.values())))
            by_resource.setdefault(key, set()).update(listed_actions(statement))
    tables = {
        name: by_resource[str([spec.logical_id, "Arn"])]
        for name, spec in (
            ("jobs", resources.JOBS_TABLE),
            ("runs", resources.RUNS_TABLE),
            ("alerts", resources.ALERTS_TABLE),
        )
    }
    # Then: reads and conditional updates of jobs and runs, no put, no delete, no batch, no transaction
    assert tables == {
        "jobs": {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"},
        "runs": {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"},
        "alerts": {"dynamodb:PutItem"},
    }
    every = set().union(*by_resource.values())
    assert {a for a in every if a.startswith("dynamodb:")} == {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
    }
    # And the failure and DAG workflows' starts, the alert topic, its dead-letter queue, nothing of ECS
    assert "states:StartExecution" in every and "sns:Publish" in every
    assert not [a for a in every if a.startswith(("ecs:", "iam:"))]
    # And of SQS, only sending a failed event to its dead-letter queue; no wildcard action anywhere
    assert by_resource[str([resources.TASK_EVENTS_DLQ.logical_id, "Arn"])] == {"sqs:SendMessage"}
    assert {a for a in every if a.startswith("sqs:")} == {"sqs:SendMessage"}
    assert not [a for a in every if a.endswith("*")]
