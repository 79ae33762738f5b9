"""The local stack's SQS delivers as SQS fair queues do (jobsched.local.aws._patch_fair_queues): a
quiet tenant's runs are not held behind a noisy tenant's backlog on the embedded server."""

from __future__ import annotations

import boto3

from jobsched.adapters.sqs import RunQueue
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing


def run(job_id: str, group: str | None) -> Outgoing:
    return Outgoing(RunMessage(job_id=job_id, scheduled_for="2026-12-02T04:00:00.000Z"), 0, group=group)


def test_the_embedded_sqs_delivers_a_quiet_groups_messages_ahead_of_a_noisy_backlog(endpoint: str) -> None:
    # Given a standard queue on the embedded server, a noisy tenant's 40 runs sent first, each in
    # its tenant's group, 10 of them received (in flight), then a quiet tenant's 3 runs
    sqs = boto3.client("sqs", endpoint_url=endpoint)
    url = sqs.create_queue(QueueName="fair-quiet-noisy")["QueueUrl"]
    queue = RunQueue(sqs, url)
    queue.send([run(f"noisy-{i}", "noisy") for i in range(40)])
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])
    assert {m["Attributes"].get("MessageGroupId") for m in first["Messages"]} == {"noisy"}
    queue.send([run(f"quiet-{i}", "quiet") for i in range(3)])
    # When the next batch is received
    out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    got = [RunMessage.model_validate_json(m["Body"]).job_id for m in out["Messages"]]
    # Then the quiet tenant's runs are in it, ahead of the noisy backlog
    assert got[:3] == ["quiet-0", "quiet-1", "quiet-2"]


def test_the_embedded_sqs_delivers_ungrouped_messages_in_arrival_order(endpoint: str) -> None:
    # Given runs without a group (fairness off), the noisy ones sent first
    sqs = boto3.client("sqs", endpoint_url=endpoint)
    url = sqs.create_queue(QueueName="fair-off")["QueueUrl"]
    queue = RunQueue(sqs, url)
    queue.send([run(f"noisy-{i}", None) for i in range(20)] + [run(f"quiet-{i}", None) for i in range(3)])
    # When a batch is received, then it is the first ten sent: the quiet runs wait behind the backlog
    out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    got = [RunMessage.model_validate_json(m["Body"]).job_id for m in out["Messages"]]
    assert got == [f"noisy-{i}" for i in range(10)]
