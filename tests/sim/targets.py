"""Targets and ECS runs on the simulated fleet: the peers a run calls, the ECS lane, a run's own task.

Targets (TargetSource, what jobsched.adapters.targets.TargetFactory is to a deployed worker): every
kind but python and ecs (http, lambda, sqs, sns, eventbridge, stepfunctions) resolves to a SimTarget,
a peer that does what the python handler does (World.handler: the ledger's start and end, a hold, a
stall, `fail_times`) and answers as that kind's adapter answers:

- a failing call is the kind's error type: HTTP500 for http, the function's errorType (the
  exception's class) for lambda, "States.TaskFailed" for stepfunctions, "ServiceUnavailable" for the
  message targets (sqs, sns, eventbridge);
- `target_fails` in the payload, {"times": n, "error": type, "retry_after": s}: the peer refuses its
  first n attempts before any effect, with that error type (HTTP429 and HTTP503 with a Retry-After,
  ThrottlingException, or HTTP404 and HTTP400: final, dead-lettered at once, no retry) and the
  Retry-After hint the retry policy honours.

The ECS lane (settings.ecs_queue_url): a second SimQueue the dispatcher sends ECS-placed runs to,
and ECS worker instances (settings.worker_lane "ecs") that poll it; every other sender's copy of such
a run goes to the execution queue and the Lambda worker forwards it (Worker._forward). LaneQueue is
a process's RunQueue: a send goes to its run's lane queue (Outgoing.lane, else the process's own).
The ECS worker's own loop (jobsched.ecsworker: a long poll, each message on a thread of one task) is
played as the event-source mapping is: one process per message in flight, up to MAX_ECS_INSTANCES.

A run's own task (TargetFactory.for_worker_task: a Python run placed bigger than the ECS worker's
task) is SimOwnTask: it notes the task on the run (ctx.note_task), starts the task as a process of
its own on the loop (Worker.run_in_own_task: it runs the handler and records the attempt under the
ECS worker's lease), and follows it every FOLLOW_SECONDS (a heartbeat of the run's lease each time,
as EcsTaskRunner does), where the ECS worker may die (crash point "ecs.follow_task"): the task runs
on and records under the dead worker's lease unless a takeover leased the run since. The task's end
maps as domain.ecs_tasks.task_ended maps a STOPPED task: exit 0 succeeds, another code is ExitCode,
a task that died (a crash) has no exit code: TaskLost.

Not modelled: StopTask (a task past its timeout is stopped: the sim's ECS jobs set a timeout far
above their longest hold, so it never fires), RunTask's own failures, the task's start-up minute,
and ECS's task state change events (services/task_events.py: on AWS a second recorder of the same
attempt; the follower here is the only one).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobsched.domain import times
from jobsched.domain.compute import Resources
from jobsched.domain.ecs_tasks import task_ended
from jobsched.domain.records import Outgoing
from jobsched.domain.targets import FinalTargetFailure, TargetFailed, TargetSpec, final_error_type
from jobsched.errors import JobschedError
from jobsched.handlers import RunContext
from jobsched.ports import Crash
from tests.sim.queue import SimQueue

if TYPE_CHECKING:
    from tests.sim.world import World

KINDS = ["http", "lambda", "sqs", "sns", "eventbridge", "stepfunctions"]
ROLE = "arn:aws:iam::000000000000:role/sim-target"
# What the peer refuses with (target_fails): retryable with a Retry-After, throttled, or final.
REFUSALS = ["HTTP429", "HTTP503", "ThrottlingException", "HTTP404", "HTTP400"]
MAX_ECS_INSTANCES = 6
FOLLOW_SECONDS = 5.0  # EcsTaskRunner's poll_seconds
# A run placed on ECS: in the ECS worker's own task (its size at most) or in a task of its own.
IN_WORKER = [Resources(cpu=512, memory_mib=1024), Resources(cpu=1024, memory_mib=2048)]
OWN_TASK = [Resources(cpu=2048, memory_mib=4096), Resources(cpu=4096, memory_mib=8192)]
ECS_TIMEOUT_SECONDS = 900  # above every hold and stall the workload draws: no task is stopped


def spec_for(kind: str, rng: random.Random) -> dict[str, Any]:
    """A valid target spec of `kind` (its addresses are the simulated peers')."""
    region = "arn:aws:{}:us-east-1:000000000000"
    return {
        "http": lambda: {"type": "http", "url": "https://peer.sim.example/hook"},
        "lambda": lambda: {
            "type": "lambda", "role_arn": ROLE,
            "function_arn": region.format("lambda") + ":function:sim-peer",
            "invocation": rng.choice(["sync", "async"]),
        },
        "sqs": lambda: {
            "type": "sqs", "role_arn": ROLE,
            "queue_url": "https://sqs.us-east-1.amazonaws.com/000000000000/sim-peer",
        },
        "sns": lambda: {"type": "sns", "role_arn": ROLE, "topic_arn": region.format("sns") + ":sim-peer"},
        "eventbridge": lambda: {
            "type": "eventbridge", "role_arn": ROLE, "event_bus_name": "sim-peer",
            "source": "sim.peer", "detail_type": "tick",
        },
        "stepfunctions": lambda: {
            "type": "stepfunctions", "role_arn": ROLE,
            "state_machine_arn": region.format("states") + ":stateMachine:sim-peer",
            "wait": rng.random() < 0.5,
        },
    }[kind]()  # fmt: skip


def draw(rng: random.Random, *, ecs: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a job calls and where it runs, from the targets' own rng: (request fields, payload
    additions). Most jobs keep the python handler; some call a target kind; some run on ECS."""
    roll = rng.random()
    if roll < 0.3:
        kind = rng.choice(KINDS)
        extra: dict[str, Any] = {}
        if rng.random() < 0.3:
            extra["target_fails"] = {
                "times": rng.choice([1, 2, 5]),
                "error": rng.choice(REFUSALS),
                "retry_after": rng.choice([1, 5, 20]),
            }
        return {"target": spec_for(kind, rng)}, extra
    if ecs and roll < 0.5:
        own = rng.random() < 0.5
        size = rng.choice(OWN_TASK if own else IN_WORKER)
        return {"runs_on": "ecs", "resources": size, "timeout_seconds": ECS_TIMEOUT_SECONDS}, {}
    return {}, {}


@dataclass
class SimTarget:
    """The peer of one non-python target spec (see the module docstring)."""

    world: World
    kind: str

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        payload: dict[str, Any] = dict(envelope["payload"])
        refuse = payload.pop("target_fails", None)
        if refuse and ctx.attempt <= int(refuse["times"]):
            w = self.world
            call = w.ledger.start(ctx, w.loop.now, times.stored(ctx.scheduled_for))
            w.ledger.end(call, w.loop.now, ok=False, effect_key=ctx.effect_key)
            error = str(refuse["error"])
            w.faults.count("peer_refusal")
            w.trace(ctx.job_id, times.stored(ctx.scheduled_for), f"the {self.kind} peer refuses with {error}")
            if final_error_type(error):
                raise FinalTargetFailure(f"the peer answered {error}", error_type=error)
            retry_after = float(refuse["retry_after"]) if error != "ThrottlingException" else None
            raise TargetFailed(f"the peer answered {error}", error_type=error, retry_after=retry_after)
        try:
            return self.world.handler(payload, ctx)
        except Exception as exc:
            raise TargetFailed(str(exc), error_type=self._error_type(exc)) from exc

    def _error_type(self, exc: Exception) -> str:
        return {
            "http": "HTTP500",
            "lambda": type(exc).__name__,  # the function's errorType
            "stepfunctions": "States.TaskFailed",
        }.get(self.kind, "ServiceUnavailable")


@dataclass
class SimTask:
    """One Fargate task of a run's own: its exit code once STOPPED (None while it runs, or lost)."""

    arn: str
    stopped: bool = False
    exit_code: int | None = None


@dataclass
class SimOwnTask:
    """A Python run in a task of its own, started and followed by the ECS worker holding its lease."""

    world: World

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        w = self.world
        task = w.start_task(str(envelope["run_id"]), int(envelope["attempt"]))
        ctx.note_task(task.arn)
        while True:
            if task.stopped:  # read as the ECS worker reads its own task's end
                stopped = {"lastStatus": "STOPPED", "containers": [{"exitCode": task.exit_code}]}
                return task_ended(task.arn, stopped, own_task=True)
            w.faults.crash("ecs.follow_task")  # the ECS worker dies while its task runs on
            ctx.heartbeat()
            w.loop.sleep(FOLLOW_SECONDS)


@dataclass
class SimTargets:
    """jobsched.ports.TargetSource on the simulated peers."""

    world: World

    def for_spec(
        self, spec: TargetSpec, *, timeout_seconds: float | None = None, resources: Resources | None = None
    ) -> SimTarget:
        return SimTarget(self.world, spec.type)

    def for_worker_task(self, *, timeout_seconds: float | None = None, resources: Resources) -> SimOwnTask:
        return SimOwnTask(self.world)  # task timeouts are not simulated (the module docstring)

    def check(self, spec: TargetSpec) -> None:
        return None


@dataclass
class LaneQueue:
    """A process's RunQueue: each send to its run's lane queue (Outgoing.lane, else `home`)."""

    lanes: dict[str, SimQueue]
    home: str

    def send(self, outgoing: list[Outgoing]) -> None:
        by_lane: dict[str, list[Outgoing]] = {}
        for o in outgoing:
            by_lane.setdefault(o.lane or self.home, []).append(o)
        for lane, batch in by_lane.items():
            self.lanes[lane].send(batch)

    def extend(self, receipt_handle: str, *, seconds: int) -> bool:
        return self.lanes[self.home].extend(receipt_handle, seconds=seconds)


def run_task(world: World, task: SimTask, run_id: str, attempt: int) -> None:
    """The task's process: Worker.run_in_own_task, then STOPPED with its exit code (a crash: none;
    an error out of it: 1, as an uncaught exception ends a Python process)."""
    proc = world.process("ecs-task", lane="ecs")
    try:
        task.exit_code = proc.svc.worker.run_in_own_task(run_id, attempt)
    except Crash as exc:
        world.ledger.note(f"{world.loop.now:8.2f} task {task.arn} died at {exc}")
    except JobschedError as exc:
        world.ledger.note(f"{world.loop.now:8.2f} task {task.arn} failed: {type(exc).__name__}")
        task.exit_code = 1
    task.stopped = True
