"""A schedule's workload, drawn from its seed, and the schedule's life: load, settle, quiesce, drain.

Jobs: one-offs (failing, non-retryable, idempotent: false, long, cancelled at a random moment),
recurring jobs (cron with seconds and without, timezones, every overlap and catch-up policy,
jitter, a starting deadline, long handlers, stalls past the lease), DAGs (two roots and a dependant).
API actions at random moments, through the real services: create, edit (PATCH), pause, resume,
cancel, run-now, backfill, replay of dead letters. An action that raised is looked up afterwards
in the store (fault-free): a timeout after the write means it may have applied all the same.

Run cancels (POST /api/runs/{id}/cancel, RunService.cancel) came later: they draw from their own
rng (seeded from the schedule's seed) and call through a side API process with its own faults, so
every seed draws what it drew before, and its schedule is the same up to the first cancel that
changes a run. They aim where a cancel races a worker: a one-off around its run_at, a recurring
job's tick around its due time, and runs in progress or being retried (a sweep now and then).

Concurrency keys and priorities came after them, drawn the same way from a stream of their own
(`keys-<seed>`): a share of the one-offs and recurring jobs name a key of a small pool (KEYS: two
with limit 1, one with limit 2; jobs sharing a key name its one limit), so their runs wait for one
another (a run whose key is full notes the wait on its row and sends itself a delayed copy), and
each of them a priority (the dispatcher's fair order). The key slots live in one LimitStore the
whole fleet shares (World.limits), seen by each process through its own faults. Off
(`simulate(keys=False)`, SIM_KEYS=0), every job is drawn as before: no key, priority "normal".

Targets and ECS runs came last, from a stream of their own too (`targets-<seed>`, tests/sim/targets.py):
a share of the one-offs and recurring jobs call a target of another kind (http, lambda, sqs, sns,
eventbridge, stepfunctions: a simulated peer that may refuse with a retryable, a Retry-After or a
final error) instead of the python handler, and a share run on ECS (the ECS queue and its workers;
half of them in a Fargate task of their own). Off (`simulate(targets=False)`, SIM_TARGETS=0), the
world has no ECS lane and every job calls the python handler, as before.

Packed one-offs came after those (jobsched.domain.packs), from a stream of their own (`packs-<seed>`):
half of the one-offs are created in a batch (POST /api/jobs/batch, with the batch's Idempotency-Key)
with up to four more drawn from that stream, and packed; some of those are then cancelled, paused
and resumed, or read (each of which copies the job out to an item of its own), at random moments. Off
(`simulate(packs=False)`, SIM_PACKS=0), the world packs nothing and every one-off is created alone.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobsched.domain import times
from jobsched.domain.commands import BackfillRequest, CreateJobRequest, PatchJobRequest
from jobsched.domain.compute import needs_own_task
from jobsched.domain.keys import run_id_for
from jobsched.domain.limits import Concurrency
from jobsched.domain.models import Backoff
from jobsched.domain.packs import parse_packed
from jobsched.domain.status import HELD, JobStatus, RunStatus
from jobsched.errors import JobschedError
from jobsched.ports import Crash
from jobsched.services.runs import RunService
from tests.sim import targets as sim_targets
from tests.sim.checks import check, job_view
from tests.sim.faults import Faults
from tests.sim.world import HANDLER, Process, World, build_world, deterministic

TENANT = "t"
TIMEZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Europe/Berlin"]
CRONS = ["*/10 * * * * *", "*/15 * * * * *", "*/20 * * * * *", "* * * * *"]
# The concurrency keys' pool: (key, limit), the limit the same for every job naming the key.
KEYS = [("db", 1), ("api", 2), ("batch", 1)]
PRIORITIES = ["high", "normal", "low"]
SETTLE_SECONDS = 180  # fault-free seconds after the load before the quiesce (more than 2 passes)
# The drain ends once nothing moved for DRAIN_LIMIT_SECONDS (no handler ran: a run that waits for
# its key or its turn may wait long behind a backlog, as a job whose ticks come faster than its
# handler ends under a key of limit 1 builds one), and after DRAIN_CAP_SECONDS in any case.
DRAIN_LIMIT_SECONDS = 1800
DRAIN_CAP_SECONDS = 6 * 3600


@dataclass
class Accepted:
    """A job the API answered 201 for, and what the API did to it since (as the store says)."""

    job_id: str
    request: CreateJobRequest
    created: datetime
    edits: list[tuple[datetime, str, str]] = field(default_factory=list)  # (at, cron, tz)
    pauses: list[tuple[datetime, datetime | None]] = field(default_factory=list)
    cancelled_at: datetime | None = None
    overlap_policy: str = "skip"

    def stretches(self, *, until: datetime) -> Iterator[tuple[str, str, datetime, datetime]]:
        """(cron, timezone, from, to) of each stretch of the schedule, up to the cancel or `until`."""
        assert self.request.cron_expr is not None
        end = min(until, self.cancelled_at) if self.cancelled_at else until
        marks = [(self.created, self.request.cron_expr, self.request.timezone), *self.edits]
        for (at, expr, tz), nxt in zip(marks, [*marks[1:], None], strict=True):
            stop = min(end, nxt[0]) if nxt else end
            if at < stop:
                yield expr, tz, at, stop

    def in_pause(self, tick: datetime) -> bool:
        return any(p < tick and (r is None or tick <= r) for p, r in self.pauses)

    def resumed_after(self, tick: datetime) -> bool:
        return any(p < tick and r is not None and tick <= r for p, r in self.pauses)


@dataclass
class Result:
    seed: int
    jobs: int
    runs: int
    handler_calls: int
    sim_seconds: float
    events: int
    faults: Counter[str]
    violations: list[str]
    digest: str
    traces: dict[str, list[str]]
    statuses: Counter[str]
    wall_seconds: float
    tasks: int = 0  # ECS tasks started for runs of their own


class Workload:
    def __init__(
        self,
        world: World,
        *,
        minutes: float,
        scale: int,
        failures: bool,
        run_cancels: bool = True,
        keys: bool = True,
        targets: bool = False,
        packs: bool = False,
    ) -> None:
        self.w, self.rng = world, world.rng
        self.load_seconds = minutes * 60
        self.scale = scale
        self.failures = failures
        self.accepted: dict[str, Accepted] = {}
        self.api = world.process("api")
        # Set when the quiesce begins: the client's own planned actions stop there (a resume it had
        # planned for later undid the quiesce's pause, and the drain's cancels met runs: seed 24).
        self.stopped = False
        self.unanswered: list[tuple[CreateJobRequest, str]] = []  # creates with no answer (and their keys)
        # The run cancels' own draws, faults and API process (see the module docstring).
        self.run_rng = random.Random(f"runcancel-{world.seed}")
        f = world.faults
        self.run_faults = Faults(
            random.Random(f"runcancel-faults-{world.seed}"),
            rate=f.rate, timeout_rate=f.timeout_rate, stale_rate=f.stale_rate, crash_rate=f.crash_rate,
        )  # fmt: skip
        self.run_api: Process | None = None
        self.run_cancels = run_cancels
        # The concurrency keys' and priorities' own draws (see the module docstring).
        self.key_rng = random.Random(f"keys-{world.seed}")
        self.keys = keys
        # The targets' and ECS placements' own draws (see the module docstring).
        self.target_rng = random.Random(f"targets-{world.seed}")
        self.targets = targets
        # Packed one-offs' own draws (see the module docstring).
        self.pack_rng = random.Random(f"packs-{world.seed}")
        self.packs = packs
        self.unanswered_batches: list[tuple[list[CreateJobRequest], str]] = []

    # -- calling the API like a client ---------------------------------------------------------------
    def call(self, what: str, job_id: str, fn: Callable[[Any], Any]) -> Any:
        """One API request; a crash or a fault is an error answer (the client sees no 2xx)."""
        try:
            out = fn(self.api.svc)
        except Crash as exc:
            self.api = self.w.process("api")
            self.w.trace(job_id, "", f"api {what}: the API died at {exc}")
            return None
        except JobschedError as exc:
            self.w.trace(job_id, "", f"api {what}: {exc.status} {type(exc).__name__}")
            return None
        self.w.trace(job_id, "", f"api {what}: 2xx")
        return out if out is not None else True

    def create(self, request: CreateJobRequest, key: str | None = None) -> str | None:
        """POST /api/jobs with an Idempotency-Key, tried up to 6 times now; a create still unanswered
        then is tried again once the faults stop (answer_unanswered): its write may have applied."""
        late = key is not None
        key = key or f"k{len(self.accepted)}-{self.rng.getrandbits(32)}"
        for _ in range(6):  # a client retries with the same Idempotency-Key until it gets an answer
            created = self.call(
                "create", "", lambda s: s.job_service.submit(request, tenant=TENANT, idempotency_key=key)
            )
            if created is not None:
                now = self.w.loop.instant()
                if late:  # its job was written at its first try (and may have run since): its ticks
                    # are those after that instant, as the job's own schedule counts them
                    now = min(now, self.job(created.job_id).created_at + timedelta(milliseconds=1))
                self.accepted[created.job_id] = Accepted(
                    created.job_id, request, now, overlap_policy=request.overlap_policy
                )
                what = f"{request.type} {request.cron_expr or ''} {request.timezone} {request.overlap_policy}"
                if request.concurrency is not None:
                    what += f" key={request.concurrency.key}/{request.concurrency.limit}"
                if request.priority != "normal":
                    what += f" priority={request.priority}"
                if request.target is not None and request.target.type != "python":
                    what += f" target={request.target.type}"
                if request.runs_on == "ecs" and request.resources is not None:
                    what += f" ecs={request.resources.cpu}/{request.resources.memory_mib}"
                self.w.trace(
                    created.job_id, "", f"accepted {what} catchup={request.catchup} payload={request.payload}"
                )
                self._plan_run_cancels(created.job_id, request)
                return str(created.job_id)
        self.unanswered.append((request, key))
        return None

    def create_batch(self, requests: list[CreateJobRequest], key: str | None = None) -> str | None:
        """POST /api/jobs/batch with the batch's Idempotency-Key, tried as create() tries; the first
        job's id. Its plain one-offs are packed: some are then cancelled, paused or read."""
        key = key or f"b{len(self.accepted)}-{self.pack_rng.getrandbits(32)}"
        items = [(r, None) for r in requests]
        for _ in range(6):
            out = self.call(
                "create batch",
                "",
                lambda s: s.job_service.submit_batch(items, tenant=TENANT, idempotency_key=key),
            )
            if out is None:
                continue
            first: str | None = None
            for request, answer in zip(requests, out, strict=True):
                if isinstance(answer, JobschedError):
                    self.w.trace("", "", f"api create batch: an item {answer.status} {type(answer).__name__}")
                    continue
                job_id = str(answer.job_id)
                first = first or job_id
                if job_id in self.accepted:
                    continue
                self.accepted[job_id] = Accepted(job_id, request, self.w.loop.instant())
                packed = " packed" if parse_packed(job_id) else ""
                self.w.trace(job_id, "", f"accepted one_off{packed} in a batch payload={request.payload}")
                self._plan_run_cancels(job_id, request)
                self._plan_packed_actions(job_id)
            return first
        self.unanswered_batches.append((requests, key))
        return None

    def _plan_packed_actions(self, job_id: str) -> None:
        """A batch's job cancelled, paused and resumed, or read, at a random moment (the packs' rng)."""
        rng = self.pack_rng
        roll = rng.random()
        at = rng.uniform(0, 160)
        if roll < 0.2:
            self.w.loop.after(at, lambda: self.cancel_once(job_id))
        elif roll < 0.3:
            self.w.loop.after(at, self._planned(lambda: self.pause(job_id)))
            self.w.loop.after(at + rng.uniform(5, 120), self._planned(lambda: self.resume(job_id)))
        elif roll < 0.4:
            read = self._planned(
                lambda: self.call("get", job_id, lambda s: s.job_service.get(job_id, tenant=TENANT))
            )
            self.w.loop.after(at, read)

    def _packed_one_off(self) -> CreateJobRequest:
        """One more one-off of a batch, drawn from the packs' rng as one_off() draws one."""
        rng, now = self.pack_rng, self.w.loop.instant()
        payload: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        roll = rng.random()
        if roll < 0.15:
            payload["hold"] = rng.randint(5, 90)
        elif roll < 0.2:
            payload["stall"] = rng.randint(70, 130)
        if self.failures and rng.random() < 0.3:
            payload["fail_times"] = rng.choice([1, 2, 5])
            extra["max_attempts"] = rng.choice([1, 2, 3])
            extra["backoff"] = Backoff(initial_seconds=rng.choice([1, 5]), multiplier=2, max_seconds=30)
        if rng.random() < 0.2:
            extra["idempotent"] = False
        return CreateJobRequest(
            type="one_off", handler=HANDLER, payload=payload,
            run_at=now + timedelta(seconds=rng.randint(1, 150)), **extra,
        )  # fmt: skip

    def answer_unanswered(self) -> None:
        """The client's creates that got no answer, tried again with their keys (faults over): one whose
        write had applied answers its job, which the client then knows (and the quiesce stops)."""
        pending, self.unanswered = self.unanswered, []
        for request, key in pending:
            self.create(request, key)
        batches, self.unanswered_batches = self.unanswered_batches, []
        for requests, key in batches:
            self.create_batch(requests, key)

    def job(self, job_id: str) -> Any:
        return job_view(self.w, job_id)  # the store itself: fault-free, consistent (a packed job's view)

    def cancel_run(self, job_id: str, sf: str) -> None:
        """POST /api/runs/{id}/cancel through the side API process. An answer CANCELLED is the
        promise that the run's handler never runs after it (ledger.run_cancelled_at)."""
        self.run_faults.active = self.w.faults.active
        if self.run_api is None:
            self.run_api = self.w.process("api", rng=self.run_rng, faults=self.run_faults)
        api, run_id = self.run_api, run_id_for(job_id, times.parse_stored(sf))
        try:
            out = RunService(job_service=api.svc.job_service).cancel(run_id, tenant=TENANT)
        except Crash as exc:
            self.run_api = None
            self.w.trace(job_id, sf, f"api run-cancel: the API died at {exc}")
            self.w.ledger.run_cancel_asked.add((job_id, sf))  # it may have applied before
            return
        except JobschedError as exc:
            self.w.trace(job_id, sf, f"api run-cancel: {exc.status} {type(exc).__name__}")
            if exc.status >= 500:  # a 5xx may have applied (its first write went through)
                self.w.ledger.run_cancel_asked.add((job_id, sf))
            return
        self.w.trace(job_id, sf, f"api run-cancel: {out.status.value}{' stopping' if out.stopping else ''}")
        self.w.ledger.run_cancel_asked.add((job_id, sf))
        if out.status == RunStatus.CANCELLED and not out.stopping:
            self.w.ledger.run_cancelled_at.setdefault((job_id, sf), self.w.loop.now)

    def _plan_run_cancels(self, job_id: str, request: CreateJobRequest) -> None:
        """Whether and when a client cancels one of the job's runs (the run rng only)."""
        rng = self.run_rng
        if not self.run_cancels:
            return
        if request.type == "one_off" and request.run_at is not None and rng.random() < 0.3:
            sf = times.stored(times.to_utc(request.run_at))
            due = (times.to_utc(request.run_at) - self.w.loop.instant()).total_seconds()
            for _ in range(rng.randint(1, 2)):  # around its run_at; a second one later (a retry)
                at = due + rng.choice([rng.uniform(-3, 4), rng.uniform(4, 90)])
                self.w.loop.after(at, self._planned(lambda: self.cancel_run(job_id, sf)))
        elif request.type == "recurring" and rng.random() < 0.5:
            for _ in range(rng.randint(1, 3)):
                at = rng.uniform(5, max(20, self.load_seconds - 60))
                offset = rng.choice([rng.uniform(-4, 2), rng.uniform(2, 30)])  # before its start, or in it
                self.w.loop.after(at, self._planned(lambda o=offset: self._cancel_next_tick(job_id, o)))

    def _cancel_next_tick(self, job_id: str, offset: float) -> None:
        """Cancel the job's next tick `offset` seconds from its due time (before or after it)."""
        job = self.job(job_id)
        if job is None or job.next_run_at is None:
            return
        sf = times.stored(job.next_run_at)
        at = (job.next_run_at - self.w.loop.instant()).total_seconds() + offset
        self.w.loop.after(at, self._planned(lambda: self.cancel_run(job_id, sf)))

    def _sweep_runs(self) -> None:
        """Now and then a client cancels a run in progress, held or being retried (held under a
        lapsed lease, or past its first attempt, most often)."""
        rng = self.run_rng
        if self.stopped:
            return
        self.w.loop.after(rng.uniform(10, 40), self._sweep_runs)
        now = self.w.loop.instant()
        live = [
            r
            for j in self.accepted
            for r in self.w.runs.since(j, after=self.w.loop.start - timedelta(days=3650))
            if r.status in (RunStatus.PENDING, *HELD)
        ]
        if not live:
            return
        favoured = [
            r
            for r in live
            if r.attempt > 1 or (r.status in HELD and r.lease_until is not None and r.lease_until < now)
        ]
        r = rng.choice(favoured if favoured and rng.random() < 0.7 else live)
        self.cancel_run(r.job_id, times.stored(r.scheduled_for))

    # -- the actions ----------------------------------------------------------------------------------
    def pause(self, job_id: str) -> None:
        self.call("pause", job_id, lambda s: s.schedule.pause(job_id, tenant=TENANT))
        job, acc = self.job(job_id), self.accepted[job_id]
        paused = job is not None and job.status == JobStatus.PAUSED and job.paused_at is not None
        if paused and (not acc.pauses or acc.pauses[-1][1] is not None):
            acc.pauses.append((job.paused_at, None))

    def resume(self, job_id: str) -> None:
        self.call("resume", job_id, lambda s: s.schedule.resume(job_id, tenant=TENANT))
        job, acc = self.job(job_id), self.accepted[job_id]
        if job is not None and job.status == JobStatus.SCHEDULED and acc.pauses and acc.pauses[-1][1] is None:
            acc.pauses[-1] = (acc.pauses[-1][0], self.w.loop.instant())

    def cancel(self, job_id: str) -> bool:
        out = self.call("cancel", job_id, lambda s: s.job_service.cancel(job_id, tenant=TENANT))
        acc = self.accepted[job_id]
        if out is not None and job_id not in self.w.ledger.cancelled_at:
            self.w.ledger.cancelled_at[job_id] = self.w.loop.now  # a 200: the promise is made
        job = self.job(job_id)
        if job is not None and job.status == JobStatus.CANCELLED and acc.cancelled_at is None:
            acc.cancelled_at = self.w.loop.instant()
        return out is not None

    def edit(self, job_id: str) -> None:
        acc = self.accepted[job_id]
        if self.rng.random() < 0.5:
            expr, tz = self.rng.choice(CRONS), self.rng.choice(TIMEZONES)
            patch = PatchJobRequest(cron_expr=expr, timezone=tz)
        else:
            patch = PatchJobRequest(payload={**acc.request.payload, "hold": self.rng.choice([0, 3, 25])})
            expr = tz = ""
        before = self.job(job_id)
        self.call("edit", job_id, lambda s: s.schedule.edit(job_id, patch, tenant=TENANT))
        after = self.job(job_id)
        if expr and before is not None and after is not None and after.version != before.version:
            acc.edits.append((self.w.loop.instant(), expr, tz))

    def run_now(self, job_id: str) -> None:
        self.call("run-now", job_id, lambda s: s.schedule.run_now(job_id, tenant=TENANT))

    def backfill(self, job_id: str) -> None:
        now = self.w.loop.instant()
        request = BackfillRequest.model_validate(
            {"from": now - timedelta(seconds=self.rng.randint(60, 600)), "to": now - timedelta(seconds=30)}
        )
        self.call("backfill", job_id, lambda s: s.schedule.backfill(job_id, request, tenant=TENANT))

    def replay(self) -> None:
        page = self.call(
            "list dead letters",
            "",
            lambda s: s.failures.list_dead_letters(tenant=TENANT, cursor=None, limit=10),
        )
        if page is None or page is True or not page.items:
            return
        item = self.rng.choice(page.items)
        self.call("replay", item.job_id, lambda s: s.failures.replay(item.run_id, tenant=TENANT))

    # -- drawing the jobs --------------------------------------------------------------------------
    def _draw_keys(self, share: float) -> dict[str, Any]:
        """A concurrency key (`share` of the jobs) and a priority, from the keys' rng only."""
        rng = self.key_rng
        if not self.keys:
            return {}
        extra: dict[str, Any] = {"priority": rng.choice(PRIORITIES)}
        if rng.random() < share:
            key, limit = rng.choice(KEYS)
            extra["concurrency"] = Concurrency(key=key, limit=limit)
        return extra

    def _draw_target(self, payload: dict[str, Any]) -> dict[str, Any]:
        """What the job calls and where it runs (the targets' rng only): the request's fields, with
        `handler` for the python handler; `payload` takes the peer's refusals."""
        if not self.targets:
            return {"handler": HANDLER}
        fields, more = sim_targets.draw(self.target_rng, ecs=True)
        payload.update(more)
        if fields.get("runs_on") == "ecs" and needs_own_task(fields["resources"]):
            # A stall is a handler that stops beating: a run's own task beats through the ECS worker
            # that follows it, so a stall there is only a long hold.
            payload.pop("stall", None)
        return fields if "target" in fields else {"handler": HANDLER, **fields}

    def one_off(self) -> None:
        rng, now = self.rng, self.w.loop.instant()
        payload: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        roll = rng.random()
        if roll < 0.15:
            payload["hold"] = rng.randint(5, 90)  # long: past the heartbeat interval, some past the lease
        elif roll < 0.2:
            payload["stall"] = rng.randint(70, 130)  # the lost lease: no heartbeat past the lease
        if self.failures and rng.random() < 0.3:
            payload["fail_times"] = rng.choice([1, 2, 5])
            if rng.random() < 0.3:
                payload["error"] = "ValueError"
                extra["non_retryable_errors"] = ["ValueError"]
            extra["max_attempts"] = rng.choice([1, 2, 3])
            extra["backoff"] = Backoff(initial_seconds=rng.choice([1, 5]), multiplier=2, max_seconds=30)
        if rng.random() < 0.2:
            extra["idempotent"] = False
        extra.update(self._draw_keys(0.5))
        extra.update(self._draw_target(payload))
        request = CreateJobRequest(
            type="one_off", payload=payload, run_at=now + timedelta(seconds=rng.randint(1, 150)), **extra,
        )  # fmt: skip
        if self.packs and self.pack_rng.random() < 0.5:
            more = [self._packed_one_off() for _ in range(self.pack_rng.randint(0, 4))]
            job_id = self.create_batch([request, *more])
        else:
            job_id = self.create(request)
        if job_id and rng.random() < 0.25:  # a client cancels it at a random moment of its life
            self.w.loop.after(rng.uniform(0, 160), lambda: self.cancel_once(job_id))

    def cancel_once(self, job_id: str) -> None:
        self.cancel(job_id)

    def recurring(self) -> None:
        rng = self.rng
        payload: dict[str, Any] = {}
        roll = rng.random()
        if roll < 0.3:
            payload["hold"] = rng.randint(5, 40)  # often longer than the interval: ticks meet a run
        elif roll < 0.35:
            payload["stall"] = rng.randint(70, 100)
        extra: dict[str, Any] = {}
        if rng.random() < 0.2:
            extra["jitter_seconds"] = rng.randint(1, 8)
        if rng.random() < 0.15:
            extra["starting_deadline_seconds"] = rng.randint(5, 60)
        if self.failures and rng.random() < 0.2:
            payload["fail_times"] = 1
            extra["backoff"] = Backoff(initial_seconds=1, multiplier=1, max_seconds=1, jitter=False)
        if rng.random() < 0.1:
            extra["idempotent"] = False
        extra.update(self._draw_keys(0.4))
        extra.update(self._draw_target(payload))
        job_id = self.create(
            CreateJobRequest(
                type="recurring", payload=payload,
                cron_expr=rng.choice(CRONS), timezone=rng.choice(TIMEZONES),
                overlap_policy=rng.choice(["skip", "buffer_one", "allow"]),
                catchup=rng.choice(["one", "none", "all"]), max_catchup=rng.choice([1, 3, 10]), **extra,
            )
        )  # fmt: skip
        if job_id is None:
            return
        for _ in range(rng.randint(0, 3)):
            at = rng.uniform(10, max(20, self.load_seconds - 120))
            action = rng.choice(["pause", "edit", "run_now", "backfill", "cancel"])
            if action == "pause":
                self.w.loop.after(at, self._planned(lambda: self.pause(job_id)))
                self.w.loop.after(at + rng.uniform(5, 240), self._planned(lambda: self.resume(job_id)))
            else:
                self.w.loop.after(at, self._planned(lambda a=action: getattr(self, a)(job_id)))

    def _planned(self, action: Callable[[], object]) -> Callable[[], None]:
        """A client action planned for later: dropped once the quiesce has begun."""

        def act() -> None:
            if not self.stopped:
                action()

        return act

    def dag(self) -> None:
        now = self.w.loop.instant()
        roots = [
            self.create(
                CreateJobRequest(
                    type="one_off",
                    handler=HANDLER,
                    run_at=now + timedelta(seconds=self.rng.randint(5, 90)),
                    payload={"fail_times": 5} if self.failures and self.rng.random() < 0.15 else {},
                    max_attempts=2,
                    backoff=Backoff(initial_seconds=1, multiplier=1, max_seconds=1, jitter=False),
                )
            )
            for _ in range(2)
        ]
        if all(roots):
            self.create(
                CreateJobRequest(type="dependent", handler=HANDLER, depends_on=[r for r in roots if r])
            )

    def plan(self) -> None:
        """Creations spread over the load; replays of dead letters now and then."""
        rng = self.rng
        for _ in range(self.scale):
            # DAGs need the DAG workflow (tests/sim/workflows.py): without it nothing releases them.
            kind = rng.choices(["one_off", "recurring", "dag"], weights=[5, 3, 2 if self.failures else 0])[0]
            self.w.loop.at(rng.uniform(0, self.load_seconds - 60), getattr(self, kind))
        for _ in range(rng.randint(0, 3)):
            self.w.loop.at(rng.uniform(60, self.load_seconds), self.replay)
        if self.run_cancels:
            self.w.loop.at(self.run_rng.uniform(20, 60), self._sweep_runs)


def settled(w: World, accepted: dict[str, Accepted]) -> bool:
    if any(q.depth() or q.dead for q in w.queues()):
        return False
    busy = getattr(w.machines, "busy", None)
    if callable(busy) and busy():
        return False
    for job_id in accepted:
        for r in w.runs.since(job_id, after=w.loop.start - timedelta(days=3650)):
            if r.status in (RunStatus.PENDING, RunStatus.LEASED, RunStatus.RUNNING, RunStatus.FAILED):
                return False
    return True


def simulate(
    seed: int,
    *,
    minutes: float = 10,
    scale: int = 12,
    fault_scale: float = 1.0,
    run_cancels: bool | None = None,
    keys: bool | None = None,
    targets: bool | None = None,
    packs: bool | None = None,
) -> Result:
    """Run one schedule: load with faults, settle without, quiesce, drain; then check.

    `run_cancels`: whether the client cancels runs (None: unless SIM_RUN_CANCELS=0). Their effects
    shift a seed's schedule from the first cancel that changes a run (tens of seconds in, most
    seeds): a seed found without them (tests/sim/regressions.py REGRESSION_SEEDS) replays without.
    `keys`: whether jobs name concurrency keys and priorities (None: unless SIM_KEYS=0); the same
    holds for them (RUN_CANCEL_SEEDS replay without keys, KEY_SEEDS with both).
    `targets`: targets and ECS runs (None: unless SIM_TARGETS=0); KEY_SEEDS replay without them.
    `packs`: batches of packed one-offs (None: unless SIM_PACKS=0); TARGET_SEEDS replay without them.
    """
    if run_cancels is None:
        run_cancels = os.environ.get("SIM_RUN_CANCELS", "1") != "0"
    if keys is None:
        keys = os.environ.get("SIM_KEYS", "1") != "0"
    if targets is None:
        targets = os.environ.get("SIM_TARGETS", "1") != "0"
    if packs is None:
        packs = os.environ.get("SIM_PACKS", "1") != "0"
    started = time.perf_counter()
    w = build_world(seed, fault_scale=fault_scale, targets=targets, packs=packs)
    with deterministic(w.rng, w.loop), contextlib.closing(w.loop):  # closing: no task left asleep
        failures = not type(w.machines).__name__.startswith("Memory")
        load = Workload(
            w, minutes=minutes, scale=scale, failures=failures, run_cancels=run_cancels, keys=keys,
            targets=targets, packs=packs,
        )  # fmt: skip
        w.start_dispatchers(2)
        w.start_workers(3)
        if targets:
            w.start_ecs_workers(2)
        w.start_reconciler()
        load.plan()
        w.loop.run_until(load.load_seconds)
        load_end = w.loop.instant()
        w.faults.active = False
        w.queue.duplicate_rate = 0.0
        load.answer_unanswered()
        w.loop.run_until(load.load_seconds + SETTLE_SECONDS)
        # Quiesce: recurring jobs are paused, then cancelled (a cancel answers 409 while a run is in
        # progress: it is tried again), and everything left drains.
        load.stopped = True
        recurring = [j for j, a in load.accepted.items() if a.request.type == "recurring"]
        for job_id in recurring:
            load.pause(job_id)
        to_cancel = list(recurring)
        deadline = w.loop.now + DRAIN_LIMIT_SECONDS
        cap = w.loop.now + DRAIN_CAP_SECONDS
        calls = len(w.ledger.calls)
        while w.loop.now < deadline:
            to_cancel = [j for j in to_cancel if not load.cancel(j) and _cancellable(load.job(j))]
            w.loop.run_until(w.loop.now + 30)
            if len(w.ledger.calls) != calls:  # a handler ran: the drain moves on
                calls = len(w.ledger.calls)
                deadline = min(cap, w.loop.now + DRAIN_LIMIT_SECONDS)
            if not to_cancel and (settled(w, load.accepted) or _idle(w)):
                break  # settled, or stuck with nothing left in flight that could move it
        else:
            w.ledger.note("the drain ran out of time")
        violations = check(w, load.accepted, load_end=load_end)
        # A job whose cancel was still refused when the drain ran out is named (so its trace is printed):
        # a cancel refused for half an hour without faults is itself a broken promise.
        violations.extend(
            f"{j}: cancel still refused after {DRAIN_LIMIT_SECONDS} s of drain" for j in to_cancel
        )
        if not settled(w, load.accepted):
            violations.append(f"-: the schedule did not settle within {DRAIN_LIMIT_SECONDS} s of drain")
    statuses: Counter[str] = Counter(
        r.status.value
        for j in load.accepted
        for r in w.runs.since(j, after=w.loop.start - timedelta(days=3650))
    )
    faults = Counter(w.faults.injected)
    faults.update({"duplicate_delivery": w.queue.duplicates, "redrive": w.queue.redriven})
    faults = Counter({k: v for k, v in faults.items() if v})
    return Result(
        seed=seed, jobs=len(load.accepted), runs=sum(statuses.values()), handler_calls=len(w.ledger.calls),
        sim_seconds=w.loop.now, events=w.loop.events, faults=faults, violations=violations,
        digest=w.ledger.digest(), traces=dict(w.ledger.traces), statuses=statuses,
        wall_seconds=time.perf_counter() - started, tasks=w.tasks,
    )  # fmt: skip


def _idle(w: World) -> bool:
    """Nothing queued, dead-lettered or in a workflow: no event can change a run any more."""
    busy = getattr(w.machines, "busy", None)
    return not any(q.depth() or q.dead for q in w.queues()) and not (callable(busy) and busy())


def _cancellable(job: Any) -> bool:
    return job is not None and job.status in (JobStatus.SCHEDULED, JobStatus.PAUSED)
