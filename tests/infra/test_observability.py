"""The dashboard and the alarms (constructs/observability.py), read back from the synthesized template."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobsched import resources, telemetry
from jobsched_infra.constructs.observability import FAILURE_RATE_PERCENT
from jobsched_infra.stack import TICK
from tests.infra.synth import Synth, shared_synth

pytestmark = pytest.mark.infra

TOPIC = {"Ref": resources.ALERT_TOPIC.logical_id}


@pytest.fixture(scope="module")
def synth() -> Synth:
    return shared_synth()


def dashboard(synth: Synth) -> dict[str, Any]:
    (body,) = [
        r["Properties"]["DashboardBody"]
        for r in synth.template.to_json()["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Dashboard"
    ]
    parts = body["Fn::Join"][1]
    return dict(json.loads("".join(p if isinstance(p, str) else "us-east-1" for p in parts)))


def widget(synth: Synth, title: str) -> list[list[Any]]:
    (found,) = [w for w in dashboard(synth)["widgets"] if w["properties"].get("title") == title]
    return list(found["properties"]["metrics"])


def names(metrics: list[list[Any]]) -> list[tuple[str, ...]]:
    """(namespace, metric name, dimension values...) of each plotted metric, stat last if given."""
    out = []
    for row in metrics:
        if isinstance(row[0], dict):  # an expression
            out.append(("expression", row[0]["expression"]))
            continue
        options = row[-1] if isinstance(row[-1], dict) else {}
        plain = [str(x) for x in row if not isinstance(x, dict)]
        out.append((*plain, str(options.get("stat", ""))))
    return out


def alarm(synth: Synth, name: str) -> dict[str, Any]:
    (found,) = [
        r["Properties"]
        for logical_id, r in synth.template.to_json()["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm" and logical_id.startswith(f"Observability{name}")
    ]
    return dict(found)


def expression_metrics(props: dict[str, Any]) -> tuple[str, list[str]]:
    """An alarm on metric math: (its expression, the metric names it reads)."""
    (expr,) = [m["Expression"] for m in props["Metrics"] if "Expression" in m]
    return expr, [m["MetricStat"]["Metric"]["MetricName"] for m in props["Metrics"] if "MetricStat" in m]


def test_the_dashboard_graphs_lateness_p50_and_p99_of_the_workers_runs(synth: Synth) -> None:
    assert names(widget(synth, "Run lateness (ms)")) == [
        ("jobsched", telemetry.LATENESS, "service", "worker", "p50"),
        ("jobsched", telemetry.LATENESS, "service", "worker", "p99"),
    ]


def test_the_dashboard_graphs_runs_by_every_outcome(synth: Synth) -> None:
    plotted = names(widget(synth, "Runs by outcome"))
    for outcome in ("succeeded", "failed", "skipped", "cancelled"):
        assert ("jobsched", telemetry.runs(outcome), "service", "worker", "Sum") in plotted
    # dead letters are counted by the worker and the reconciler: their sum is plotted
    assert ("expression", "FILL(w, 0) + FILL(r, 0)") in plotted
    assert ("jobsched", telemetry.runs("dead_letter"), "service", "reconciler", "Sum") in plotted


def test_the_dashboard_graphs_dispatch_lag_dlq_depth_workflow_failures_errors_and_throttles(
    synth: Synth,
) -> None:
    assert names(widget(synth, "Dispatch lag (ms)")) == [
        ("jobsched", telemetry.DISPATCH_LAG, "service", "dispatcher", "Maximum")
    ]
    (depth,) = names(widget(synth, "Dead-letter queue depth"))
    assert depth[:2] == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    flows = names(widget(synth, "Workflow failures"))
    assert {n[1] for n in flows if n[0] == "AWS/States"} == {"ExecutionsFailed", "ExecutionsTimedOut"}
    assert len([n for n in flows if n[0] == "AWS/States"]) == 4  # both workflows
    for title, metric in (("Function errors", "Errors"), ("Function throttles", "Throttles")):
        plotted = names(widget(synth, title))
        assert len(plotted) == 5 and {n[:2] for n in plotted} == {("AWS/Lambda", metric)}  # task_events too


def test_the_dlq_depth_alarm_fires_on_one_visible_message_and_notifies_the_alert_topic(synth: Synth) -> None:
    props = alarm(synth, "DeadLetterQueueDepth")
    assert (props["Namespace"], props["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    dlq = props["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
    assert dlq == resources.EXECUTION_DLQ.logical_id
    assert (props["Statistic"], props["Threshold"], props["ComparisonOperator"]) == (
        "Maximum",
        0,
        "GreaterThanThreshold",
    )
    assert props["AlarmActions"] == [TOPIC]


def test_the_task_events_dlq_is_graphed_and_alarms_on_one_parked_event(synth: Synth) -> None:
    (depth,) = names(widget(synth, "Stopped-task events dead-letter queue depth"))
    assert depth[:2] == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    props = alarm(synth, "TaskEventsDeadLetters")
    assert (props["Namespace"], props["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    dlq = props["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
    assert dlq == resources.TASK_EVENTS_DLQ.logical_id
    assert (props["Statistic"], props["Threshold"], props["ComparisonOperator"]) == (
        "Maximum",
        0,
        "GreaterThanThreshold",
    )
    assert props["AlarmActions"] == [TOPIC]


def test_the_dispatch_lag_alarm_fires_past_two_ticks_or_when_no_pass_reports(synth: Synth) -> None:
    props = alarm(synth, "DispatchLag")
    assert (props["Namespace"], props["MetricName"]) == (telemetry.NAMESPACE, telemetry.DISPATCH_LAG)
    assert props["Dimensions"] == [{"Name": "service", "Value": "dispatcher"}]
    assert props["Threshold"] == 2 * TICK.to_seconds() * 1000 and props["Statistic"] == "Maximum"
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["TreatMissingData"] == "breaching"
    assert props["AlarmActions"] == [TOPIC]


def test_the_failure_rate_alarm_is_failed_over_finished_attempts(synth: Synth) -> None:
    props = alarm(synth, "FailureRate")
    expr, read = expression_metrics(props)
    assert expr == "100 * f / (f + s)" and read == [telemetry.runs("failed"), telemetry.runs("succeeded")]
    assert (
        props["Threshold"] == FAILURE_RATE_PERCENT and props["ComparisonOperator"] == "GreaterThanThreshold"
    )
    assert props["AlarmActions"] == [TOPIC]


@pytest.mark.parametrize(
    ("name", "metric", "count"),
    [
        ("FunctionErrors", "Errors", 5),
        ("FunctionThrottles", "Throttles", 5),
        ("WorkflowFailures", "ExecutionsFailed", 2),
        ("WorkflowFailures", "ExecutionsTimedOut", 2),
    ],
)
def test_the_count_alarms_fire_on_any_one_over_every_function_or_workflow(
    synth: Synth, name: str, metric: str, count: int
) -> None:
    props = alarm(synth, name)
    _, read = expression_metrics(props)
    assert read.count(metric) == count
    assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["AlarmActions"] == [TOPIC]


def test_cloudwatch_may_publish_the_alarms_to_the_encrypted_alert_topic(synth: Synth) -> None:
    policies = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in synth.template.to_json()["Resources"].values()
        if r["Type"] == "AWS::SNS::TopicPolicy"
    ]
    statements = [s for p in policies for s in p]
    assert any(
        s["Effect"] == "Allow"
        and s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
        and s["Action"] == "sns:Publish"
        for s in statements
    )
    key_policy = json.dumps(synth.template.to_json()["Resources"]["JobschedKey"]["Properties"]["KeyPolicy"])
    assert "cloudwatch.amazonaws.com" in key_policy


def test_the_api_may_filter_the_worker_log_group_and_no_other(synth: Synth) -> None:
    # GET /api/runs/{id}/logs: FilterLogEvents on the worker's group, by its ARN; nothing wider
    group = synth.logical_id(synth.stack.workers.entry_point.log_group)
    statements = [
        s
        for s in synth.policy_statements("api")
        if s["Effect"] == "Allow" and "logs:FilterLogEvents" in json.dumps(s["Action"])
    ]
    assert [s["Resource"] for s in statements] == [{"Fn::GetAtt": [group, "Arn"]}]
    for other in ("dispatcher", "worker", "reconciler"):
        assert "logs:FilterLogEvents" not in json.dumps(synth.policy_statements(other))


def test_the_local_worker_log_group_keeps_lines_as_long_as_the_deployed_one(synth: Synth) -> None:
    # resources.WORKER_LOG_GROUP is the local stack's group; the template's is the worker function's
    group = synth.logical_id(synth.stack.workers.entry_point.log_group)
    retention = synth.resource(group)["Properties"]["RetentionInDays"]
    assert retention == resources.WORKER_LOG_GROUP.retention_days
