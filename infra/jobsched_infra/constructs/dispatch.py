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
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = JobschedFunction(
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
        )
        self.rule = events.Rule(
            self,
            "Tick",
            description="jobsched dispatcher tick",
            schedule=events.Schedule.rate(tick),
            targets=[targets.LambdaFunction(self.handler.function)],
        )
