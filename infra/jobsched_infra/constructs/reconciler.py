"""The reconciler: the Lambda that drains the execution queue's dead-letter queue."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched_infra.constructs.functions import JobschedFunction


class Reconciler(Construct):
    """The reconciler function and its event source mapping on `dead_letter_queue` (partial batch failures).

    A message lands there after the execution queue's maxReceiveCount (workers kept dying on it);
    the reconciler dead-letters its run through the failure workflow, so nothing is lost in a queue
    nobody reads. The mapping grants nothing: the stack grants what the function may do.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        dead_letter_queue: sqs.IQueue,
        timeout: Duration,
        batch_size: int = 10,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = JobschedFunction(
            self,
            "Handler",
            name="reconciler",
            layer=layer,
            environment=environment,
            timeout=timeout,
            log_retention=log_retention,
        )
        # A record the function fails stays in the DLQ and comes back after its visibility timeout,
        # until the DLQ's retention: the other records of the batch are not retried with it.
        self.event_source = self.handler.function.add_event_source_mapping(
            "DeadLetterQueue",
            event_source_arn=dead_letter_queue.queue_arn,
            batch_size=batch_size,
            report_batch_item_failures=True,
        )
