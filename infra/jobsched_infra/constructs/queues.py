"""SQS queues, generated from `jobsched.resources.QUEUES`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from aws_cdk import Duration, RemovalPolicy, Tags
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched import resources
from jobsched_infra.nag import SERVERLESS, acknowledge


class Queues(Construct):
    """One encrypted, TLS-only queue per QueueSpec; `queues`, `specs`: logical_id -> queue, spec.

    Encrypted with `key` (the stack's customer-managed key), or SQS-managed keys when None. A
    dead-letter queue (one another queue redrives to) is retained: it holds the runs to look at.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        specs: Sequence[resources.QueueSpec] = resources.QUEUES,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = key
        self.dead_letter_ids = {spec.redrive_to for spec in specs if spec.redrive_to}
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
            encryption=sqs.QueueEncryption.KMS if self.key else sqs.QueueEncryption.SQS_MANAGED,
            encryption_master_key=self.key,
            # A data key is reused for 5 min (the default), not the minute: fewer kms:GenerateDataKey calls.
            data_key_reuse=Duration.minutes(5) if self.key else None,
            enforce_ssl=True,
            removal_policy=(
                RemovalPolicy.RETAIN if spec.logical_id in self.dead_letter_ids else RemovalPolicy.DESTROY
            ),
        )
        for key, value in spec.tags.items():
            Tags.of(queue).add(key, value)
        # As for tables: the spec's logical id is the CloudFormation logical id.
        cast(sqs.CfnQueue, queue.node.default_child).override_logical_id(spec.logical_id)
        if spec.logical_id in self.dead_letter_ids:
            acknowledge(
                queue,
                "SQSRedrivePolicy",
                "It is the dead-letter queue: what its consumer fails stays in it, retained for 14 days.",
                pack=SERVERLESS,
            )
        return queue
