"""Test helpers: a queue whose delays the fake clock plays, a message pump, crash injection, call counts."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3

from jobsched import resources
from jobsched.adapters.sqs import Outgoing, RunQueue
from jobsched.domain import times
from jobsched.domain.models import RunMessage
from jobsched.ports import Crash, FakeClock
from jobsched.services.run import Delivery, InFlightElsewhere, Outcome
from jobsched.settings import Settings
from jobsched.wiring import Services


class ClockedQueue(RunQueue):
    """The real SQS adapter, but SQS's real-time delays are played by the fake clock instead.

    Messages go to moto with no delay; `Pump` holds each back until the fake clock reaches its
    due second. The delays the dispatcher asked for are recorded so tests can check them.
    """

    def __init__(self, base: RunQueue) -> None:
        super().__init__(client=base.client, queue_url=base.queue_url)
        self.requested_delays: list[int] = []
        self.sent: list[RunMessage] = []
        # Visibility a worker asked for, by receipt handle: played by the Pump on the fake clock.
        self.visibility: dict[str, int] = {}

    def extend(self, receipt_handle: str, *, seconds: int) -> bool:
        # Recorded for the Pump (fake time), and passed on: moto keeps the message hidden in real
        # time meanwhile, as the heartbeat means it to be.
        self.visibility[receipt_handle] = seconds
        return super().extend(receipt_handle, seconds=seconds)

    def send(self, outgoing: Sequence[Outgoing]) -> None:
        self.requested_delays.extend(o.delay_seconds for o in outgoing)
        self.sent.extend(o.message for o in outgoing)
        super().send([Outgoing(o.message, 0) for o in outgoing])


def use_clocked_queue(svc: Services) -> ClockedQueue:
    """Swap every service's queue for a ClockedQueue on the same SQS queue."""
    queue = ClockedQueue(svc.queue)
    svc.queue = svc.dispatcher.queue = svc.worker.queue = svc.schedule.queue = queue
    # The pump re-receives messages to play time and concurrency; every receive counts toward the
    # redrive limit, which would move them to the DLQ here although no worker failed. (Redrive is
    # exercised for real in test_failures.py.)
    attrs = queue.client.get_queue_attributes(QueueUrl=queue.queue_url, AttributeNames=["RedrivePolicy"])
    policy = json.loads(attrs["Attributes"]["RedrivePolicy"])
    policy["maxReceiveCount"] = 100_000
    queue.client.set_queue_attributes(
        QueueUrl=queue.queue_url, Attributes={"RedrivePolicy": json.dumps(policy)}
    )
    return queue


@dataclass
class CrashAt:
    """Crash points that kill the process the first `times` times `point` is reached."""

    point: str
    times: int = 1
    hits: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, point: str) -> None:
        with self._lock:  # dispatcher shards run on a thread pool
            self.hits[point] += 1
            fire = point == self.point and self.hits[point] <= self.times
        if fire:
            raise Crash(point)


@dataclass
class Pump:
    """Plays the SQS event-source mapping against moto with a fake clock.

    Receives every visible message; those due by `until` run in scheduled order (the clock moves
    to each one's second); the rest are made visible again. A Crash leaves the message in flight
    ("the process died"); `expire_leases()` plays the visibility timeout running out.
    """

    svc: Services
    clock: FakeClock
    # Play SQS's visibility on the fake clock: a message a worker leaves in the queue surfaces again
    # when its visibility timeout (the lease, or what the worker set) has run out, not at once.
    honour_visibility: bool = False
    in_flight: list[str] = field(default_factory=list)
    not_before: dict[str, datetime] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    # Its own client: the mapping's receives and deletes are not the services' calls.
    sqs: Any = field(default_factory=lambda: boto3.client("sqs"))
    _held: list[dict[str, Any]] = field(default_factory=list)
    _depth: int = 0
    _released: set[int] = field(default_factory=set)

    def receive_all(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            got = self.sqs.receive_message(
                QueueUrl=self.svc.queue.queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
            ).get("Messages", [])
            if not got:
                return out
            out.extend(got)

    def run_due(self, until: datetime | None = None) -> Counter[str]:
        """Deliver every message due by `until` (default: now), oldest first; returns outcomes.

        Re-entrant: a handler that pumps from inside its run (playing other workers while it is
        busy) first gets the messages this call still holds put back, and this call re-receives
        after it.
        """
        until = until or self.clock.now()
        depth = self._depth = self._depth + 1
        if depth > 1 and self._held:  # nested: give the outer call's pending messages to "other workers"
            for held in self._held:
                self._release(held)
            self._held = []
            self._released.add(depth - 1)
        done: Counter[str] = Counter()
        tried: set[str] = set()
        try:
            while True:
                messages = sorted(self.receive_all(), key=self._visible_at)
                due = [
                    m
                    for m in messages
                    if (self.honour_visibility or m["MessageId"] not in tried)
                    and self._visible_at(m) <= until
                ]
                for other in messages:
                    if other not in due:
                        self._release(other)
                if not due:
                    break
                self._held = list(due)
                for m in due:
                    if depth in self._released:
                        break
                    self._held.remove(m)
                    tried.add(m["MessageId"])
                    done[self._deliver(m)] += 1
                self._released.discard(depth)
        finally:
            self._held = []
            self._depth -= 1
        self.outcomes.update(done)
        return done

    def _visible_at(self, m: dict[str, Any]) -> datetime:
        return max(_scheduled_for(m), self.not_before.get(m["MessageId"], _scheduled_for(m)))

    def _deliver(self, m: dict[str, Any]) -> str:
        sf = self._visible_at(m)
        if sf > self.clock.now():
            self.clock.set(sf)
        received = self.clock.now()
        try:
            outcome = self.svc.worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
        except Crash:
            self.in_flight.append(m["ReceiptHandle"])
            return "crashed"
        except InFlightElsewhere:
            # Left in the queue: it comes back on a later pump, once its visibility has run out
            # (honour_visibility), or at once.
            asked = getattr(self.svc.worker.queue, "visibility", {}).pop(m["ReceiptHandle"], None)
            if self.honour_visibility:
                seconds = self.svc.settings.lease_seconds if asked is None else asked
                base = received if asked is None else self.clock.now()
                self.not_before[m["MessageId"]] = base + timedelta(seconds=seconds)
            self._release(m)
            return "left"
        self.sqs.delete_message(QueueUrl=self.svc.queue.queue_url, ReceiptHandle=m["ReceiptHandle"])
        return outcome.value if isinstance(outcome, Outcome) else str(outcome)

    def _release(self, message: dict[str, Any]) -> None:
        self.sqs.change_message_visibility(
            QueueUrl=self.svc.queue.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )

    def expire_leases(self, lease_seconds: float) -> None:
        """Time passes beyond every lease: in-flight messages surface again."""
        self.clock.advance(lease_seconds + 1)
        for handle in self.in_flight:
            self.sqs.change_message_visibility(
                QueueUrl=self.svc.queue.queue_url, ReceiptHandle=handle, VisibilityTimeout=0
            )
        self.in_flight.clear()


def _scheduled_for(message: dict[str, Any]) -> datetime:
    return times.parse_stored(RunMessage.model_validate_json(message["Body"]).scheduled_for)


def run_rows(settings_table: str, job_id: str) -> list[dict[str, Any]]:
    """Every run row of a job, raw (all pages)."""
    client = boto3.client("dynamodb")
    kwargs: dict[str, Any] = {
        "TableName": settings_table,
        "KeyConditionExpression": "PK = :pk",
        "ExpressionAttributeValues": {":pk": {"S": f"JOB#{job_id}"}},
    }
    rows: list[dict[str, Any]] = []
    while True:
        out = client.query(**kwargs)
        rows.extend(out["Items"])
        if "LastEvaluatedKey" not in out:
            return rows
        kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


class CallCounter:
    """Counts AWS API calls by (service, operation) through botocore's event hooks."""

    def __init__(self, *clients: Any) -> None:
        self.calls: Counter[str] = Counter()
        for client in clients:
            client.meta.events.register("before-call.*.*", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[f"{model.service_model.service_id}.{model.name}"] += 1

    def reset(self) -> None:
        self.calls.clear()


def provision(prefix: str, *, endpoint_url: str | None = None, **settings: Any) -> Settings:
    """Create every table, queue, topic and state machine for `prefix`; the Settings that find them."""
    kw = {"endpoint_url": endpoint_url} if endpoint_url else {}
    made = resources.create_local_resources(
        prefix=prefix,
        dynamodb=boto3.client("dynamodb", **kw),
        sqs=boto3.client("sqs", **kw),
        sns=boto3.client("sns", **kw),
        stepfunctions=boto3.client("stepfunctions", **kw),
    )
    return Settings(
        jobs_table=made[resources.JOBS_TABLE.logical_id],
        runs_table=made[resources.RUNS_TABLE.logical_id],
        execution_queue_url=made[resources.EXECUTION_QUEUE.logical_id],
        execution_dlq_url=made[resources.EXECUTION_DLQ.logical_id],
        failure_workflow_arn=made[resources.FAILURE_WORKFLOW.logical_id],
        dag_workflow_arn=made[resources.DAG_WORKFLOW.logical_id],
        alert_topic_arn=made[resources.ALERT_TOPIC.logical_id],
        **settings,
    )
