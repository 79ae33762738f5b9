"""The local stack's SQS delivers as SQS fair queues do (jobsched.local.aws._patch_fair_queues): a
quiet tenant's runs are not held behind a noisy tenant's backlog on the embedded server."""

from __future__ import annotations

import time

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


def test_the_embedded_sqs_serves_a_group_by_when_its_messages_became_available(endpoint: str) -> None:
    # Given one group's run with a 2 s delay sent first, then its run with a 1 s delay (a high run's)
    sqs = boto3.client("sqs", endpoint_url=endpoint)
    url = sqs.create_queue(QueueName="fair-available")["QueueUrl"]
    queue = RunQueue(sqs, url)
    queue.send([Outgoing(run("later", "t").message, 2, group="t")])
    queue.send([Outgoing(run("sooner", "t").message, 1, group="t")])
    # When both have become visible (polled: a delay is real time on the embedded server)
    deadline = time.monotonic() + 10
    while sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])[
        "Attributes"
    ]["ApproximateNumberOfMessagesDelayed"] != "0":
        assert time.monotonic() < deadline, "the delays did not end"
        time.sleep(0.1)
    out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    # Then the one whose delay ended first comes first
    got = [RunMessage.model_validate_json(m["Body"]).job_id for m in out["Messages"]]
    assert got == ["sooner", "later"]
