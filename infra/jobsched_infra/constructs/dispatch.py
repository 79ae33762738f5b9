"""The tick: an EventBridge schedule that runs the dispatcher Lambda."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from jobsched_infra.constructs.functions import JobschedFunction
from jobsched_infra.nag import SERVERLESS, acknowledge

MAX_TARGETS_PER_RULE = 5


class Dispatch(Construct):
    """The dispatcher function and the `rate(tick)` rule that invokes it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        tick: Duration,
        timeout: Duration,
        shard_count: int,
        invocations: int = 1,
        reserved_concurrency: int | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.entry_point = JobschedFunction(
            self,
            "Handler",
            name="dispatcher",
            layer=layer,
            environment=environment,
            timeout=timeout,
            log_retention=log_retention,
            # The next tick is the retry: shard watermarks make it drain whatever a failed pass
            # left, so Lambda's own async retries would only stack overlapping passes.
            retry_attempts=0,
            reserved_concurrency=reserved_concurrency,
        )
        # One invocation drains every shard (threads, one per shard up to the dispatcher's pool); a
        # fleet whose burst needs more throughput than one function has ticks several invocations,
        # each given its shards as the event ({"shards": [...]}). A rule holds up to 5 targets.
        if invocations <= 1:
            groups: list[list[int] | None] = [None]
        else:
            groups = [list(range(shard_count))[i::invocations] for i in range(min(invocations, shard_count))]
        self.rules: list[events.Rule] = []
        for first in range(0, len(groups), MAX_TARGETS_PER_RULE):
            batch = groups[first : first + MAX_TARGETS_PER_RULE]
            self.rules.append(
                events.Rule(
                    self,
                    "Tick" if first == 0 else f"Tick{first // MAX_TARGETS_PER_RULE}",
                    description="jobsched dispatcher tick",
                    schedule=events.Schedule.rate(tick),
                    targets=[
                        targets.LambdaFunction(self.entry_point.function, event=_input(g)) for g in batch
                    ],
                )
            )
        self.rule = self.rules[0]
        reason = (
            "A tick that fails or is lost is made up by the next one: shard watermarks make each pass "
            "drain whatever an earlier one left, so a failed event needs no dead-letter queue."
        )
        for rule in self.rules:
            acknowledge(rule, "EventBusDLQ", reason, pack=SERVERLESS)
        acknowledge(self.entry_point.function, "LambdaAsyncFailureDestination", reason, pack=SERVERLESS)


def _input(shards: list[int] | None) -> events.RuleTargetInput | None:
    return None if shards is None else events.RuleTargetInput.from_object({"shards": shards})
