"""SQS queues, generated from `jobsched.resources.QUEUES`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from aws_cdk import Duration, Tags
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched import resources


class Queues(Construct):
    """One encrypted, TLS-only queue per QueueSpec; `queues`, `specs`: logical_id -> queue, spec."""

    def __init__(
        self, scope: Construct, construct_id: str, *, specs: Sequence[resources.QueueSpec] = resources.QUEUES
    ) -> None:
        super().__init__(scope, construct_id)
        self.specs = {spec.logical_id: spec for spec in specs}
        self.queues: dict[str, sqs.Queue] = {}
        for spec in specs:
            self.queues[spec.logical_id] = self._queue(spec)

    def _queue(self, spec: resources.QueueSpec) -> sqs.Queue:
        dead_letter_queue = None
        if spec.redrive_to:
            target = self.queues.get(spec.redrive_to)
            if target is None:
                raise ValueError(f"{spec.logical_id} redrives to {spec.redrive_to}: list that spec first")
            dead_letter_queue = sqs.DeadLetterQueue(queue=target, max_receive_count=spec.max_receive_count)
        queue = sqs.Queue(
            self,
            spec.logical_id,
            visibility_timeout=Duration.seconds(spec.visibility_timeout_seconds),
            retention_period=Duration.seconds(spec.retention_seconds),
            dead_letter_queue=dead_letter_queue,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        for key, value in spec.tags.items():
            Tags.of(queue).add(key, value)
        # As for tables: the spec's logical id is the CloudFormation logical id.
        cast(sqs.CfnQueue, queue.node.default_child).override_logical_id(spec.logical_id)
        return queue
