"""Test helpers: a queue whose delays the fake clock plays, a message pump, drains that fail unless
everything comes to rest, crash injection, call counts."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3

from jobsched import resources
from jobsched.adapters.sqs import Outgoing, RunQueue
from jobsched.domain import times
from jobsched.domain.alerts import LateWatch, is_late_watch
from jobsched.domain.models import RunMessage
from jobsched.local.aws import MOTO_SENDER_ID
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
        super().__init__(client=base.client, queue_url=base.queue_url, lanes=dict(base.lanes))
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
        super().send([Outgoing(o.message, 0, o.lane) for o in outgoing])


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

    def drain(
        self, until: datetime | None = None, *, lease_seconds: float | None = None, max_rounds: int = 10
    ) -> Counter[str]:
        """Deliver everything due by `until` (default: now) until nothing due is left; the outcomes.

        Each round delivers what is due (`run_due`). With `lease_seconds`, a delivery that crashed
        or was left ("in flight elsewhere") has its lease expire (the fake clock moves past it) and
        is delivered again next round; without it, such a message is left over. Raises
        AssertionError, naming what is left, if `max_rounds` rounds do not bring the queue to rest:
        no message due by `until`, none in flight.
        """
        until = until or self.clock.now()
        total: Counter[str] = Counter()
        for _ in range(max_rounds):
            done = self.run_due(until)
            total.update(done)
            if (self.in_flight or done["left"]) and lease_seconds is not None:
                self.expire_leases(lease_seconds)
                continue
            if _running_executions(self.svc):  # a workflow may still enqueue a retry or a dependant
                await_workflows(self.svc)
                continue
            if not self.in_flight and not self._due_left(until):
                return total
        raise AssertionError(
            f"the queue did not come to rest by {times.iso(until)} within {max_rounds} rounds: "
            f"{len(self.in_flight)} in flight (crashed), due and undelivered: {self._due_left(until)}; "
            f"outcomes so far {dict(total)}"
        )

    def _due_left(self, until: datetime) -> list[str]:
        """The bodies of visible messages due by `until` (each made visible again)."""
        messages = self.receive_all()
        for m in messages:
            self._release(m)
        return [m["Body"] for m in messages if _scheduled_for(m) <= until]


def _scheduled_for(message: dict[str, Any]) -> datetime:
    if is_late_watch(message["Body"]):  # due when the run it looks at is late (services/late.py)
        return times.parse_stored(LateWatch.model_validate_json(message["Body"]).due)
    return times.parse_stored(RunMessage.model_validate_json(message["Body"]).scheduled_for)


# -- real time, against the embedded moto server: the workflows' Wait states sleep for real ---------------
def pump_until(svc: Services, done: Callable[[], bool], timeout: float = 30) -> None:
    """Play the SQS event-source mapping in real time until `done()`; AssertionError on timeout.

    It returns as soon as `done()` holds, delivering nothing more: it is no way to say "nothing
    more happens". For that, `drain` and then assert.
    """
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {_describe(done)}; {_what_is_left(svc)}"
            )
        if not _deliver_visible(svc):
            time.sleep(0.05)


def drain(svc: Services, *, timeout: float = 30, max_rounds: int = 400) -> Counter[str]:
    """Deliver every message, wait out every workflow, repeat until nothing is left; the outcomes.

    At rest: no workflow execution running, then the execution queue empty (nothing visible,
    in flight or delayed). In that order: a workflow sends its message before it ends, so an
    execution seen ended has left its message where the queue check sees it. Raises
    AssertionError, naming what is left, if that is not reached within `max_rounds` rounds or
    `timeout` seconds (a message left in flight by a crash, or one that keeps coming back).
    """
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + timeout
    for _ in range(max_rounds):
        delivered = _deliver_visible(svc)
        outcomes.update(delivered)
        if not delivered and not _running_executions(svc) and not any(_queue_depth(svc).values()):
            return outcomes
        if time.monotonic() > deadline:
            break
        if not delivered:
            time.sleep(0.05)
    raise AssertionError(
        f"not at rest within {max_rounds} rounds or {timeout} s: {_what_is_left(svc)}; "
        f"delivered so far {dict(outcomes)}"
    )


def _deliver_visible(svc: Services) -> Counter[str]:
    """One receive of up to ten visible messages, each processed and acknowledged; the outcomes.

    A message another receive holds (InFlightElsewhere) stays in the queue, in flight, as SQS
    leaves it when a worker returns it unacknowledged.
    """
    sqs = svc.queue.client
    messages = sqs.receive_message(QueueUrl=svc.queue.queue_url, MaxNumberOfMessages=10).get("Messages", [])
    outcomes: Counter[str] = Counter()
    for m in messages:
        try:
            outcome = svc.worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
        except InFlightElsewhere:
            outcomes["left"] += 1
            continue
        sqs.delete_message(QueueUrl=svc.queue.queue_url, ReceiptHandle=m["ReceiptHandle"])
        outcomes[outcome.value] += 1
    return outcomes


def _running_executions(svc: Services) -> list[str]:
    sfn = svc.failures.state_machines.client
    return [
        e["name"]
        for arn in (svc.settings.failure_workflow_arn, svc.settings.dag_workflow_arn)
        for e in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
    ]


def await_workflows(svc: Services, timeout: float = 30) -> None:
    """Wait (real time: their Wait states sleep for real) until no workflow execution runs."""
    deadline = time.monotonic() + timeout
    while running := _running_executions(svc):
        if time.monotonic() > deadline:
            raise AssertionError(f"workflow executions still running after {timeout} s: {running}")
        time.sleep(0.05)


def _queue_depth(svc: Services) -> dict[str, int]:
    attrs = svc.queue.client.get_queue_attributes(
        QueueUrl=svc.queue.queue_url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return {
        "visible": int(attrs["ApproximateNumberOfMessages"]),
        "in_flight": int(attrs["ApproximateNumberOfMessagesNotVisible"]),
        "delayed": int(attrs["ApproximateNumberOfMessagesDelayed"]),
    }


def poll_until(probe: Callable[[], Any], what: str, *, timeout: float, every: float = 0.25) -> Any:
    """Poll `probe()` (a real process, real time) until it answers truthy; AssertionError with its last
    answer if `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not (answer := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last seen {answer!r}")
        time.sleep(every)
    return answer


def live_stack_at_rest(endpoint_url: str, prefix: str, *, timeout: float = 60) -> None:
    """Wait until a live local stack has done what it was given: AssertionError if not within `timeout`.

    At rest: no workflow execution running, then no message of the execution queue visible or in
    flight (each delivered and finished). Delayed messages are ticks not due yet: not waited for.
    """
    kw: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    sqs, sfn = boto3.client("sqs", **kw), boto3.client("stepfunctions", **kw)
    queue = resources.physical_name(prefix, resources.EXECUTION_QUEUE)
    queue_url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    machines = [
        m["stateMachineArn"]
        for m in sfn.list_state_machines()["stateMachines"]
        if m["name"].startswith(f"{prefix}-")
    ]

    def busy() -> dict[str, Any]:
        running = [
            e["name"]
            for arn in machines
            for e in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
        ]
        attrs = sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        depth = {k: int(v) for k, v in attrs.items() if int(v)}
        return {"running": running, "queue": depth} if running or depth else {}

    deadline = time.monotonic() + timeout
    while left := busy():
        if time.monotonic() > deadline:
            raise AssertionError(f"the local stack is not at rest after {timeout} s: {left}")
        time.sleep(0.25)


def _what_is_left(svc: Services) -> str:
    return f"queue {_queue_depth(svc)}, workflows running {_running_executions(svc)}"


def _describe(done: Callable[[], bool]) -> str:
    code = getattr(done, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
    return f"{getattr(done, '__qualname__', done)!s}{where}"


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
        kms=boto3.client("kms", **kw),
    )
    return Settings(
        jobs_table=made[resources.JOBS_TABLE.logical_id],
        runs_table=made[resources.RUNS_TABLE.logical_id],
        execution_queue_url=made[resources.EXECUTION_QUEUE.logical_id],
        execution_dlq_url=made[resources.EXECUTION_DLQ.logical_id],
        ecs_queue_url=made[resources.ECS_QUEUE.logical_id],
        failure_workflow_arn=made[resources.FAILURE_WORKFLOW.logical_id],
        dag_workflow_arn=made[resources.DAG_WORKFLOW.logical_id],
        alert_topic_arn=made[resources.ALERT_TOPIC.logical_id],
        alerts_table=made[resources.ALERTS_TABLE.logical_id],
        limits_table=made[resources.LIMITS_TABLE.logical_id],
        quotas_table=made[resources.QUOTAS_TABLE.logical_id],
        fargate_vcpu_table=made[resources.FARGATE_VCPU_TABLE.logical_id],
        signing_secrets_table=made[resources.SIGNING_SECRETS_TABLE.logical_id],
        signing_key_arn=made[resources.SIGNING_KEY.logical_id],
        **{"trusted_senders": (MOTO_SENDER_ID,), **settings},
    )


def services_on(
    endpoint: str, prefix: str, *, clock: FakeClock, shard_count: int = 2, lease_seconds: int = 30
) -> Services:
    """The services on a moto server (thread-safe: real threads may race on them) under `prefix`,
    on a fake clock, with the demo handlers; workers never sleep and beat no heartbeat of their own."""
    from jobsched.handlers import registry  # the process-wide registry, copied for these services
    from jobsched.wiring import build

    kw = {"endpoint_url": endpoint}
    settings = provision(prefix, endpoint_url=endpoint, shard_count=shard_count, lease_seconds=lease_seconds)
    services = build(
        settings,
        dynamodb=boto3.client("dynamodb", **kw),
        sqs=boto3.client("sqs", **kw),
        stepfunctions=boto3.client("stepfunctions", **kw),
        handlers=registry.copy(),
        clock=clock,
    )
    services.worker.sleep = lambda seconds: None
    services.worker.heartbeat_thread = False
    return services


def run_envelope(run_id: str, attempt: int = 1) -> dict[str, Any]:
    """The envelope a target gets for `run_id` (a job's tick at 2026-11-30T12:00Z) on `attempt`."""
    return {
        "job_id": run_id.split("-")[0],
        "run_id": run_id,
        "tenant": "t",
        "scheduled_for": "2026-11-30T12:00:00.000Z",
        "attempt": attempt,
        "effect_key": run_id,
        "payload": {"n": 1},
    }


def run_once(svc: Any, clock: Any, queue: Any, sleep: Any, at: Any) -> list[Any]:
    """Dispatch at `at` and process what comes, each ECS task runner polling with `sleep` (moto runs no
    container: the test's sleep ends its tasks)."""
    import jobsched.adapters.targets.ecs as ecs_target
    from jobsched.services.run import Delivery

    original = ecs_target.EcsTaskRunner.__init__

    def patched(self: Any, *args: Any, **kw: Any) -> None:
        original(self, *args, **{**kw, "sleep": sleep, "poll_seconds": 1})

    ecs_target.EcsTaskRunner.__init__ = patched  # type: ignore[method-assign]
    try:
        clock.set(at)
        svc.dispatcher.dispatch_all()
        out = []
        for m in queue.receive():
            out.append(svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body)))
            queue.delete(m.receipt_handle)
        return out
    finally:
        ecs_target.EcsTaskRunner.__init__ = original  # type: ignore[method-assign]
