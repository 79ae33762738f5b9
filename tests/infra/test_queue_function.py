"""QueueFunction: one construct for "a function on an SQS queue", used by the worker and the reconciler."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from bench.costs import infra_facts

from jobsched import resources
from jobsched_infra.constructs.queue_function import QueueFunction
from jobsched_infra.constructs.queues import Queues
from tests.infra.synth import Synth, listed_actions, shared_synth

pytestmark = pytest.mark.infra

CONSUME = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}


@dataclass(frozen=True)
class Use:
    """One use of QueueFunction in the stack: the function, its event source, what its queue redrives."""

    function: str
    source: resources.EventSourceSpec
    max_receive_count: int | None  # None: a record the function fails stays in this queue


USES = (
    Use("worker", resources.WORKER_EVENT_SOURCE, resources.EXECUTION_QUEUE.max_receive_count),
    Use("reconciler", resources.RECONCILER_EVENT_SOURCE, None),
)


@pytest.fixture(scope="module")
def synth() -> Synth:
    """The stack as infra/app.py synthesizes it (cdk-nag on), with a no-deps layer: once per session."""
    return shared_synth()  # raises on an unacknowledged cdk-nag error


def _mapping(synth: Synth, function: str) -> dict[str, Any]:
    [props] = [
        m["Properties"]
        for m in synth.template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": synth.logical_id(synth.function(function))}
    ]
    return props


@pytest.mark.parametrize("use", USES, ids=lambda u: u.function)
def test_each_queue_function_takes_its_event_source_batches_and_reports_partial_failures(
    synth: Synth, use: Use
) -> None:
    # Given the function's one event-source mapping in the synthesized template
    props = _mapping(synth, use.function)

    # Then it reads the spec's queue in the spec's batches, reports each failed record on its own,
    # and runs at most the spec's invocations at once
    assert props["EventSourceArn"] == {"Fn::GetAtt": [use.source.queue, "Arn"]}
    assert props["BatchSize"] == use.source.batch_size
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ScalingConfig"] == {"MaximumConcurrency": use.source.max_invocations}


@pytest.mark.parametrize("use", USES, ids=lambda u: u.function)
def test_each_queue_function_reserves_exactly_the_concurrency_its_mapping_may_use(
    synth: Synth, use: Use
) -> None:
    # Given the function and its mapping
    function = synth.resource(synth.logical_id(synth.function(use.function)))["Properties"]
    mapping = _mapping(synth, use.function)
    # Then it reserves as many invocations as the mapping runs at once: the mapping never invokes into
    # a throttle (which would use up receives of runs that never ran), and the queue's runs never
    # take the concurrency of the account's other functions (the api's included)
    assert function["ReservedConcurrentExecutions"] == mapping["ScalingConfig"]["MaximumConcurrency"]
    assert 2 <= use.source.max_invocations <= 1000  # MaximumConcurrency's range


@pytest.mark.parametrize("use", USES, ids=lambda u: u.function)
def test_each_queue_function_queue_redrives_a_failing_record_as_its_spec_says(synth: Synth, use: Use) -> None:
    # Given the queue that feeds the function
    queue = synth.resource(use.source.queue)["Properties"]

    # Then a record that keeps failing moves to the DLQ after maxReceiveCount (the worker's queue),
    # or stays where it is until its retention (the reconciler's DLQ)
    if use.max_receive_count is None:
        assert "RedrivePolicy" not in queue
    else:
        assert queue["RedrivePolicy"]["maxReceiveCount"] == use.max_receive_count > 0


@pytest.mark.parametrize("use", USES, ids=lambda u: u.function)
def test_each_queue_function_may_consume_its_own_queue(synth: Synth, use: Use) -> None:
    allowed = synth.actions_on(use.function, use.source.queue)

    assert allowed >= CONSUME


def test_the_worker_mapping_never_waits_to_fill_a_batch(synth: Synth) -> None:
    assert _mapping(synth, "worker")["MaximumBatchingWindowInSeconds"] == 0


# --- the construct on its own ------------------------------------------------------------------


def _bare(**options: Any) -> tuple[Stack, QueueFunction]:
    """A stack holding the queues and one QueueFunction for the worker, on a layer given by ARN."""
    stack = Stack(App(), "Bare")
    layer = lambda_.LayerVersion.from_layer_version_arn(
        stack, "Layer", "arn:aws:lambda:us-east-1:123456789012:layer:jobsched:1"
    )
    made = QueueFunction(
        stack,
        "Workers",
        name="worker",
        source=resources.WORKER_EVENT_SOURCE,
        queues=Queues(stack, "Queues"),
        mapping_id="ExecutionQueue",
        layer=layer,
        environment={},
        **{"timeout": Duration.seconds(50), **options},
    )
    return stack, made


def test_a_queue_function_caps_its_mapping_concurrency_when_given_a_maximum() -> None:
    # Given a queue function told to run at most 5 invocations at once
    stack, _ = _bare(max_concurrency=5)

    # Then its mapping says so
    [mapping] = Template.from_stack(stack).find_resources("AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 5}


def test_a_queue_function_refuses_a_timeout_its_queue_visibility_timeout_would_outlive() -> None:
    lease = resources.EXECUTION_QUEUE.visibility_timeout_seconds

    # When the function could still run when its message comes back to the queue
    # Then the construct refuses it, naming the queue
    with pytest.raises(ValueError, match=resources.EXECUTION_QUEUE.logical_id):
        _bare(timeout=Duration.seconds(lease))


def test_a_queue_function_grants_consume_on_its_queue_and_nothing_else() -> None:
    # Given a queue function alone in a stack (no grants from a stack around it)
    stack, made = _bare()
    template = Template.from_stack(stack)

    # Then its role may consume its queue, and that is all it may do with any queue
    role = stack.resolve(stack.get_logical_id(made.entry_point.function.role.node.default_child))  # type: ignore[union-attr]
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    sqs_actions = {a for s in statements for a in listed_actions(s) if a.startswith("sqs:")}
    assert sqs_actions >= CONSUME and "sqs:SendMessage" not in sqs_actions
    assert {str(s["Resource"]) for s in statements if listed_actions(s) & CONSUME} == {
        str({"Fn::GetAtt": [resources.EXECUTION_QUEUE.logical_id, "Arn"]})
    }


# --- what reads the construct's settings ---------------------------------------------------------


def test_the_cost_bench_reads_the_deployed_worker_batch_and_every_function_memory(synth: Synth) -> None:
    # Given what bench/costs.py reads from infra/'s sources (it does not synthesize)
    facts = infra_facts(Path(__file__).resolve().parents[2])

    # Then it is what the template deploys
    functions = {name: synth.resource(synth.logical_id(synth.function(name))) for name in facts.memory_mb}
    assert set(facts.memory_mb) == {"api", "dispatcher", "worker", "reconciler"}
    assert facts.memory_mb == {name: fn["Properties"]["MemorySize"] for name, fn in functions.items()}
    assert facts.worker_batch_size == _mapping(synth, "worker")["BatchSize"]
