"""A jobsched function on an SQS queue: the worker on the execution queue, the reconciler on its DLQ."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from jobsched import resources
from jobsched_infra.constructs.functions import JobschedFunction
from jobsched_infra.constructs.queues import Queues
from jobsched_infra.nag import SERVERLESS, acknowledge


class QueueFunction(Construct):
    """`functions/<name>/` fed by the queue of `source`: its event-source mapping, and its grant to consume.

    The mapping reports partial batch failures: a record the function fails stays in its queue and
    comes back after the queue's visibility timeout (the execution queue redrives it to its DLQ
    after maxReceiveCount receives), while the batch's other records are deleted, not retried with
    it. Batch size and the queue come from one `resources.EventSourceSpec`, which the local stack
    plays too. A queue function must end before its message's visibility timeout runs out (SQS
    event-source mappings refuse a function timeout above it): the construct refuses one that does
    not. The consume grant (receive, delete, change visibility for the heartbeat) is the one thing
    a mapping needs of its queue; the stack grants everything else the function may do.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        source: resources.EventSourceSpec,
        queues: Queues,
        mapping_id: str,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        timeout: Duration,
        memory_size: int = 256,
        max_batching_window: Duration | None = None,
        max_concurrency: int | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        spec = queues.specs[source.queue]
        max_concurrency = source.max_invocations if max_concurrency is None else max_concurrency
        if timeout.to_seconds() >= spec.visibility_timeout_seconds:
            raise ValueError(
                f"{name}'s timeout {timeout.to_seconds()} s is not below {spec.logical_id}'s "
                f"{spec.visibility_timeout_seconds} s visibility timeout"
            )
        self.source = source
        self.queue = queues.queues[source.queue]
        self.entry_point = JobschedFunction(
            self,
            "Handler",
            name=name,
            layer=layer,
            environment=environment,
            timeout=timeout,
            memory_size=memory_size,
            log_retention=log_retention,
            # As many as the mapping invokes at once (its MaximumConcurrency): the mapping never
            # invokes into a throttle, and the queue's runs can never take the account's concurrency.
            reserved_concurrency=max_concurrency,
        )
        self.event_source = self.entry_point.function.add_event_source_mapping(
            mapping_id,
            event_source_arn=self.queue.queue_arn,
            batch_size=source.batch_size,
            max_batching_window=max_batching_window,
            max_concurrency=max_concurrency,
            report_batch_item_failures=True,
        )
        self.queue.grant_consume_messages(self.entry_point.function)
        acknowledge(
            self.event_source,
            "LambdaEventSourceMappingDestination",
            "An SQS mapping has no on-failure destination: a failed record goes back to its queue, and "
            "the queue's redrive policy (or retention) decides where it ends.",
            pack=SERVERLESS,
        )
