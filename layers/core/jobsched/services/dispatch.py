"""Dispatch: find due ticks in the due index and hand them to the execution queue, ahead of time.

Per due job, the steps and why their order loses nothing and doubles nothing:

    1. send its runs to SQS, each delayed until it is due
    2. compare-and-set the job's next_run_at from this tick to the next one (cron-anchored)

    crash before 1  -> nothing written; the next pass reads the same due entry and starts over
    crash after 1   -> the job is still due at the same tick, so the next pass sends it again:
                       two messages for one firing. The run row is keyed by (job_id,
                       scheduled_for) and every write to it is conditional, so the second message
                       finds the run taken or finished and is dropped as a duplicate: one effect
    crash after 2   -> done; the next pass reads the next tick

Stamping before sending (the order a first sketch might take) would open a window where a
crash leaves the job advanced and the run never sent: a lost tick. Stamping last keeps the due
entry as the durable "not yet handed over" marker until SQS holds the message.

No run row is written here for a recurring tick: the worker writes it, once, when it records the
outcome (see services/run.py), so a healthy run costs one history write rather than one per
status. (A one-off's row is written PENDING before sending, so it is visible and cancellable from
the start.) Ticks the catch-up policy drops are written SKIPPED here, with their reason, since no
worker will see them.

The next tick is cron_next(after=scheduled_for) of the last tick handed over, never a function of
now or of completion, so a late pass neither drifts nor skips: every tick inside the window is
handed over, oldest first, however late (bounded per pass by MAX_TICKS_PER_PASS, the rest on the
next pass, because the job stays in the index at its first unsent tick). A due recurring job's
ticks are handed over up to the hand-over horizon (Settings.handover_horizon_seconds), so a
frequent job's entry moves once per horizon rather than once per tick.

Fairness: a shard's pass hands over a due slice (up to FAIR_SLICE entries, consecutive pages of one
bucket) at once, its runs sent in jobsched.domain.fairness order (by priority with aging, tenants
round-robin), each message in its tenant's SQS fair-queue group (MessageGroupId on the standard
queue), so SQS delivers a quiet tenant's runs ahead of a noisy tenant's backlog. A slice changes no
step above: its stamps still follow its sends, so a crash anywhere redoes the slice.

Rate (the tenant quota max_runs_per_second): a tenant's runs of a hand-over beyond its rate go out
with a longer DelaySeconds, to the later seconds jobsched.domain.limits.rate_slots gives them, so
they are delayed and never dropped, and the cost is nothing per run: one cached quota read per
tenant with due runs (TenantQuotas, 30 s). The shards divide a tenant's rate by slots (shard i takes
every shards-th slot of a second), so side by side they start at most the rate in a second. The
spread is per hand-over (a slice of a shard's pass, or an API hand-over of a job due soon): a
tenant's runs of one second split over two slices or hand-overs may start up to twice its rate in
that second. A spread stops at SQS's 900 s delay: a burst of more than 900 s at the rate surfaces
its tail together at 900 s.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from aws_lambda_powertools import Logger

from jobsched import cron, telemetry
from jobsched.domain import times
from jobsched.domain.alerts import LateWatch
from jobsched.domain.fairness import LEAD_SECONDS, fair_order
from jobsched.domain.limits import DEFAULT_QUOTA, rate_slots
from jobsched.domain.models import RunMessage, live_runs, started_runs, takes_slot
from jobsched.domain.packs import PACK_TYPE, Pack, pack_entry_id
from jobsched.domain.records import DueEntry, Outgoing
from jobsched.domain.status import RunStatus
from jobsched.errors import JobschedError
from jobsched.ports import (
    Clock,
    CrashPoints,
    JobStore,
    Metrics,
    NoMetrics,
    PackStore,
    RunQueue,
    RunStore,
    no_crash,
)
from jobsched.services.alerts import AlertService, policy_of
from jobsched.services.late import watch_for
from jobsched.services.limits import TenantQuotas
from jobsched.settings import Settings

logger = Logger(child=True)

MAX_TICKS_PER_PASS = 120  # per job; a per-second cron has 90 ticks in the default look-ahead
MAX_MISSED_PER_PASS = 1000  # per job; catch-up policies are exact up to this many missed ticks
MAX_BUCKETS_PER_PASS = 24 * 60  # a day of minute buckets: the catch-up a pass does after an outage
PAGE_SIZE = 100
MAX_DELAY_SECONDS = 900  # SQS's cap on a message's DelaySeconds
SEND_BATCH = 10  # SQS's cap on a SendMessageBatch
# Due entries ordered together (10 pages): enough for the quiet tenant of a burst's bucket to find
# a place among the first sends, and bounded so a pass's memory and its crash redo stay small.
FAIR_SLICE = 1000
T = TypeVar("T")
FIRST_PASS_LOOKBACK_MINUTES = 60
# A paced pass stops at this share of its lease, with the rest to spare for the page in flight and
# the release, so no other dispatcher takes the shard while it still sends.
PASS_SHARE_OF_LEASE = 0.9
# "late" alerts one pass raises per job at most (a catch-up of max_catchup ticks): the worker raises
# each further run's own when it starts.
MAX_LATE_ALERTS_PER_PASS = 10


@dataclass
class Plan:
    """What one pass does with one job: ticks to run, ticks to record SKIPPED, the next pending tick;
    and ticks handed over already that go out again (`resent`: a resume's, see plan_ticks)."""

    entry: DueEntry
    run: list[datetime] = field(default_factory=list)
    skip: list[tuple[datetime, str]] = field(default_factory=list)
    following: datetime | None = None
    resent: list[datetime] = field(default_factory=list)


def jitter_offset(job_id: str, jitter_seconds: int) -> int:
    """The job's stable offset in [0, jitter_seconds]: derived from its id, the same for every tick."""
    if jitter_seconds <= 0:
        return 0
    digest = hashlib.blake2b(f"jitter:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter_seconds + 1)


def plan_ticks(
    entry: DueEntry,
    *,
    until: datetime,
    missed_before: datetime,
    queued_before: datetime | None = None,
    resend_before: datetime | None = None,
) -> Plan:
    """Decide the fate of a job's ticks from its pending one up to `until` (pure: no I/O).

    A tick earlier than `missed_before` was missed (downtime or a pause: the dispatcher hands ticks
    over ahead of time, so a healthy tick is never that late) and its fate follows the catch-up
    policy: "all" runs the newest max_catchup missed ticks oldest first, "one" coalesces them into
    the newest, "none" runs none; every other missed tick is recorded SKIPPED with the reason.
    Policies are exact for up to MAX_MISSED_PER_PASS missed ticks; an older backlog is recorded
    SKIPPED ("catchup_backlog") one pass at a time until the rest fits.

    `queued_before`: ticks not missed but earlier than this were handed over already (a resume
    re-plans a pause from its start: its later ticks still wait in the queue) and are not sent again,
    but for those earlier than `resend_before` (Plan.resent: a worker whose clock runs ahead may have
    taken them for ticks of the pause already; services/schedule.py resume). Not counted again.
    """
    plan = Plan(entry=entry)
    policy = entry.policy
    if entry.next_run_at > until:
        plan.following = entry.next_run_at
        return plan
    if entry.type == "one_off" or not entry.cron_expr:
        plan.run = [entry.next_run_at]
        return plan
    schedule = cron.parse(entry.cron_expr, entry.timezone)
    first = entry.next_run_at
    missed = [first] if first < missed_before else []
    if missed:
        later = schedule.ticks(first, missed_before, limit=MAX_MISSED_PER_PASS)
        missed += [t for t in later if t < missed_before]
    if len(missed) >= MAX_MISSED_PER_PASS:
        plan.skip = [(t, "catchup_backlog") for t in missed]
        last = missed[-1]
    else:
        keep = {"none": 0, "one": 1, "all": policy.max_catchup}[policy.catchup]
        kept = missed[max(0, len(missed) - keep) :] if keep else []
        reason = {"none": "missed", "one": "coalesced", "all": "catchup_limit"}[policy.catchup]
        plan.skip = [(t, reason) for t in missed[: len(missed) - len(kept)]]
        plan.run = list(kept)
        due = [] if missed else [first]
        due += schedule.ticks(missed[-1] if missed else first, until, limit=MAX_TICKS_PER_PASS - len(due))
        last = max([*missed, *due]) if (missed or due) else first
        plan.run += [t for t in due if queued_before is None or t >= queued_before]
        if queued_before is not None and resend_before is not None:
            plan.resent = [t for t in due if t < min(queued_before, resend_before)]
    plan.following = schedule.next_after(last)
    if queued_before is not None and plan.following < queued_before:
        plan.following = queued_before  # the ticks up to it wait in the queue already
    # Lifetime bounds: nothing after end_at, at most max_runs ticks handed over.
    if policy.end_at is not None:
        plan.run = [t for t in plan.run if t <= policy.end_at]
        plan.resent = [t for t in plan.resent if t <= policy.end_at]
        plan.skip = [(t, r) for t, r in plan.skip if t <= policy.end_at]
        if plan.following > policy.end_at:
            plan.following = None
    if policy.max_runs is not None:
        room = max(0, policy.max_runs - entry.dispatched)
        if len(plan.run) >= room:
            plan.run = plan.run[:room]
            plan.following = None
    return plan


@dataclass
class ShardReport:
    """What one shard pass did."""

    shard: int
    leased: bool = False
    buckets: int = 0
    items_read: int = 0
    jobs: int = 0
    runs_sent: int = 0
    interrupted: bool = False
    paced_out: bool = False  # the pace would have kept the pass past its lease: the rest is next pass's
    # Age of the oldest entry read that was due (next_run_at <= the pass's now): 0 when every tick
    # went out ahead of its time, as the look-ahead means it to.
    lag_ms: int = 0


@dataclass
class Pace:
    """At most `rate` items a second, a page at a time: a page may start once the pages before it
    have had their share of time (1 / rate a item), so a burst goes out at the rate, not above it.

    Hand-written rather than a rate-limiting library: it is four lines, it must run on the
    dispatcher's own monotonic clock (tests drive it), and a pass sleeps rather than retries.
    """

    rate: float
    ready_at: float = -math.inf  # when the next page may start, on the monotonic clock

    def wait(self, items: int, now: float) -> float:
        """Seconds to wait before a page of `items` goes out at `now`; books its share of time."""
        start = max(now, self.ready_at)
        self.ready_at = start + items / self.rate
        return start - now


@dataclass
class DispatchReport:
    """What one dispatcher invocation did, over every shard."""

    shards: list[ShardReport] = field(default_factory=list)

    @property
    def runs_sent(self) -> int:
        """Runs handed to the queue in this pass."""
        return sum(s.runs_sent for s in self.shards)

    @property
    def items_read(self) -> int:
        """Due-index items read in this pass."""
        return sum(s.items_read for s in self.shards)

    @property
    def lag_ms(self) -> int:
        """The dispatch lag: the oldest due entry not yet handed over, over every shard."""
        return max((s.lag_ms for s in self.shards), default=0)


@dataclass
class Dispatcher:
    """Moves due ticks from the due index into the execution queue."""

    jobs: JobStore
    runs: RunStore
    queue: RunQueue
    settings: Settings
    clock: Clock
    owner: str = field(default_factory=lambda: f"dispatcher-{uuid.uuid4().hex[:12]}")
    crash: CrashPoints = no_crash
    max_workers: int = 8  # shards drained at once by one invocation
    # SQS batches, and due-entry stamps, in flight at once within one page of a shard: a burst's
    # page of 100 jobs is 10 sends and 100 conditional writes, ~5 ms each, so sequential calls
    # would cap a shard near 150 runs/s (the boto3 connection pool is sized for it in wiring).
    io_workers: int = 16
    # Real time, for the pace only (the schedule's time is `clock`): tests substitute both.
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    alerts: AlertService | None = None
    # Per pass: dispatch lag and entries handed over (jobsched.telemetry); EMF on AWS.
    metrics: Metrics = field(default_factory=NoMetrics)
    # The tenants' quotas (max_runs_per_second); None: no rate is applied (tests of other things).
    quotas: TenantQuotas | None = None
    # Packed one-offs' definitions (jobsched.domain.packs): a pack's cursor in the due index is handed
    # over from them. None: no pack is ever written (JobService.packs is None too).
    packs: PackStore | None = None

    # -- the EventBridge tick ---------------------------------------------------------------------
    def dispatch_all(self, shards: Iterable[int] | None = None) -> DispatchReport:
        """One pass over every shard, in parallel; a shard leased by another dispatcher is skipped."""
        wanted = list(range(self.settings.shard_count) if shards is None else shards)
        report = DispatchReport()
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(wanted)))) as pool:
            report.shards.extend(pool.map(self.dispatch_shard, wanted))
        self.metrics.emit(telemetry.DISPATCH_LAG, report.lag_ms, telemetry.MILLISECONDS)
        self.metrics.emit(telemetry.HANDED_OVER, report.runs_sent, telemetry.COUNT)
        return report

    def dispatch_shard(self, shard: int) -> ShardReport:
        """Drain one shard's due entries from its watermark up to now + look-ahead, oldest first."""
        report = ShardReport(shard=shard)
        now = self.clock.now()
        # The lease runs out before the next tick, so a pass that died holding it delays its
        # shard by one tick at most; a live pass finishes well within it (one page is ~100 jobs).
        lease_seconds = max(10, self.settings.tick_seconds - 5)
        lease = self.jobs.acquire_shard(shard, owner=self.owner, now=now, lease_seconds=lease_seconds)
        if lease is None:
            return report
        report.leased = True
        pace = Pace(self.settings.dispatch_pace) if self.settings.dispatch_pace else None
        stop_at = self.monotonic() + PASS_SHARE_OF_LEASE * lease_seconds
        until = now + timedelta(seconds=self.settings.lookahead_seconds)
        # Always re-read the recent past too: an API request that crashed between writing a
        # due-soon job and handing it over leaves an entry behind the last window; this finds it.
        recent = times.bucket(
            now - timedelta(seconds=self.settings.lookahead_seconds + self.settings.tick_seconds)
        )
        # A shard's first pass ever has no watermark: it looks back FIRST_PASS_LOOKBACK, so jobs
        # written before the dispatcher first ran (or while its rule was off) are not left behind.
        first = (
            min(lease.watermark, recent)
            if lease.watermark
            else times.bucket(now - timedelta(minutes=FIRST_PASS_LOOKBACK_MINUTES))
        )
        buckets = times.buckets_between(first, times.bucket(until), limit=MAX_BUCKETS_PER_PASS)
        # Buckets before the last one read are drained; the last is read again next pass. A
        # transient AWS error stops the pass at the bucket it hit, and the watermark records that
        # bucket, so the next pass (this dispatcher's or another's) resumes there instead of
        # starting over, and the lease is given back at once rather than left to expire.
        watermark = buckets[-1] if buckets else times.bucket(until)
        try:
            for name in buckets:
                watermark = name
                cursor: dict[str, Any] | None = None
                due_slice: list[DueEntry] = []
                while not report.paced_out:
                    page = self.jobs.due_page(f"{name}#{shard}", until=until, cursor=cursor, limit=PAGE_SIZE)
                    report.items_read += page.items_read
                    entries = page.entries
                    for entry in entries:
                        if entry.next_run_at <= now:  # due, and still in the index: not handed over
                            age = round((now - entry.next_run_at).total_seconds() * 1000)
                            report.lag_ms = max(report.lag_ms, age)
                    if pace and entries:
                        wait = pace.wait(len(entries), self.monotonic())
                        if self.monotonic() + wait > stop_at:
                            # The page stays in the index; the next pass starts at this bucket.
                            report.paced_out = True
                            break
                        if wait > 0:
                            self.sleep(wait)
                    due_slice += entries
                    cursor = page.cursor
                    if not cursor or not self.settings.fair_dispatch or len(due_slice) >= FAIR_SLICE:
                        report.jobs += len(due_slice)
                        report.runs_sent += self.hand_over(due_slice, now=now, until=until)
                        due_slice = []
                    if not cursor:
                        break
                if due_slice:  # paced out with pages read within the pace: they go out too
                    report.jobs += len(due_slice)
                    report.runs_sent += self.hand_over(due_slice, now=now, until=until)
                    due_slice = []
                if report.paced_out:
                    break
                report.buckets += 1
        except JobschedError as exc:
            report.interrupted = True
            logger.warning(
                "dispatch pass interrupted", extra={"shard": shard, "bucket": watermark, "error": repr(exc)}
            )
        self.crash("dispatch.before_release")
        try:
            self.jobs.release_shard(lease, watermark=watermark)
        except JobschedError:
            report.interrupted = True  # the lease expires before the next tick; the watermark stays older
        return report

    # -- shared with the API (a job due before the next pass can reach it) --------------------------
    def hand_over(
        self,
        entries: list[DueEntry],
        *,
        now: datetime,
        until: datetime,
        missed_before: datetime | None = None,
        queued_before: datetime | None = None,
        resend_before: datetime | None = None,
    ) -> int:
        """Hand every tick <= until of these jobs to the queue (steps 1-3 above); returns runs sent.

        A tick before `missed_before` was missed (default: later than a healthy pass could leave
        it; a resume passes "now": every tick of the pause was missed).
        """
        packs = [e for e in entries if e.type == PACK_TYPE]
        if packs:
            entries = [e for e in entries if e.type != PACK_TYPE]
            sent = sum(self._hand_over_cursor(e, now=now) for e in packs)
            return sent + self.hand_over(
                entries,
                now=now,
                until=until,
                missed_before=missed_before,
                queued_before=queued_before,
                resend_before=resend_before,
            )
        if not entries:
            return 0
        if missed_before is None:
            missed_before = now - timedelta(
                seconds=self.settings.lookahead_seconds + self.settings.tick_seconds
            )
        plans = [
            plan_ticks(
                e,
                until=self._horizon(e, now=now, until=until),
                missed_before=missed_before,
                queued_before=queued_before,
                resend_before=resend_before,
            )
            for e in entries
        ]
        plans = [p for p in plans if p.run or p.skip or p.resent or p.following != p.entry.next_run_at]
        outgoing: list[tuple[RunMessage | LateWatch, datetime, DueEntry]] = []  # when each fires, whose it is
        for plan in plans:
            entry = plan.entry
            started, lapsed = self._started_runs(entry.job_id, now=now) if plan.skip else (set(), set())
            for tick, reason in plan.skip:
                sf = times.stored(tick)
                if sf in lapsed:
                    # Its holder is gone, and its message may be too (a twin receive acknowledged it
                    # as a tick of the pause: tests/sim seed 9173): a copy settles it, as _revive does.
                    outgoing.append(_send(entry, tick))
                if sf in started:
                    continue  # it may have run: its redelivery records it (see _started_runs)
                self.runs.put_pending(
                    job_id=entry.job_id, tenant=entry.tenant, scheduled_for=tick, now=now, skipped=reason
                )
            self._alert(plan, now=now)
            for tick in plan.run:
                if entry.type != "recurring":
                    # A one-off's single run is its whole life: its row is written now, so it is
                    # seen PENDING (and cancelled with its job) before it runs. A recurring job's
                    # ticks get their row from the worker, in one write (see the module docstring).
                    row = self.runs.put_pending(
                        job_id=entry.job_id, tenant=entry.tenant, scheduled_for=tick, now=now
                    )
                    if row.row and row.row.status != RunStatus.PENDING:
                        continue  # sent and received before; a second message would be a duplicate
                outgoing.append(_send(entry, tick))
                if self.alerts is not None and (watch := watch_for(entry, tick, now=now)) is not None:
                    outgoing.append((*watch, entry))  # only for a job alerting on "late": services/late.py
            for tick in plan.resent:  # a copy: its first hand-over counted it, and sent its late watch
                outgoing.append(_send(entry, tick))
        # step 1: all or error; a page whose send failed stamps nothing
        outgoing = self._send_all(outgoing)
        self._each(  # step 2
            lambda plan: self.jobs.stamp_next_tick(
                plan.entry.job_id,
                expected=plan.entry.next_run_at,
                next_run_at=plan.following,
                now=now,
                dispatched=len(plan.run),
            ),
            plans,
        )
        self.crash("dispatch.after_stamp")
        return sum(isinstance(message, RunMessage) for message, _, _ in outgoing)

    def _hand_over_cursor(self, entry: DueEntry, *, now: datetime) -> int:
        """A pack's cursor found due: its pack read (one read per window of the horizon), then handed
        over from the cursor as the index showed it."""
        if self.packs is None:  # a composition without packs never writes one: a miswired process
            logger.error(
                "a pack's cursor is due and this dispatcher has no pack store", extra={"pack": entry.job_id}
            )
            return 0
        pack = self.packs.get_pack(entry.job_id.removeprefix("pack_"))
        if pack is None:  # the definitions are written before the cursor: never so but in a broken table
            logger.warning("a pack's cursor without its pack", extra={"pack": entry.job_id})
            return 0
        return self.hand_over_pack(pack, now=now, cursor=entry.next_run_at)

    def hand_over_pack(self, pack: Pack, *, now: datetime, cursor: datetime | None = None) -> int:
        """Send a pack's jobs due from `cursor` (its next hand-over; None: the pack's first run_at, as
        a create's own hand-over finds it) up to the horizon, then move the cursor past them: the same
        send-then-stamp order as a job's (module docstring), so a crash between sends them again, and
        a second message meets the first one's run row (a packed start is a put-if-absent: one run).

        A create hands over what is due within the look-ahead (what the next pass may be too late for);
        a pass, what is due within the hand-over horizon (as a recurring job's ticks), so a pack whose
        jobs spread over hours moves its cursor once per horizon window that holds one of them."""
        lookahead = timedelta(seconds=self.settings.lookahead_seconds)
        at = pack.first_due() if cursor is None else cursor
        room = max(self.settings.handover_horizon_seconds, self.settings.lookahead_seconds)
        horizon = now + (lookahead if cursor is None else timedelta(seconds=min(room, MAX_DELAY_SECONDS)))
        due = sorted(
            (d for d in pack.definitions if at <= d.run_at <= horizon), key=lambda d: (d.run_at, d.job_id)
        )
        if not due:
            return 0
        entry = DueEntry(
            job_id=pack_entry_id(pack.pack_id),
            tenant=pack.tenant,
            type=PACK_TYPE,
            next_run_at=at,
            cron_expr=None,
            timezone="UTC",
        )
        outgoing: list[tuple[RunMessage | LateWatch, datetime, DueEntry]] = [
            (
                RunMessage(
                    job_id=d.job_id,
                    scheduled_for=times.stored(d.run_at),
                    guard=True,
                    packed=d.compact(),
                ),
                d.run_at,
                entry,
            )
            for d in due
        ]
        outgoing = self._send_all(outgoing)
        assert self.packs is not None
        self.packs.move_cursor(pack.pack_id, expected=at, next_run_at=pack.due_after(horizon), now=now)
        self.crash("dispatch.after_stamp")
        return len(outgoing)

    def _send_all(
        self, outgoing: list[tuple[RunMessage | LateWatch, datetime, DueEntry]]
    ) -> list[tuple[RunMessage | LateWatch, datetime, DueEntry]]:
        """Queue a hand-over's messages (all or error): in fair order, each within its tenant's rate,
        10 to a SendMessageBatch; answers them as sent."""
        if self.settings.fair_dispatch:
            outgoing = fair_order(
                outgoing,
                tenant=lambda o: o[2].tenant,
                priority=lambda o: o[2].policy.priority,
                due=lambda o: o[1],
            )
        outgoing = self._within_rates(outgoing)
        self.crash("dispatch.before_send")
        self._each(self._send, [outgoing[i : i + SEND_BATCH] for i in range(0, len(outgoing), SEND_BATCH)])
        self.crash("dispatch.after_send")
        return outgoing

    def _within_rates(
        self, outgoing: list[tuple[RunMessage | LateWatch, datetime, DueEntry]]
    ) -> list[tuple[RunMessage | LateWatch, datetime, DueEntry]]:
        """Each run moved to the second its tenant's max_runs_per_second gives it (module docstring:
        Rate); order kept. A run's scheduled_for stays its tick: only its message surfaces later."""
        if self.quotas is None:
            return outgoing
        shards = self.settings.shard_count
        groups: dict[tuple[str, int], list[int]] = {}
        for i, (message, _, entry) in enumerate(outgoing):
            if isinstance(message, RunMessage):
                groups.setdefault((entry.tenant, times.shard_of(entry.job_id, shards)), []).append(i)
        out = list(outgoing)
        for (tenant, shard), indexes in groups.items():
            quota = self.quotas.set_for(tenant)
            cap = 0 if quota is None else quota.max_concurrent_runs  # carried: see RunMessage.cap
            for i in indexes:
                message, fire_at, entry = out[i]
                assert isinstance(message, RunMessage)
                out[i] = (message.model_copy(update={"cap": cap}), fire_at, entry)
            rate = (quota or DEFAULT_QUOTA).max_runs_per_second
            if len(indexes) <= rate // shards:
                continue  # within this shard's share of any one second, whatever their seconds
            seconds = [math.floor(outgoing[i][1].timestamp()) for i in indexes]
            slots = rate_slots(seconds, rate=rate, shard=shard, shards=shards)
            for i, second, slot in zip(indexes, seconds, slots, strict=True):
                if slot != second:
                    message, fire_at, entry = out[i]
                    out[i] = (message, fire_at + timedelta(seconds=slot - second), entry)
        return out

    def _started_runs(self, job_id: str, *, now: datetime) -> tuple[set[str], set[str]]:
        """The ticks with a start marker on the job (jobsched.domain.models.started_runs), which a
        catch-up must not record SKIPPED. A skipped tick is normally one never handed over, but a
        resume re-plans its pause from the first tick, handed over already (and so does the next
        pass, when the resume's hand-over failed): a worker whose clock ran ahead took one for due
        before the pause was written and died after its handler, and the resume's "coalesced" row
        met its redelivery as a finished run (tests/sim seed 110). Left without a row, the tick is
        the redelivery's: it finds its lapsed marker and runs the tick again or records it. One
        consistent read of the job per plan with skipped ticks (a catch-up: rare).

        And those of them whose every marker has lapsed (no live holder): their message may be gone
        as well, acknowledged by a twin receive that stopped at the pause, so the pass sends a copy."""
        job = self.jobs.get_job(job_id)
        if job is None:
            return set(), set()
        started = started_runs(job)
        return started, started - live_runs(job, now)

    def _alert(self, plan: Plan, *, now: datetime) -> None:
        """Raise the plan's missed, skipped and late alerts (a job the pass drops ticks of, or hands
        over ticks already overdue: both rare, so only then is the job itself read for its policy).

        Raised before the send: the skipped rows are written, and a pass that dies after this redoes
        the same plan from the same due entry, so the same alert ids are refused the second time.
        """
        overdue = now - timedelta(seconds=self.settings.tick_seconds)
        late = [t for t in plan.run if t < overdue]
        if self.alerts is None or not (plan.skip or late):
            return
        job = self.alerts.for_job_id(plan.entry.job_id)
        if job is None:
            return
        if plan.skip:
            # One alert per kind for the pass's dropped ticks, about the oldest of them: the due
            # entry's own tick, so a pass redone after a crash (later, dropping more) has its id.
            (first, _), (last, reason) = plan.skip[0], plan.skip[-1]
            detail = (
                f"{len(plan.skip)} tick(s) from {times.iso(first)} to {times.iso(last)} dropped ({reason})"
            )
            self.alerts.raise_alert(job, "missed", scheduled_for=first, detail=detail)
            self.alerts.raise_alert(job, "skipped", scheduled_for=first, detail=detail)
        after = policy_of(job).late_after_seconds
        if after is None:
            return
        for tick in [t for t in late if (now - t).total_seconds() > after][:MAX_LATE_ALERTS_PER_PASS]:
            self.alerts.raise_alert(
                job,
                "late",
                scheduled_for=tick,
                detail=f"not started {(now - tick).total_seconds():.0f} s after its tick: handed over late",
            )

    def _send(self, batch: Sequence[tuple[RunMessage | LateWatch, datetime, DueEntry]]) -> None:
        # Each delay is taken from the clock as the batch goes out, not from the start of the pass:
        # a message sent late in a long pass would otherwise surface that much after its second.
        now = self.clock.now()
        fair = self.settings.fair_dispatch
        self.queue.send(
            [
                Outgoing(
                    message,
                    min(
                        MAX_DELAY_SECONDS,
                        max(
                            0,
                            self._delay(fire_at, now)
                            - (LEAD_SECONDS.get(entry.policy.priority, 0) if fair else 0),
                        ),
                    ),
                    group=entry.tenant if fair else None,
                    lane=entry.lane,  # its job's worker queue: the Lambda worker's or the ECS worker's
                )
                for message, fire_at, entry in batch
            ]
        )

    def _each(self, call: Callable[[T], object], items: Sequence[T]) -> None:
        """Call `call` on every item, up to io_workers at once; the first error is raised after all end."""
        if self.io_workers <= 1 or len(items) <= 1:
            for item in items:
                call(item)
            return
        with ThreadPoolExecutor(max_workers=min(self.io_workers, len(items))) as pool:
            for future in [pool.submit(call, item) for item in items]:
                future.result()

    def _horizon(self, entry: DueEntry, *, now: datetime, until: datetime) -> datetime:
        """How far ahead this entry's ticks go out: a recurring job's up to the hand-over horizon."""
        horizon = self.settings.handover_horizon_seconds
        if entry.type != "recurring" or horizon <= 0:
            return until
        # A message's delay (tick + jitter - now) must stay within SQS's 900 s.
        room = MAX_DELAY_SECONDS - jitter_offset(entry.job_id, entry.policy.jitter_seconds)
        return max(until, now + timedelta(seconds=min(horizon, room)))

    @staticmethod
    def _delay(tick: datetime, now: datetime) -> int:
        # Rounded down: the message may surface up to a second early, and the worker waits out
        # the remainder, so the handler starts on the second rather than up to a second late.
        return max(0, math.floor((tick - now).total_seconds()))


def _send(entry: DueEntry, tick: datetime) -> tuple[RunMessage, datetime, DueEntry]:
    """A tick's run message, the second it fires (the tick, jittered) and its job's entry: every send
    of a hand-over (a tick run, a copy of one resent, a lapsed marker's copy) is this."""
    guard = takes_slot(entry.type, entry.policy.overlap_policy)
    message = RunMessage(job_id=entry.job_id, scheduled_for=times.stored(tick), guard=guard)
    return message, tick + timedelta(seconds=jitter_offset(entry.job_id, entry.policy.jitter_seconds)), entry
