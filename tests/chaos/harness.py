"""A seeded chaos harness: the real dispatcher, worker, API and workflow code against the embedded moto
server, with processes dying between steps, AWS faults, duplicate deliveries, racing dispatchers and
workers, and clock skew. Every decision comes from one random.Random(seed): a failing seed replays.

    python -m tests.chaos.harness --seeds 20        (make chaos)

The effects ledger records every handler invocation; check() proves the invariants of DESIGN.md.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import ClientError, ReadTimeoutError

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import Backoff, RunMessage
from jobsched.errors import JobschedError
from jobsched.handlers import HandlerRegistry, RunContext
from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from jobsched.ports import Crash, FakeClock
from jobsched.services.run import Delivery, InFlightElsewhere, Outcome
from jobsched.wiring import Services, build
from tests.support import ClockedQueue, provision

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SETTLE_SECONDS = 150  # fault-free simulated seconds after the load: more than two dispatcher passes
MAX_SKEW_GAP = timedelta(seconds=4)  # workers' clocks are skewed by up to ±2 s
WRITES = {"PutItem", "UpdateItem", "TransactWriteItems", "SendMessageBatch", "SendMessage", "StartExecution"}


class SkewedClock:
    """Another process's view of the shared fake time."""

    def __init__(self, base: FakeClock, skew: float) -> None:
        self.base, self.skew = base, timedelta(seconds=skew)

    def now(self) -> datetime:
        return self.base.now() + self.skew


@dataclass
class Faults:
    """Injected AWS faults: throttles and 500s before a call, timeouts after a write took effect."""

    rng: random.Random
    rate: float
    active: bool = True
    injected: Counter[str] = field(default_factory=Counter)

    def install(self, client: Any) -> None:
        client.meta.events.register("before-call.*.*", self._before)
        client.meta.events.register("after-call.*.*", self._after)

    def _before(self, model: Any, **_: Any) -> None:
        if self.active and self.rng.random() < self.rate:
            code = self.rng.choice(
                ["ThrottlingException", "ProvisionedThroughputExceededException", "InternalServerError"]
            )
            self.injected[code] += 1
            raise ClientError({"Error": {"Code": code, "Message": "chaos"}}, model.name)

    def _after(self, model: Any, **_: Any) -> None:
        if self.active and model.name in WRITES and self.rng.random() < self.rate / 2:
            self.injected["timeout_after_write"] += 1
            raise ReadTimeoutError(endpoint_url="chaos")


class TracedQueue(ClockedQueue):
    """ClockedQueue that also records every run it is asked to send, for a violation's trace."""

    def __init__(self, base: Any, trace: list[tuple[str, str, str]], clock: FakeClock) -> None:
        super().__init__(base)
        self.trace, self.clock = trace, clock

    def send(self, outgoing: Any) -> None:
        try:
            super().send(outgoing)
            event = "sent"
        except Exception as exc:
            event = f"send failed: {type(exc).__name__}"
            raise
        finally:
            at = f"{self.clock.now():%M:%S}"
            for o in outgoing:
                self.trace.append((o.message.job_id, o.message.scheduled_for, f"{at} {event}"))


@dataclass
class Crashes:
    """Process deaths at step boundaries."""

    rng: random.Random
    rate: float
    active: bool = True
    hits: Counter[str] = field(default_factory=Counter)

    def __call__(self, point: str) -> None:
        if self.active and self.rng.random() < self.rate:
            self.hits[point] += 1
            raise Crash(point)


@dataclass
class Ledger:
    """Append-only record of every handler invocation, and the effects committed by effect key."""

    invocations: list[tuple[str, str, int, float]] = field(default_factory=list)  # job, sf, attempt, when
    committed: Counter[str] = field(default_factory=Counter)
    fail: dict[str, int] = field(default_factory=dict)
    # Every start and end of a handler, and every cancel the API answered 200, in one order.
    events: list[tuple[str, str]] = field(default_factory=list)  # (what, job_id)
    # A long handler's fake seconds are played by the harness: the fleet goes on meanwhile.
    busy: Any = None
    # buffer_one ticks SKIPPED while no other tick held the job's waiting slot (seen as they happened)
    unbuffered: list[str] = field(default_factory=list)

    def handler(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        self.invocations.append((ctx.job_id, times.stored(ctx.scheduled_for), ctx.attempt, time.monotonic()))
        self.events.append(("start", ctx.job_id))
        if payload.get("hold") and self.busy is not None:
            self.busy(int(payload["hold"]), ctx)
        self.events.append(("end", ctx.job_id))
        if payload.get("fail_times", 0) >= ctx.attempt:
            raise RuntimeError(f"chaos handler fails attempt {ctx.attempt}")
        if self.committed[ctx.effect_key] == 0:  # the exactly-once effect: idempotent by effect key
            self.committed[ctx.effect_key] += 1
        return {"ok": True}


@dataclass
class Result:
    seed: int
    jobs: int
    runs: int
    handler_calls: int
    crashes: Counter[str]
    faults: Counter[str]
    violations: list[str]
    statuses: Counter[str] = field(default_factory=Counter)
    recurring: Counter[str] = field(default_factory=Counter)  # "<policy>/<long|short>" created


def run(
    seed: int, *, endpoint: str, load_seconds: int = 240, fault_rate: float = 0.03, crash_rate: float = 0.03
) -> Result:
    rng = random.Random(seed)
    prefix = f"chaos{seed}-{time.time_ns() % 10**6}"
    kw = {"endpoint_url": endpoint}
    # Half the schedules hand a due job's ticks over 300 s ahead (the AWS setting is 840 s): more
    # messages in flight per job, and edits/cancels meet ticks that were handed over long before.
    settings = provision(
        prefix,
        endpoint_url=endpoint,
        shard_count=2,
        lease_seconds=30,
        handover_horizon_seconds=rng.choice([0, 300]),
    )
    # The pump receives not-yet-due messages (it plays SQS delays on the fake clock) and every
    # receive counts toward the redrive limit; raise it so only real deaths matter here. (The
    # redrive/reconciler path has its own tests in tests/integration/test_failures.py.)
    sqs_admin = boto3.client("sqs", **kw)
    redrive = json.loads(
        sqs_admin.get_queue_attributes(
            QueueUrl=settings.execution_queue_url, AttributeNames=["RedrivePolicy"]
        )["Attributes"]["RedrivePolicy"]
    )
    redrive["maxReceiveCount"] = 100_000
    sqs_admin.set_queue_attributes(
        QueueUrl=settings.execution_queue_url, Attributes={"RedrivePolicy": json.dumps(redrive)}
    )
    clock = FakeClock(T0)
    trace: list[tuple[str, str, str]] = []  # (job_id, scheduled_for, event): printed for a violation
    faults = Faults(rng, fault_rate)
    crashes = Crashes(rng, crash_rate)
    ledger = Ledger()
    handlers = HandlerRegistry()
    handlers.register("chaos.effect", ledger.handler)

    def process(skew: float) -> Services:
        """A fresh process: its own clients (faulty), clock view and crash points."""
        clients = {name: boto3.client(name, **kw) for name in ("dynamodb", "sqs", "stepfunctions")}
        for client in clients.values():
            faults.install(client)
        svc = build(
            settings,
            dynamodb=clients["dynamodb"],
            sqs=clients["sqs"],
            stepfunctions=clients["stepfunctions"],
            clock=SkewedClock(clock, skew),  # type: ignore[arg-type]
            crash=crashes,
            handlers=handlers,
        )
        svc.worker.sleep = lambda seconds: None
        # Most workers record a healthy run in one write; some lease first (as for takeovers and
        # non-idempotent jobs): the two paths race on the same runs.
        svc.worker.fast_path = rng.random() < 0.7
        svc.dispatcher.max_workers = 1
        # SQS delays are real time and this clock is not: messages go out undelayed and the pump
        # below delivers each when the fake clock reaches its second.
        queue = TracedQueue(svc.queue, trace, clock)
        svc.queue = svc.dispatcher.queue = svc.worker.queue = svc.schedule.queue = queue
        return svc

    running: list[RunContext] = []  # the long handler playing the fleet's seconds, if any

    def busy(seconds: int, ctx: RunContext) -> None:
        """A long handler: its fake seconds pass one by one while dispatchers and other workers go on
        (a slow poller among them); it heartbeats every lease/3, as the worker's thread would."""
        if running:
            # Another worker runs this one while the outermost long handler plays the fleet's seconds:
            # it takes none of its own (nested seconds would add up and stretch the schedule's time).
            return
        running.append(ctx)
        try:
            for i in range(1, seconds + 1):
                clock.advance(1)
                if int((clock.now() - T0).total_seconds()) % (settings.lease_seconds // 3) == 0:
                    attempt(ctx.heartbeat)
                if i < seconds:
                    second()
        finally:
            running.remove(ctx)

    ledger.busy = busy
    policies = ["skip", "buffer_one", "allow"]
    cancels: dict[int, str] = {}  # step -> a one-off to cancel then, at a random moment of its life

    api = process(0.0)
    dispatchers = [process(rng.uniform(-2, 2)) for _ in range(2)]
    workers = [process(rng.uniform(-2, 2)) for _ in range(2)]
    inspect_sqs = boto3.client("sqs", **kw)
    in_flight: list[tuple[datetime, str]] = []
    accepted: dict[str, CreateJobRequest] = {}

    def attempt(fn: Any) -> Any:
        """Run one step of a process; a crash or an unhandled fault kills it (a new one carries on)."""
        try:
            return fn()
        except Crash:
            return None
        except (JobschedError, ClientError, ReadTimeoutError):
            return None

    pack_rng = random.Random(f"packs-{seed}")  # the batches' own draws (jobsched.domain.packs)

    def create_batch(requests: list[CreateJobRequest]) -> list[str]:
        """POST /api/jobs/batch with the batch's Idempotency-Key, retried as create() retries: its
        one-offs are packed. The ids of the jobs it answered."""
        key = f"b{len(accepted)}-{pack_rng.random()}"
        items = [(r, None) for r in requests]
        for _ in range(6):
            out = attempt(lambda: api.job_service.submit_batch(items, tenant="t", idempotency_key=key))
            if out is not None:
                ids = []
                for request, answer in zip(requests, out, strict=True):
                    if not isinstance(answer, JobschedError):
                        accepted[answer.job_id] = request
                        ids.append(answer.job_id)
                return ids
        return []

    def create(request: CreateJobRequest) -> None:
        key = f"k{len(accepted)}-{rng.random()}"
        for _ in range(6):  # a client retries with the same Idempotency-Key until it gets an answer
            created = attempt(lambda: api.job_service.submit(request, tenant="t", idempotency_key=key))
            if created is not None:
                accepted[created.job_id] = request
                return

    backoff = Backoff(initial_seconds=1, multiplier=1, max_seconds=1, jitter=False)
    dag_roots: list[str] = []

    def second() -> None:
        """One second of the fleet: dispatcher passes, the event-source mapping, visibility expiry."""
        sec = int((clock.now() - T0).total_seconds())
        for i, d in enumerate(dispatchers):
            if (sec + 30 * i) % 60 == 0:
                try:
                    d.dispatcher.dispatch_all()
                except (Crash, JobschedError, ClientError, ReadTimeoutError):
                    # the process died: a fresh one (a new identity) takes its place
                    dispatchers[i] = process(rng.uniform(-2, 2))
        # the event-source mapping: deliver what is visible, to a random worker, sometimes twice;
        # a slow poller leaves some visible messages for a later second
        received = receive_all(inspect_sqs, settings.execution_queue_url)
        for index, m in enumerate(received):
            body = RunMessage.model_validate_json(m["Body"])
            early = times.parse_stored(body.scheduled_for) > clock.now() + timedelta(seconds=2)
            if early or rng.random() < 0.15:
                release([m["ReceiptHandle"]])
                continue
            plays = plays_seconds(body)
            if plays:
                # This handler plays the fleet's seconds: on AWS the rest of its batch goes to other
                # invocations meanwhile. Held back here, they would wait for it (and for every long
                # handler after it), and moto's real-time visibility timeout would hide them again:
                # a due tick then stayed hidden until the jobs were cancelled (seed 8, in CI).
                release([r["ReceiptHandle"] for r in received[index + 1 :]])
            worker = rng.choice(workers)
            copies = 2 if rng.random() < 0.05 else 1
            acked = False
            for _ in range(copies):
                try:
                    outcome = worker.worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
                    acked = True
                    event = outcome.value
                    if outcome == Outcome.SKIPPED:
                        observe_skip(body)
                except InFlightElsewhere as exc:
                    event = type(exc).__name__
                except (Crash, JobschedError, ClientError, ReadTimeoutError) as exc:
                    event = f"{type(exc).__name__}: {exc}"[:80]
                path = "fast" if worker.worker.fast_path else "leased"
                trace.append((body.job_id, body.scheduled_for, f"{clock.now():%M:%S} {path} {event}"))
            if acked:
                with contextlib.suppress(ClientError):  # stale: the other receiver runs it again
                    inspect_sqs.delete_message(
                        QueueUrl=settings.execution_queue_url, ReceiptHandle=m["ReceiptHandle"]
                    )
            else:  # the process died or left it: it surfaces again after its visibility timeout
                asked = worker.queue.visibility.pop(m["ReceiptHandle"], None)  # type: ignore[attr-defined]
                wait = settings.lease_seconds + 1 if asked is None else asked
                in_flight.append((clock.now() + timedelta(seconds=wait), m["ReceiptHandle"]))
                # ...on the fake clock, as on AWS, not on moto's real-time one: on a loaded machine a
                # fake second takes longer than a real one, and moto surfaced the message again a few
                # fake seconds later. Each such early receive re-entered its own run's slot (the same
                # message may), keeping a dead receive's hold alive for as long as it came back within
                # the hold: the run was never taken over, and ended LOST at the drain (seed 3, with the
                # batches of packed one-offs making each second slower).
                with contextlib.suppress(ClientError):
                    inspect_sqs.change_message_visibility(
                        QueueUrl=settings.execution_queue_url,
                        ReceiptHandle=m["ReceiptHandle"],
                        VisibilityTimeout=43_200,
                    )
            if plays:
                break  # the rest went back to the queue: a later second takes them
        for due, handle in list(in_flight):
            if clock.now() >= due:
                in_flight.remove((due, handle))
                release([handle])

    def release(handles: list[str]) -> None:
        """Make received messages visible again (a receipt goes stale when a long handler's nested
        second re-received the message, as SQS does once a visibility timeout runs out)."""
        for handle in handles:
            with contextlib.suppress(ClientError):
                inspect_sqs.change_message_visibility(
                    QueueUrl=settings.execution_queue_url, ReceiptHandle=handle, VisibilityTimeout=0
                )

    def plays_seconds(body: RunMessage) -> bool:
        """Whether this run's handler is long and would play the fleet's seconds (see busy())."""
        request = accepted.get(body.job_id)
        return not running and request is not None and bool(request.payload.get("hold"))

    def observe_skip(body: RunMessage) -> None:
        """buffer_one buffers: a tick is SKIPPED only while another tick holds the job's waiting slot."""
        request = accepted.get(body.job_id)
        if request is None or request.overlap_policy != "buffer_one":
            return
        faults.active, was = False, faults.active
        try:
            job = api.jobs.get_job(body.job_id)
        finally:
            faults.active = was
        waiting = job is not None and job.buffered_run not in (None, body.scheduled_for)
        if not waiting or job is None or job.buffered_until is None or job.buffered_until < clock.now():
            ledger.unbuffered.append(
                f"{body.job_id}: tick {body.scheduled_for} SKIPPED with no other tick waiting (buffer_one)"
            )

    def cancel(job_id: str) -> bool:
        try:
            api.job_service.cancel(job_id, tenant="t")
        except (Crash, JobschedError, ClientError, ReadTimeoutError):
            return False  # 409 (a run in progress), or the API died: no promise was made
        ledger.events.append(("cancelled", job_id))
        return True

    for step in range(load_seconds + SETTLE_SECONDS + 1):
        played = clock.now() > T0 + timedelta(seconds=step)  # a long handler played this second
        if not played:
            clock.set(T0 + timedelta(seconds=step))
        if step == load_seconds + 1:
            # The settle: faults and crashes stop, and the fleet runs on for SETTLE_SECONDS before
            # the jobs are cancelled, so a tick the faults made late (a dispatcher's shard blocked
            # by a dead holder's lease, passes interrupted again and again) still runs: cancelling
            # at once would record it CANCELLED, or never hand it over, and read as a loss.
            faults.active = crashes.active = False
        if step % 40 == 0 and step < load_seconds - 60:
            # Every other recurring job carries a payload too big for its job item: stored apart and
            # read by each run, under the same faults. Each takes an overlap policy, and half of them
            # a handler longer than their interval, so ticks meet a run still running.
            pad = {"pad": "p" * 600} if step % 80 == 0 else {}
            nth = step // 40  # each policy, with a handler longer than the interval and without
            for hold in ({"hold": rng.randint(12, 25)}, {}):
                create(
                    CreateJobRequest(
                        type="recurring", handler="chaos.effect", cron_expr="*/10 * * * * *",
                        payload={**pad, **hold}, overlap_policy=policies[nth % 3],
                    )
                )  # fmt: skip
            create(
                CreateJobRequest(
                    type="one_off",
                    handler="chaos.effect",
                    run_at=clock.now() + timedelta(seconds=rng.randint(1, 120)),
                )
            )
            create(
                CreateJobRequest(
                    type="one_off", handler="chaos.effect", payload={"fail_times": rng.choice([1, 5])},
                    run_at=clock.now() + timedelta(seconds=5), max_attempts=3, backoff=backoff,
                )
            )  # fmt: skip
            # A long one-off that a client cancels at a random moment: before, during or after its run.
            due_in = rng.randint(3, 30)
            create(
                CreateJobRequest(
                    type="one_off", handler="chaos.effect", payload={"hold": rng.randint(5, 15)},
                    run_at=clock.now() + timedelta(seconds=due_in),
                )
            )  # fmt: skip
            cancels[step + due_in + rng.randint(-3, 12)] = list(accepted)[-1]
            before = set(accepted)
            for _ in range(2):
                create(
                    CreateJobRequest(
                        type="one_off", handler="chaos.effect", run_at=clock.now() + timedelta(seconds=30)
                    )
                )
            roots = [j for j in accepted if j not in before]
            if len(roots) == 2:
                create(CreateJobRequest(type="dependent", handler="chaos.effect", depends_on=roots))
                dag_roots.extend(roots)
            # A batch of one-offs, packed: one plain, one failing and retried, one long that a client
            # cancels at a random moment (its first touch copies it out, racing its run).
            due = pack_rng.randint(3, 30)
            ids = create_batch(
                [
                    CreateJobRequest(
                        type="one_off", handler="chaos.effect",
                        run_at=clock.now() + timedelta(seconds=pack_rng.randint(1, 120)),
                    ),
                    CreateJobRequest(
                        type="one_off", handler="chaos.effect", max_attempts=3, backoff=backoff,
                        payload={"fail_times": pack_rng.choice([1, 5])},
                        run_at=clock.now() + timedelta(seconds=5),
                    ),
                    CreateJobRequest(
                        type="one_off", handler="chaos.effect", payload={"hold": pack_rng.randint(5, 15)},
                        run_at=clock.now() + timedelta(seconds=due),
                    ),
                ]
            )  # fmt: skip
            if len(ids) == 3:
                at = step + due + pack_rng.randint(-3, 12)
                while at in cancels:
                    at += 1
                cancels[at] = ids[2]
        if step in cancels:
            cancel(cancels.pop(step))
        if not played:
            second()
        if step % 20 == 0:
            time.sleep(0.2)  # let real time pass for the workflows' backoff waits

    # Quiesce: recurring jobs are paused, then cancelled, as an operator stops a job that always has
    # a run in progress (a cancel answers 409 while one runs: it is tried again each drain round);
    # everything left drains. Every tick due while faults were on must have run by now.
    end = T0 + timedelta(seconds=load_seconds)
    to_cancel = [job_id for job_id, request in accepted.items() if request.type == "recurring"]
    for job_id in to_cancel:
        attempt(lambda j=job_id: api.schedule.pause(j, tenant="t"))
    # Real seconds the drain may take; it ends as soon as everything has settled. A run a long handler
    # left RUNNING under a live lease needs the fake clock past that lease before a takeover ends it,
    # and long handlers make each round slow: 90 s ran out on seeds 1 and 8.
    deadline = time.monotonic() + float(os.environ.get("CHAOS_DRAIN_SECONDS", "300"))
    sfn = boto3.client("stepfunctions", **kw)
    while time.monotonic() < deadline:
        clock.set(clock.now() + timedelta(seconds=5))
        to_cancel = [job_id for job_id in to_cancel if not cancel(job_id)]
        for d in dispatchers:
            d.dispatcher.dispatch_all()
        for handle_due, handle in list(in_flight):
            in_flight.remove((handle_due, handle))
            release([handle])  # (stale if re-received under a long handler)
        messages = receive_all(inspect_sqs, settings.execution_queue_url)
        rest_released = False
        for index, m in enumerate(messages):
            if rest_released:
                break
            body = RunMessage.model_validate_json(m["Body"])
            if plays_seconds(body):  # the rest go back at once (see second()); the next round takes them
                release([r["ReceiptHandle"] for r in messages[index + 1 :]])
                rest_released = True
            try:
                outcome = workers[0].worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
                trace.append((body.job_id, body.scheduled_for, f"{clock.now():%M:%S} drain {outcome.value}"))
            except InFlightElsewhere as exc:
                # a (skewed) lease not yet expired: it comes back after the next fake seconds
                event = f"{clock.now():%M:%S} drain {type(exc).__name__}"
                trace.append((body.job_id, body.scheduled_for, event))
                in_flight.append((clock.now(), m["ReceiptHandle"]))
                continue
            with contextlib.suppress(ClientError):
                inspect_sqs.delete_message(
                    QueueUrl=settings.execution_queue_url, ReceiptHandle=m["ReceiptHandle"]
                )
        for _ in range(2):  # reconcile what the redrive queue holds
            dlq = inspect_sqs.receive_message(
                QueueUrl=settings.execution_dlq_url, MaxNumberOfMessages=10
            ).get("Messages", [])
            for m in dlq:
                workers[0].failures.reconcile(RunMessage.model_validate_json(m["Body"]))
                inspect_sqs.delete_message(
                    QueueUrl=settings.execution_dlq_url, ReceiptHandle=m["ReceiptHandle"]
                )
        running = [
            e
            for arn in (settings.failure_workflow_arn, settings.dag_workflow_arn)
            for e in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
        ]
        if not messages and not running and not in_flight and not to_cancel and _settled(api, accepted):
            break
        time.sleep(0.1)
    violations = check(api, accepted, ledger, end=end)
    # A tick without a row whose message is still queued was not lost, the drain ended first: say so.
    left = receive_all(inspect_sqs, settings.execution_queue_url)
    queued = {(b.job_id, b.scheduled_for) for b in (RunMessage.model_validate_json(m["Body"]) for m in left)}
    violations = [_undrained(v, queued) for v in violations]
    for job_id in sorted({v.split(":")[0].split("-")[0] for v in violations}):
        for job, sf, event in trace:
            if job == job_id:
                print(f"        trace {job} {sf[11:19]} {event}")
        for r in sorted(api.runs.recent(job_id, limit=200), key=lambda r: r.scheduled_for):
            span = f"{r.started_at:%M:%S}-{r.finished_at:%M:%S}" if r.started_at and r.finished_at else ""
            print(
                f"        run   {job_id} {r.scheduled_for:%H:%M:%S} {r.status.value} {r.reason or ''} "
                f"{span} attempt {r.attempt} {r.worker or ''}"
            )
    statuses = Counter(r.status.value for j in accepted for r in api.runs.recent(j, limit=200))
    recurring = Counter(
        f"{r.overlap_policy}/{'long' if r.payload.get('hold') else 'short'}"
        for r in accepted.values()
        if r.type == "recurring"
    )
    return Result(
        seed, len(accepted), sum(statuses.values()), len(ledger.invocations), crashes.hits, faults.injected,
        violations, statuses, recurring,
    )  # fmt: skip


def receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return out
        out.extend(got)


def _undrained(violation: str, queued: set[tuple[str, str]]) -> str:
    """A missing tick whose message is still in the queue was not lost: the drain ended before it."""
    if "is missing" not in violation:
        return violation
    job_id = violation.split(":")[0]
    tick = datetime.fromisoformat(violation.split("tick ")[1].split(" ")[0])
    if (job_id, times.stored(tick)) in queued:
        return f"{violation} (its message is still queued: the drain ended first)"
    return violation


def _settled(svc: Services, accepted: dict[str, CreateJobRequest]) -> bool:
    for job_id, request in accepted.items():
        for r in svc.runs.recent(job_id, limit=50):
            if r.status.value in ("PENDING", "LEASED", "RUNNING", "FAILED"):
                return False
        if request.type != "recurring" and not svc.runs.recent(job_id, limit=1):
            job = _job(svc, job_id)
            if job and job.status.value != "CANCELLED":
                return False
    return True


def _job(svc: Services, job_id: str) -> Any:
    """The job as a read without a write sees it: a packed one-off not copied out is its view."""
    return svc.packed.view(job_id) if svc.packed is not None else svc.jobs.get_job(job_id)


# A one-off's run that ends its job (COMPLETED, FAILED); a run cancel ends the run only (docs/api.md).
ENDED_ONE_OFF = ("SUCCEEDED", "DEAD_LETTER")


def check(
    svc: Services, accepted: dict[str, CreateJobRequest], ledger: Ledger, *, end: datetime
) -> list[str]:
    """The invariants, as a list of violations (empty: all hold)."""
    bad: list[str] = []
    calls: dict[tuple[str, str], list[int]] = defaultdict(list)
    order: dict[str, float] = {}
    for job_id, sf, attempt_no, when in ledger.invocations:
        calls[(job_id, sf)].append(attempt_no)
        order.setdefault(job_id, when)
    for job_id, request in accepted.items():
        job = _job(svc, job_id)
        if job is None:
            bad.append(f"{job_id}: accepted, then vanished")
            continue
        runs = svc.runs.recent(job_id, limit=200)
        keys = [r.run_id for r in runs]
        if len(keys) != len(set(keys)):
            bad.append(f"{job_id}: two rows for one firing")
        for r in runs:
            sf = times.stored(r.scheduled_for)
            invoked = calls.get((job_id, sf), [])
            if r.status.value == "SUCCEEDED" and not invoked:
                bad.append(f"{r.run_id}: SUCCEEDED without running")
            if r.status.value in ("PENDING", "LEASED", "RUNNING", "FAILED"):
                bad.append(f"{r.run_id}: stuck {r.status.value}")
            distinct_attempts = set(invoked)
            if len(distinct_attempts) > request.max_attempts:
                bad.append(
                    f"{r.run_id}: {len(distinct_attempts)} attempts > max_attempts {request.max_attempts}"
                )
        if request.type == "recurring":
            # every tick from the first to the end of the faulty load has a run: no lost tick
            schedule_ticks = {times.stored(r.scheduled_for) for r in runs}
            first = min((r.scheduled_for for r in runs), default=None)
            if first is None:
                bad.append(f"{job_id}: recurring job never fired")
                continue
            fates = {times.stored(r.scheduled_for): r.status.value for r in runs}
            policy = request.overlap_policy
            # a tick is SKIPPED only for a reason its policy gives (catch-up reasons after an outage)
            reasons = {"coalesced", "missed", "catchup_limit", "catchup_backlog"}
            if policy != "allow":
                reasons.add("overlap")
            tick = first
            while tick < end:
                fate = fates.get(times.stored(tick))
                if fate not in ("SUCCEEDED", "SKIPPED", "DEAD_LETTER"):  # dead-lettered: visible, not lost
                    bad.append(f"{job_id}: tick {times.iso(tick)} was due and is {fate or 'missing'}")
                tick += timedelta(seconds=10)
            del schedule_ticks
            for r in runs:
                if r.status.value == "SKIPPED" and r.reason not in reasons:
                    bad.append(f"{r.run_id}: SKIPPED {r.reason!r} under overlap policy {policy}")
            if policy == "allow":
                continue
            # skip and buffer_one: no two ticks' runs were ever RUNNING at the same time
            spans = sorted((r.started_at, r.finished_at) for r in runs if r.started_at and r.finished_at)
            for (_, end_a), (start_b, _) in itertools.pairwise(spans):
                if start_b < end_a - MAX_SKEW_GAP:  # each time is its worker's (skewed) clock
                    bad.append(f"{job_id}: two runs overlapped under overlap policy {policy}")
        elif request.type == "one_off":
            if not runs and job.status.value != "CANCELLED":
                bad.append(f"{job_id}: one-off never ran")
            elif runs and runs[0].status.value not in ("SUCCEEDED", "DEAD_LETTER", "CANCELLED", "LOST"):
                bad.append(f"{job_id}: one-off ended {runs[0].status.value}")
            elif runs and runs[0].status.value == "LOST" and job.status.value != "CANCELLED":
                # LOST only for a run that may have run when a cancel went through (its worker died
                # after the handler, its start marker lapsed, the job was cancelled): a cancelled job
                # starts nothing, and the run is not recorded as one that never ran (as tests/sim)
                bad.append(f"{job_id}: one-off ended LOST, its job not cancelled")
            elif (
                runs and job.status.value in ("SCHEDULED", "PAUSED") and runs[0].status.value in ENDED_ONE_OFF
            ):
                # its run ended: the job says so (COMPLETED, or FAILED by its dead letter), never that
                # its run is still to come (as tests/sim checks)
                bad.append(
                    f"{job_id}: one-off still {job.status.value} after its run ended {runs[0].status.value}"
                )
        else:
            ups = [svc.runs.recent(u, limit=1) for u in job.depends_on]
            all_ok = all(u and u[0].status.value == "SUCCEEDED" for u in ups)
            status = runs[0].status.value if runs else None
            if all_ok and status != "SUCCEEDED":
                bad.append(f"{job_id}: upstreams succeeded, dependant is {status}")
            if not all_ok and status == "SUCCEEDED":
                bad.append(f"{job_id}: dependant fired although an upstream did not succeed")
            if status == "SUCCEEDED":
                if sum(1 for (j, _), _v in calls.items() if j == job_id) != 1:
                    bad.append(f"{job_id}: dependant ran for more than one period")
                if any(order.get(u, 0) > order.get(job_id, 0) for u in job.depends_on):
                    bad.append(f"{job_id}: dependant ran before an upstream")
    bad.extend(ledger.unbuffered)
    for key, n in ledger.committed.items():
        if n != 1:
            bad.append(f"effect {key} committed {n} times")
    # a cancel answered 200: no handler of that job started after it (and none was running then)
    running: Counter[str] = Counter()
    cancelled: set[str] = set()
    for what, job_id in ledger.events:
        if what == "start":
            running[job_id] += 1
            if job_id in cancelled:
                bad.append(f"{job_id}: a handler started after a cancel answered 200")
        elif what == "end":
            running[job_id] -= 1
        elif job_id not in cancelled:
            cancelled.add(job_id)
            if running[job_id] > 0:
                bad.append(f"{job_id}: a cancel answered 200 while its handler ran")
    return bad


def main() -> None:
    import os

    for key, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("POWERTOOLS_TRACE_DISABLED", "1"),
    ):
        os.environ.setdefault(key, value)  # fmt: skip
    parser = argparse.ArgumentParser(prog="make chaos")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=240, help="simulated seconds of load per schedule")
    args = parser.parse_args()
    aws = EmbeddedAws("127.0.0.1", free_port()).start()
    total: Counter[str] = Counter()
    failed = []
    try:
        print(f"{'seed':>6} {'jobs':>5} {'runs':>5} {'calls':>6} {'crashes':>8} {'faults':>7}  violations")
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            r = run(seed, endpoint=aws.endpoint_url, load_seconds=args.seconds)
            total.update(r.faults)
            total.update({f"crash:{k}": v for k, v in r.crashes.items()})
            print(f"{r.seed:>6} {r.jobs:>5} {r.runs:>5} {r.handler_calls:>6} {sum(r.crashes.values()):>8} "
                  f"{sum(r.faults.values()):>7}  {len(r.violations)}", flush=True)  # fmt: skip
            print(f"        run statuses: {dict(r.statuses)}")
            for v in r.violations:
                print(f"        seed {seed}: {v}")
            if r.violations:
                failed.append(seed)
    finally:
        aws.stop()
    print("\ninjected by kind:")
    for kind, n in sorted(total.items()):
        print(f"  {kind:<40} {n}")
    print(f"\nschedules: {args.seeds}, failing seeds: {failed or 'none'}")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
