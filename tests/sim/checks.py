"""What the simulator observes while a schedule runs, and the invariants it checks after.

Ported from tests/chaos/harness.py `check()`, on simulated (true) time rather than the rows'
skewed clocks, plus the effect ledger keyed by effect_key. A violation names its job; the CLI
prints the seed and that job's trace.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobsched import cron
from jobsched.domain import times
from jobsched.domain.ecs_tasks import TASK_LOST
from jobsched.domain.models import Execution, Job, RunMessage
from jobsched.domain.packs import parse_packed
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.handlers import RunContext
from jobsched.services.failures import LEASE_EXPIRED

if TYPE_CHECKING:
    from tests.sim.workload import Accepted
    from tests.sim.world import World

NOT_FINAL = {RunStatus.PENDING, RunStatus.LEASED, RunStatus.RUNNING, RunStatus.FAILED}
CATCHUP_REASONS = {"coalesced", "missed", "catchup_limit", "catchup_backlog"}


@dataclass
class Call:
    job_id: str
    sf: str
    attempt: int
    start: float
    end: float | None = None
    ok: bool = False
    # The order of the start and the end among all the handler calls' starts and ends: at one
    # (simulated) instant, which came first (a batch's handlers run one after another in no time).
    started: int = 0
    ended: int | None = None


@dataclass
class Ledger:
    """Every handler call (true time), effects by effect_key, cancels answered 200, traces."""

    calls: list[Call] = field(default_factory=list)
    succeeded: Counter[str] = field(default_factory=Counter)  # handler successes per effect_key
    cancelled_at: dict[str, float] = field(default_factory=dict)  # job -> when a cancel answered 200
    # (job, sf) -> when a run cancel (POST /api/runs/{id}/cancel) first answered CANCELLED
    run_cancelled_at: dict[tuple[str, str], float] = field(default_factory=dict)
    run_cancel_asked: set[tuple[str, str]] = field(default_factory=set)  # (job, sf): 2xx, 5xx, the API died
    stalled: set[tuple[str, str]] = field(default_factory=set)  # (job, sf) whose handler skipped beats
    unbuffered: list[str] = field(default_factory=list)
    traces: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    notes: list[str] = field(default_factory=list)
    _hash: Any = field(default_factory=hashlib.sha256)
    _events: int = 0

    def start(self, ctx: RunContext, now: float, sf: str) -> int:
        self.calls.append(Call(ctx.job_id, sf, ctx.attempt, now, started=self._order()))
        self.trace(ctx.job_id, f"{now:8.2f} {sf[11:23]:<12} handler starts attempt {ctx.attempt}")
        return len(self.calls) - 1

    def end(self, key: int, now: float, *, ok: bool, effect_key: str) -> None:
        call = self.calls[key]
        call.end, call.ok, call.ended = now, ok, self._order()
        if ok:
            self.succeeded[effect_key] += 1
        self.trace(call.job_id, f"{now:8.2f} {call.sf[11:23]:<12} handler ends {'ok' if ok else 'failed'}")

    def _order(self) -> int:
        self._events += 1
        return self._events

    def trace(self, job_id: str, line: str) -> None:
        self.traces[job_id].append(line)
        self._hash.update(f"{job_id} {line}\n".encode())

    def note(self, line: str) -> None:
        self.notes.append(line)
        self._hash.update(f"note {line}\n".encode())

    def digest(self) -> str:
        return self._hash.copy().hexdigest()

    def observe_skip(self, world: World, body: RunMessage) -> None:
        """buffer_one buffers: a tick is SKIPPED for overlap only while another tick waits in the slot."""
        job = world.jobs.get_job(body.job_id)
        if job is None or job.policy.overlap_policy != "buffer_one":
            return
        row = world.runs.get(body.job_id, body.scheduled_for)
        if row is None or row.reason != "overlap":
            return
        now = world.loop.instant()
        waiting = job.buffered_run not in (None, body.scheduled_for)
        if not waiting or job.buffered_until is None or job.buffered_until < now - timedelta(seconds=4):
            self.unbuffered.append(
                f"{body.job_id}: tick {body.scheduled_for} SKIPPED with no other tick waiting (buffer_one)"
            )


def _ticks(expr: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """Ticks t with start <= t < end."""
    schedule = cron.parse(expr, tz)
    out = []
    t = schedule.next_after(start - timedelta(milliseconds=1))
    if t < start:  # within the millisecond before `start` (a job created 0.2 ms after a tick: seed 9402)
        t = schedule.next_after(t)
    while t < end:
        out.append(t)
        t = schedule.next_after(t)
    return out


def job_view(world: World, job_id: str) -> Job | None:
    """The job as the store holds it, fault-free: its item, or, for a packed one-off not copied out
    (jobsched.domain.packs), the view its definition and its run row make (what the API lists)."""
    job = world.jobs.get_job(job_id)
    parsed = parse_packed(job_id)
    if job is not None or parsed is None:
        return job
    pack = world.jobs.packs.get(parsed[0])
    definition = pack.definition(job_id) if pack is not None else None
    if definition is None:
        return None
    return definition.job(row=world.runs.get(job_id, times.stored(definition.run_at)))


def check(world: World, accepted: dict[str, Accepted], *, load_end: datetime) -> list[str]:
    """The invariants, as a list of violations "<job_id>: what" (empty: all hold)."""
    bad: list[str] = []
    calls: dict[tuple[str, str], list[Call]] = defaultdict(list)
    for c in world.ledger.calls:
        calls[(c.job_id, c.sf)].append(c)
    t0 = world.loop.start
    for job_id, acc in accepted.items():
        request = acc.request
        job = job_view(world, job_id)
        if job is None:
            bad.append(f"{job_id}: accepted, then vanished")
            continue
        runs = world.runs.since(job_id, after=t0 - timedelta(days=3650))
        by_sf = {times.stored(r.scheduled_for): r for r in runs}
        for r in runs:
            sf = times.stored(r.scheduled_for)
            invoked = calls.get((job_id, sf), [])
            if r.status == RunStatus.SUCCEEDED and not any(c.ok for c in invoked):
                bad.append(f"{job_id}: run {sf} SUCCEEDED without its handler succeeding")
            if r.status in NOT_FINAL:
                bad.append(f"{job_id}: run {sf} stuck {r.status.value}")
            # (A failed attempt then a cancelled or skipped retry is truthful: the attempt is in the
            # run's history. A success is an effect: a run that had one must not say it never ran,
            # unless its history says that attempt's fate is unknown: a task lost with no exit code,
            # whose handler may have run, is recorded as TaskLost, and its retry may be cancelled.)
            if r.status in (RunStatus.CANCELLED, RunStatus.SKIPPED) and any(
                c.ok and not _lost(r, c.attempt) for c in invoked
            ):
                bad.append(f"{job_id}: run {sf} is {r.status.value} but its handler succeeded")
            attempts = {c.attempt for c in invoked}
            limit = request.max_attempts * (1 + r.replays)
            if len(attempts) > limit or any(a > request.max_attempts for a in attempts):
                bad.append(
                    f"{job_id}: run {sf} ran attempts {sorted(attempts)}"
                    f" > max_attempts {request.max_attempts}"
                )
            if not request.idempotent and sum(1 for c in invoked if c.ok) > 1 + r.replays:
                bad.append(f"{job_id}: run {sf} of a non-idempotent job succeeded twice")
        # The history never lies: a handler that succeeded left a row that says it ran.
        for (j, sf), cs in calls.items():
            if j == job_id and any(c.ok for c in cs) and sf not in by_sf:
                bad.append(f"{job_id}: run {sf} executed and has no row")
        # A cancel answered 200: no handler of the job ran after it, or was running then.
        cancelled = world.ledger.cancelled_at.get(job_id)
        if cancelled is not None:
            for c in world.ledger.calls:
                if c.job_id != job_id:
                    continue
                if c.start > cancelled:
                    bad.append(
                        f"{job_id}: run {c.sf} started at {c.start:.2f}"
                        f" after a cancel answered 200 at {cancelled:.2f}"
                    )
                elif (c.end is None or c.end > cancelled) and (job_id, c.sf) not in world.ledger.stalled:
                    # (A stalled handler, the lost-lease fault, is exempt: its leases and start marker
                    # lapsed, so the fleet rightly took its worker for dead, as it does for overlap.)
                    bad.append(f"{job_id}: a cancel answered 200 at {cancelled:.2f} while run {c.sf} ran")
        bad.extend(_check_run_cancels(world, job_id, by_sf, calls))
        if request.type == "recurring":
            bad.extend(_check_recurring(world, acc, by_sf, calls, load_end=load_end))
        elif request.type == "one_off":
            scheduled = [r for r in runs if r.kind == "scheduled"]
            # (A one-off left PAUSED, its resume refused by a fault and not tried again, waits for one:
            # the client paused it. Only batches' one-offs are paused: seed 1051.)
            if not scheduled and job.status.value not in ("CANCELLED", "PAUSED"):
                bad.append(f"{job_id}: one-off never ran")
            for r in scheduled:
                if r.status not in (
                    RunStatus.SUCCEEDED,
                    RunStatus.DEAD_LETTER,
                    RunStatus.CANCELLED,
                    RunStatus.LOST,
                ):
                    bad.append(f"{job_id}: one-off ended {r.status.value}")
                elif job.status in (JobStatus.SCHEDULED, JobStatus.PAUSED) and r.status in (
                    RunStatus.SUCCEEDED,
                    RunStatus.DEAD_LETTER,
                ):
                    # Its run ended: the job says so (COMPLETED, FAILED by its dead letter), never
                    # that its run is still to come (a worker killed between the run's record and
                    # the job's COMPLETED write left it SCHEDULED: tests/e2e/test_restart.py), nor
                    # PAUSED (a one-off paused after its tick was due: its run went on; seed 352).
                    # (A run cancel ends the run, not the job: docs/api.md.)
                    bad.append(
                        f"{job_id}: one-off still {job.status.value} after its run ended {r.status.value}"
                    )
        else:
            bad.extend(_check_dependant(world, job_id, job.depends_on, runs, calls))
    bad.extend(_check_keys(world, accepted, calls))
    bad.extend(world.ledger.unbuffered)
    return bad


def _lost(run: Execution, attempt: int) -> bool:
    """Whether the run's history says `attempt`'s fate is unknown: recorded TaskLost (its task stopped
    with no exit code), or followed by a LeaseExpired record (a takeover found its worker dead, with
    no attempt left to run again)."""
    return any(
        a.error
        and (
            (a.attempt == attempt and a.error.type == TASK_LOST)
            or (a.attempt > attempt and a.error.type == LEASE_EXPIRED)
        )
        for a in run.attempts
    )


def _check_keys(
    world: World, accepted: dict[str, Accepted], calls: dict[tuple[str, str], list[Call]]
) -> list[str]:
    """A concurrency key: at no (true) time do more than its limit of handlers of runs of the jobs
    naming it run at once, but where a handler stalled past its lease (the lost-lease fault: its
    key slot lapsed with its heartbeat, and the fleet rightly took its worker for dead)."""
    bad: list[str] = []
    by_key: dict[str, list[Call]] = defaultdict(list)
    limits: dict[str, int] = {}
    for job_id, acc in accepted.items():
        concurrency = acc.request.concurrency
        if concurrency is None:
            continue
        limits[concurrency.key] = min(limits.get(concurrency.key, concurrency.limit), concurrency.limit)
        for (j, sf), cs in calls.items():
            if j == job_id and (j, sf) not in world.ledger.stalled:
                by_key[concurrency.key].extend(cs)
    for key, spans in by_key.items():
        # Starts and ends in the order they happened (at one instant too); a call not ended runs on.
        events = sorted(
            [(c.start, c.started, 1, i) for i, c in enumerate(spans)]
            + [(c.end, c.ended, 0, i) for i, c in enumerate(spans) if c.end is not None and c.ended]
        )
        running: set[int] = set()
        for at, _, starts, i in events:
            if not starts:
                running.discard(i)
                continue
            running.add(i)
            if len(running) > limits[key]:
                c = spans[i]
                others = ", ".join(f"{spans[o].job_id} {spans[o].sf}" for o in sorted(running) if o != i)
                bad.append(
                    f"{c.job_id}: run {c.sf} started at {at:.2f} while {len(running) - 1} runs of"
                    f" concurrency key {key!r} (limit {limits[key]}) ran: {others}"
                )
                break  # one violation per key: the first time it was passed
    return bad


def _check_run_cancels(
    world: World, job_id: str, by_sf: dict[str, Any], calls: dict[tuple[str, str], list[Call]]
) -> list[str]:
    """A run cancel answered CANCELLED: the run's handler never starts after it, none was running
    then (but a stalled one, as for a job's cancel), and a handler call that started before it is in
    the row's history if the row says CANCELLED (a failed attempt then a cancelled retry is truthful;
    an attempt that ran unrecorded, written over with CANCELLED, is not)."""
    bad: list[str] = []
    for (j, sf), answered in world.ledger.run_cancelled_at.items():
        if j != job_id:
            continue
        row = by_sf.get(sf)
        recorded = {a.attempt for a in row.attempts} if row is not None else set()
        for c in calls.get((j, sf), []):
            if c.start > answered:
                bad.append(
                    f"{job_id}: run {sf} started at {c.start:.2f}"
                    f" after a run cancel answered CANCELLED at {answered:.2f}"
                )
            elif (c.end is None or c.end > answered) and (j, sf) not in world.ledger.stalled:
                bad.append(f"{job_id}: a run cancel answered CANCELLED at {answered:.2f} while run {sf} ran")
            elif (
                row is not None
                and row.status == RunStatus.CANCELLED
                and c.attempt not in recorded
                # A stalled attempt (the lost-lease fault) is taken over, its record refused: the row
                # counts it (a later attempt ran) though it holds no end of it (tests/sim seed 3827).
                and not ((j, sf) in world.ledger.stalled and row.attempt >= c.attempt)
                # So is a failed attempt whose worker died before recording it (seed 1827): a takeover
                # counted it; it had no effect that CANCELLED could hide (a success is checked above).
                and not (not c.ok and row.attempt > c.attempt)
            ):
                bad.append(
                    f"{job_id}: run {sf} is CANCELLED (a run cancel at {answered:.2f})"
                    f" but its attempt {c.attempt} ran unrecorded"
                )
    return bad


def _check_recurring(
    world: World,
    acc: Accepted,
    by_sf: dict[str, Any],
    calls: dict[tuple[str, str], list[Call]],
    *,
    load_end: datetime,
) -> list[str]:
    bad: list[str] = []
    job_id = acc.job_id
    policy = acc.overlap_policy
    reasons = set(CATCHUP_REASONS) | {"rescheduled", "deadline"}
    if policy != "allow":
        reasons.add("overlap")
    for sf, r in by_sf.items():
        if r.status == RunStatus.SKIPPED and r.reason not in reasons:
            bad.append(f"{job_id}: tick {sf} SKIPPED {r.reason!r} under overlap policy {policy}")
    # Every due tick ran, or is recorded with its policy's reason: tick by tick, over each stretch
    # of the job's schedule (an edit starts a new stretch; a tick during a pause has a row too).
    for expr, tz, start, end in acc.stretches(until=load_end):
        for tick in _ticks(expr, tz, start, end):
            if acc.in_pause(tick) and not acc.resumed_after(tick):
                continue  # the job stayed paused: the ticks of a pause wait for a resume
            r = by_sf.get(times.stored(tick))
            cancel = acc.cancelled_at
            if r is None:
                if cancel is not None and tick >= cancel - timedelta(
                    seconds=world.settings.lookahead_seconds + 60
                ):
                    continue  # handed over around the cancel: the cancel may win before a row exists
                bad.append(f"{job_id}: tick {times.stored(tick)} was due and is missing")
            elif (
                r.status == RunStatus.CANCELLED
                and (cancel is None or tick > cancel + timedelta(seconds=5))
                and (job_id, times.stored(tick)) not in world.ledger.run_cancel_asked
            ):
                bad.append(f"{job_id}: tick {times.stored(tick)} is CANCELLED but no cancel came before it")
    if policy == "allow":
        return bad
    # skip and buffer_one: no two ticks' handlers ran at the same (true) time, but where a handler
    # stalled past its lease (the lost-lease fault: the others rightly took it for dead).
    spans = sorted(
        (c.start, c.end if c.end is not None else float("inf"), c.sf)
        for (j, sf), cs in calls.items()
        if j == job_id and by_sf.get(sf) is not None and by_sf[sf].kind != "backfill"
        for c in cs
    )
    for (_, e_a, sf_a), (s_b, _, sf_b) in itertools.pairwise(spans):
        stalled = (job_id, sf_a) in world.ledger.stalled or (job_id, sf_b) in world.ledger.stalled
        if sf_a != sf_b and s_b < e_a and not stalled:
            bad.append(f"{job_id}: runs {sf_a} and {sf_b} overlapped under overlap policy {policy}")
    return bad


def _check_dependant(
    world: World,
    job_id: str,
    depends_on: tuple[str, ...],
    runs: list[Any],
    calls: dict[tuple[str, str], list[Call]],
) -> list[str]:
    bad: list[str] = []
    ups = [world.runs.recent(u, limit=1) for u in depends_on]
    all_ok = all(u and u[0].status == RunStatus.SUCCEEDED for u in ups)
    status = runs[-1].status if runs else None
    # (A run cancel asked of its run: it may end CANCELLED, or LOST if it may have run.)
    asked = bool(runs) and (job_id, times.stored(runs[-1].scheduled_for)) in world.ledger.run_cancel_asked
    if (
        all_ok
        and status != RunStatus.SUCCEEDED
        and not (asked and status in (RunStatus.CANCELLED, RunStatus.LOST))
    ):
        bad.append(
            f"{job_id}: upstreams succeeded, dependant is {status.value if status else 'without a run'}"
        )
    if not all_ok and status == RunStatus.SUCCEEDED:
        bad.append(f"{job_id}: dependant fired although an upstream did not succeed")
    mine = [c for (j, _), cs in calls.items() if j == job_id for c in cs]
    if len({c.sf for c in mine}) > 1:
        bad.append(f"{job_id}: dependant ran for more than one period")
    first = min((c.start for c in mine), default=None)
    for u in depends_on:
        ok_ends = [c.end for (j, _), cs in calls.items() if j == u for c in cs if c.ok and c.end is not None]
        if first is not None and (not ok_ends or min(ok_ends) > first):
            bad.append(f"{job_id}: dependant ran before upstream {u} succeeded")
    return bad
