"""The whole scheduler on one loop: dispatchers, workers, the event-source mapping, the API, the
reconciler and the workflows, every process on the shared in-memory stores through its own faults.

Processes (each rebuilt fresh, a new identity, after a crash):
- dispatchers (2): the EventBridge tick, once per tick_seconds each, offset so they race;
- workers (3+ instances): the SQS event-source mapping polls every second, hands a batch to an idle
  instance (a new one if all are busy, as Lambda scales out), deletes each message whose process()
  returned, leaves the rest (InFlightElsewhere, an error, a crash) to their visibility timeout;
- the API: the workload's actions through the real services (jobsched.wiring.compose);
- the reconciler: reads the redrive dead-letter queue every minute, failures.reconcile each.

Each worker invocation runs as a loop task (tests/sim/loop.py): a long handler sleeps its simulated
seconds while the rest of the fleet goes on. The worker's heartbeat thread is off
(Worker.heartbeat_thread = False): a heartbeat event every lease/3 calls ctx.heartbeat() meanwhile, as
the thread would; a stalled handler (the lost-lease fault) schedules none.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jobsched import resources
from jobsched.adapters.fargate_vcpu import MemoryFargateVcpuStore
from jobsched.adapters.memory import (
    MemoryJobStore,
    MemoryLimitStore,
    MemoryPackStore,
    MemoryRunStore,
    MemoryStateMachines,
    Received,
)
from jobsched.domain import times
from jobsched.domain.models import RunMessage
from jobsched.errors import JobschedError
from jobsched.handlers import HandlerRegistry, RunContext
from jobsched.ports import Crash, StateMachines
from jobsched.services import jobs as job_service_module
from jobsched.services.run import Delivery, InFlightElsewhere, Outcome
from jobsched.settings import Settings
from jobsched.wiring import Services, compose
from tests.sim.checks import Ledger
from tests.sim.faults import Faults, faulty_jobs, faulty_limits, faulty_packs, faulty_queue, faulty_runs
from tests.sim.loop import Loop, SimClock
from tests.sim.queue import VISIBILITY_SECONDS, SimQueue
from tests.sim.targets import MAX_ECS_INSTANCES, LaneQueue, SimTargets, SimTask, run_task

HANDLER = "sim.effect"
MAX_SKEW = 2.0  # seconds either way, per process (the API's clock is the reference)
MAX_WORKER_INSTANCES = 6
ECS_MESSAGE_IDS = 10**9  # the ECS queue's first message id ("m-1000000000")


def _state_machines_factory() -> Callable[..., StateMachines] | None:
    """sim-flows' SimStateMachines (the ASL modelled step for step) if it is on this branch."""
    try:
        from tests.sim.workflows import SimStateMachines
    except ImportError:
        return None
    return SimStateMachines  # type: ignore[no-any-return]


@dataclass
class Process:
    role: str
    svc: Services
    busy: bool = False


@dataclass
class World:
    seed: int
    loop: Loop
    rng: random.Random
    faults: Faults
    ledger: Ledger
    settings: Settings
    jobs: MemoryJobStore
    runs: MemoryRunStore
    queue: SimQueue
    machines: Any
    handlers: HandlerRegistry
    # One LimitStore for the whole fleet, as the limits table is: compose() without one gives each
    # process its own, and a concurrency key would then hold `limit` runs per worker instance.
    limits: MemoryLimitStore = field(default_factory=MemoryLimitStore)
    dispatchers: list[Process] = field(default_factory=list)
    workers: list[Process] = field(default_factory=list)
    api: Process | None = None
    reconciler: Process | None = None
    # Targets and the ECS lane (tests/sim/targets.py), on with build_world(targets=True): the ECS
    # queue, its worker instances, and the Fargate vCPU reservations the whole fleet shares.
    ecs_queue: SimQueue | None = None
    ecs_workers: list[Process] = field(default_factory=list)
    vcpu: MemoryFargateVcpuStore = field(default_factory=MemoryFargateVcpuStore)
    # Packed one-offs (jobsched.domain.packs), on with build_world(packs=True): a batch's one-offs
    # in one item, on the same stores (the world before them never packs).
    packs: MemoryPackStore | None = None
    tasks: int = 0
    processes: int = 0
    trace_log: list[str] = field(default_factory=list)

    # -- building processes ----------------------------------------------------------------------
    def process(
        self,
        role: str,
        *,
        rng: random.Random | None = None,
        faults: Faults | None = None,
        lane: str = "lambda",
    ) -> Process:
        """A fresh process: its own identity, clock skew, fault-wrapped view of the shared stores.

        `rng` and `faults`: a side process whose draws, and name, stay off the schedule's own streams
        and count (the workload's run cancels: added later, they must not shift what earlier seeds
        drew). `lane`: the worker queue it is on ("ecs": an ECS worker or a run's own task)."""
        side = rng is not None
        rng, faults = rng or self.rng, faults or self.faults
        if not side:
            self.processes += 1
        skew = 0.0 if role == "api" else rng.uniform(-MAX_SKEW, MAX_SKEW)
        if skew:
            faults.count("skewed_process")
        schedule_uuid4 = uuid.uuid4
        if side:  # the services' own ids (worker, dispatcher) drawn from the side rng too
            uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
        settings, queue, on_ecs = self.settings, self.queue, {}
        if self.ecs_queue is not None:  # targets and the ECS lane (off: the world before them)
            settings = settings.model_copy(update={"worker_lane": lane})
            queue = LaneQueue({"lambda": self.queue, "ecs": self.ecs_queue}, lane)
            on_ecs = {"targets": SimTargets(self), "fargate_vcpu": self.vcpu}
        try:
            svc = compose(
                settings,
                jobs=faulty_jobs(self.jobs, faults),
                runs=faulty_runs(self.runs, faults),
                queue=faulty_queue(queue, faults),
                limits=faulty_limits(self.limits, faults),
                packs=faulty_packs(self.packs, faults) if self.packs is not None else None,
                state_machines=self.machines,
                clock=SimClock(self.loop, skew),
                crash=faults.crash,
                handlers=self.handlers,
                **on_ecs,  # type: ignore[arg-type]
            )
        finally:
            uuid.uuid4 = schedule_uuid4
        name = f"{role}-side" if side else f"{role}-{self.processes}"
        svc.worker.worker_id = f"worker-{name}"
        svc.dispatcher.owner = f"dispatcher-{name}"
        svc.worker.heartbeat_thread = False
        svc.worker.timeout_thread = False  # a target on the task's own thread: a crash there is one
        svc.worker.sleep = lambda seconds: self.loop.sleep(float(seconds))  # type: ignore[arg-type]
        # Most workers record a healthy run in one write; some lease first: the two paths race.
        svc.worker.fast_path = rng.random() < 0.7
        svc.dispatcher.max_workers = 1
        svc.dispatcher.io_workers = 1
        svc.failures.rng = random.Random(rng.random())
        return Process(role, svc)

    def trace(self, job_id: str, sf: str, event: str) -> None:
        self.ledger.trace(job_id, f"{self.loop.now:8.2f} {sf[11:23] if sf else '':<12} {event}")

    # -- the dispatchers' tick -----------------------------------------------------------------
    def start_dispatchers(self, count: int) -> None:
        tick = self.settings.tick_seconds
        for i in range(count):
            self.dispatchers.append(self.process("dispatcher"))
            offset = i * tick / count + self.rng.uniform(0, 2)
            self.loop.at(offset, self._dispatch_event(i))

    def _dispatch_event(self, i: int) -> Callable[[], None]:
        def fire() -> None:
            proc = self.dispatchers[i]
            try:
                for shard in range(self.settings.shard_count):
                    proc.svc.dispatcher.dispatch_shard(shard)
            except (Crash, JobschedError) as exc:
                self.ledger.note(f"{self.loop.now:8.2f} dispatcher {i} died: {type(exc).__name__} {exc}")
                self.dispatchers[i] = self.process("dispatcher")
            self.loop.after(self.settings.tick_seconds + self.rng.uniform(-0.5, 0.5), fire)

        return fire

    # -- the event-source mapping ------------------------------------------------------------------
    def start_workers(self, count: int, pollers: int = 2) -> None:
        self.workers.extend(self.process("worker") for _ in range(count))
        for i in range(pollers):
            self.loop.at(i / pollers, self._poll_event())

    def _idle_worker(self) -> Process | None:
        idle = [w for w in self.workers if not w.busy]
        if idle:
            return self.rng.choice(idle)
        if len(self.workers) < MAX_WORKER_INSTANCES:
            self.workers.append(self.process("worker"))
            return self.workers[-1]
        return None

    def _poll_event(self) -> Callable[[], None]:
        def poll() -> None:
            self.loop.after(1.0, poll)
            worker = self._idle_worker()
            if worker is None:
                return
            batch = self.queue.receive(10)
            if batch:
                self.loop.spawn(lambda: self.deliver(worker, batch))

        return poll

    # -- the ECS worker: its queue, each message on a thread of its own -------------------------------
    def start_ecs_workers(self, count: int) -> None:
        """ECS worker instances on the ECS queue: each message in flight is one instance here (the
        ECS worker runs each on a thread of its task), up to MAX_ECS_INSTANCES at once."""
        self.ecs_workers.extend(self.process("ecs-worker", lane="ecs") for _ in range(count))
        self.loop.at(0.5, self._poll_ecs)

    def _poll_ecs(self) -> None:
        self.loop.after(1.0, self._poll_ecs)
        assert self.ecs_queue is not None
        idle = [w for w in self.ecs_workers if not w.busy]
        room = len(idle) + MAX_ECS_INSTANCES - len(self.ecs_workers)
        for m in self.ecs_queue.receive(min(10, room)) if room > 0 else []:
            if idle:
                worker = idle.pop()
            else:
                worker = self.process("ecs-worker", lane="ecs")
                self.ecs_workers.append(worker)
            worker.busy = True  # before its task starts: the next message takes another instance
            self.loop.spawn(lambda w=worker, m=m: self.deliver(w, [m], lane="ecs"))

    def start_task(self, run_id: str, attempt: int) -> SimTask:
        """RunTask of a run's own task: its process starts on the loop once the caller waits."""
        self.tasks += 1
        task = SimTask(f"arn:aws:ecs:us-east-1:000000000000:task/sim/{self.tasks}")
        self.loop.after(0, lambda: self.loop.spawn(lambda: run_task(self, task, run_id, attempt)))
        return task

    def deliver(self, worker: Process, batch: list[Received], *, lane: str = "lambda") -> None:
        """One invocation of a worker instance on a batch: message by message."""
        queue = self.queue if lane == "lambda" else self.ecs_queue
        assert queue is not None
        worker.busy = True
        try:
            for i, m in enumerate(batch):
                body = RunMessage.model_validate_json(m.body)
                path = "fast" if worker.svc.worker.fast_path else "leased"
                try:
                    outcome = worker.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body))
                except InFlightElsewhere as exc:
                    self.trace(
                        body.job_id,
                        body.scheduled_for,
                        f"{worker.svc.worker.worker_id} {path} left: {type(exc).__name__}",
                    )
                    continue
                except JobschedError as exc:
                    self.trace(
                        body.job_id,
                        body.scheduled_for,
                        f"{worker.svc.worker.worker_id} {path} error: {type(exc).__name__} {exc}",
                    )
                    continue
                except Crash as exc:
                    self.trace(
                        body.job_id,
                        body.scheduled_for,
                        f"{worker.svc.worker.worker_id} {path} CRASH at {exc}",
                    )
                    self.faults.count("lost_batch_messages", len(batch) - i - 1)
                    self._replace(worker, lane=lane)
                    return
                self.trace(
                    body.job_id,
                    body.scheduled_for,
                    f"{worker.svc.worker.worker_id} {path} {outcome.value} {m.message_id}",
                )
                if outcome == Outcome.SKIPPED:
                    self.ledger.observe_skip(self, body)
                queue.delete(m.receipt_handle)
        finally:
            worker.busy = False

    def _replace(self, dead: Process, *, lane: str = "lambda") -> None:
        pool = self.workers if lane == "lambda" else self.ecs_workers
        idx = next(i for i, w in enumerate(pool) if w is dead)
        pool[idx] = self.process("worker" if lane == "lambda" else "ecs-worker", lane=lane)

    def queues(self) -> list[SimQueue]:
        """The worker queues: the execution queue, and the ECS queue when there is one."""
        return [self.queue] if self.ecs_queue is None else [self.queue, self.ecs_queue]

    # -- the reconciler ----------------------------------------------------------------------------
    def start_reconciler(self, every: float = 60.0) -> None:
        self.reconciler = self.process("reconciler")

        def reconcile() -> None:
            self.loop.after(every, reconcile)
            assert self.reconciler is not None
            # The ECS queue redrives to the same dead-letter queue (resources.ECS_QUEUE).
            for m in [d for q in self.queues() for d in q.take_dead(10)]:
                body = RunMessage.model_validate_json(m.body)
                try:
                    answer = self.reconciler.svc.failures.reconcile(body)
                except (Crash, JobschedError) as exc:
                    self.queue.dead.append(m)  # stays in the dead-letter queue for the next read
                    self.reconciler = self.process("reconciler")
                    answer = f"died: {type(exc).__name__}"
                self.trace(body.job_id, body.scheduled_for, f"reconciler {answer}")

        self.loop.at(every, reconcile)

    # -- the handler: effects, long runs, stalls ---------------------------------------------------
    def handler(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        sf = times.stored(ctx.scheduled_for)
        key = self.ledger.start(ctx, self.loop.now, sf)
        hold, stall = float(payload.get("hold", 0)), float(payload.get("stall", 0))
        if stall and ctx.attempt == 1:
            self.faults.count("lost_lease")
            self.ledger.stalled.add((ctx.job_id, sf))
            self.loop.sleep(stall)  # no heartbeat: the leases lapse meanwhile
        elif hold:
            self._busy(hold, ctx)
        fails = int(payload.get("fail_times", 0)) >= ctx.attempt
        self.ledger.end(key, self.loop.now, ok=not fails, effect_key=ctx.effect_key)
        if fails:
            error = payload.get("error", "RuntimeError")
            raise (ValueError if error == "ValueError" else RuntimeError)(f"sim fails attempt {ctx.attempt}")
        return {"ok": True}

    def _busy(self, seconds: float, ctx: RunContext) -> None:
        """The handler takes `seconds`: the fleet runs meanwhile; a heartbeat every lease/3."""
        interval = self.settings.lease_seconds / 3
        done = False

        def beat() -> None:
            if done:
                return
            ctx.heartbeat()  # renewals catch their own errors, as on the heartbeat thread
            self.loop.after(interval, beat)

        self.loop.after(interval, beat)
        self.loop.sleep(seconds)
        done = True


def settings_for(rng: random.Random) -> Settings:
    return Settings(
        jobs_table="sim-jobs",
        runs_table="sim-runs",
        execution_queue_url="sim://execution",
        execution_dlq_url="sim://execution-dlq",
        failure_workflow_arn="arn:aws:states:sim:000000000000:stateMachine:failure",
        dag_workflow_arn="arn:aws:states:sim:000000000000:stateMachine:dag",
        shard_count=2,
        lease_seconds=VISIBILITY_SECONDS,  # the lease is the queue's visibility timeout
        handover_horizon_seconds=rng.choice([0, 300]),
    )


def build_world(seed: int, *, fault_scale: float = 1.0, targets: bool = False, packs: bool = False) -> World:
    """`targets`: targets and the ECS lane (tests/sim/targets.py); off, the world before them.
    `packs`: a batch's one-offs packed (jobsched.domain.packs); off, every job its own item."""
    rng = random.Random(seed)
    loop = Loop()
    faults = Faults(
        random.Random(rng.random()),
        rate=0.02 * fault_scale,
        timeout_rate=0.01 * fault_scale,
        stale_rate=0.1 * fault_scale,
        crash_rate=0.02 * fault_scale,
    )
    settings = settings_for(rng)
    if targets:
        settings = settings.model_copy(update={"ecs_queue_url": "sim://ecs"})
    clock = SimClock(loop)
    jobs, runs = MemoryJobStore(shard_count=settings.shard_count), MemoryRunStore()
    queue = SimQueue(
        clock=clock,
        visibility_seconds=settings.lease_seconds,
        rng=random.Random(rng.random()),
        duplicate_rate=0.03 * fault_scale,
    )
    factory = _state_machines_factory()
    machines: Any
    if factory is None:
        machines = MemoryStateMachines(settings.failure_workflow_arn)
    else:
        machines = factory(
            jobs=jobs, runs=runs, queue=queue, settings=settings, clock=clock,
            schedule=loop.after, fault=faults.step, fault_after=faults.step_after,
        )  # fmt: skip
    world = World(seed, loop, rng, faults, Ledger(), settings, jobs, runs, queue, machines, HandlerRegistry())
    world.handlers.register(HANDLER, world.handler)
    if packs:
        world.packs = MemoryPackStore(jobs, runs)
    if targets:  # its draws from a stream of its own: the schedule's other draws stay as they were
        world.ecs_queue = SimQueue(
            clock=clock,
            visibility_seconds=resources.ECS_QUEUE.visibility_timeout_seconds,
            rng=random.Random(f"ecs-queue-{seed}"),
            duplicate_rate=0.03 * fault_scale,
            max_receive_count=resources.ECS_QUEUE.max_receive_count or 0,
            _ids=itertools.count(ECS_MESSAGE_IDS),  # message ids of their own (key holders name them)
        )
    return world


@contextlib.contextmanager
def deterministic(rng: random.Random, loop: Loop) -> Iterator[None]:
    """Ids drawn from the seed: uuid4 (worker owners, lease owners) and job ids (time from the loop)."""
    crockford = "0123456789abcdefghjkmnpqrstvwxyz"

    def job_id() -> str:
        value = (int(loop.instant().timestamp() * 1000) << 80) | rng.getrandbits(80)
        chars = []
        for _ in range(26):
            value, rem = divmod(value, 32)
            chars.append(crockford[rem])
        return "job_" + "".join(reversed(chars))

    real_uuid4, real_job_id = uuid.uuid4, job_service_module.new_job_id
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    job_service_module.new_job_id = job_id
    try:
        yield
    finally:
        uuid.uuid4, job_service_module.new_job_id = real_uuid4, real_job_id
