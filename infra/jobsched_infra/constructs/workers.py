"""The workers: the worker Lambda fed by the execution queue."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched_infra.constructs.functions import JobschedFunction


class Workers(Construct):
    """The worker function and its SQS event source mapping (partial batch failures on).

    The mapping grants nothing: the stack grants the worker what it may do with the queue.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        queue: sqs.IQueue,
        timeout: Duration,
        batch_size: int = 10,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = JobschedFunction(
            self,
            "Handler",
            name="worker",
            layer=layer,
            environment=environment,
            timeout=timeout,
            log_retention=log_retention,
        )
        self.event_source = self.handler.function.add_event_source_mapping(
            "ExecutionQueue",
            event_source_arn=queue.queue_arn,
            batch_size=batch_size,
            # A run is due now (SQS already held it back until its second): never wait to fill a batch.
            max_batching_window=Duration.seconds(0),
            report_batch_item_failures=True,
        )
