"""Dispatch: find due ticks in the due index and hand them to the execution queue, ahead of time.

Per due job, the steps and why their order loses nothing and doubles nothing:

    1. put the run row (job_id, scheduled_for) PENDING, conditionally: at most one row per firing
    2. send the run to SQS, delayed until it is due (the row exists before any worker sees it)
    3. compare-and-set the job's next_run_at from this tick to the next one (cron-anchored)

    crash before 1  -> nothing written; the next pass reads the same due entry and starts over
    crash after 1   -> the row is PENDING but unsent; the job is still due at the same tick, so
                       the next pass finds it, sees the PENDING row and sends it (no second row)
    crash after 2   -> the next pass sends it again: two messages, one row. A worker moves the row
                       PENDING -> LEASED with a compare-and-set, so the second message finds it
                       taken or finished and is dropped as a duplicate: one effect
    crash after 3   -> done; the next pass reads the next tick

Stamping before sending (the order a first sketch might take) would open a window where a
crash leaves the job advanced and the run never sent: a lost tick. Stamping last keeps the due
entry as the durable "not yet handed over" marker until SQS holds the message.

The next tick is cron_next(after=scheduled_for) of the last tick handed over, never a function of
now or of completion, so a late pass neither drifts nor skips: every tick inside the window is
handed over, oldest first, however late (bounded per pass by MAX_TICKS_PER_PASS, the rest on the
next pass, because the job stays in the index at its first unsent tick).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger

from jobsched import cron
from jobsched.adapters.dynamodb import JobStore, RunStore
from jobsched.adapters.sqs import Outgoing, RunQueue
from jobsched.domain import times
from jobsched.domain.models import RunMessage
from jobsched.domain.status import RunStatus
from jobsched.ports import Clock, CrashPoints, no_crash
from jobsched.settings import Settings

logger = Logger(child=True)

MAX_TICKS_PER_PASS = 120  # per job; a per-second cron has 90 ticks in the default look-ahead
MAX_BUCKETS_PER_PASS = 24 * 60  # a day of minute buckets: the catch-up a pass does after an outage
PAGE_SIZE = 100


@dataclass(frozen=True, slots=True)
class DueEntry:
    """What the due index holds about a job with a pending tick."""

    job_id: str
    tenant: str
    type: str
    next_run_at: datetime
    cron_expr: str | None
    timezone: str

    @classmethod
    def from_index(cls, item: dict[str, Any]) -> DueEntry:
        """Build from a due-index item (INCLUDE projection)."""
        return cls(
            job_id=item["job_id"],
            tenant=item["tenant"],
            type=item["type"],
            next_run_at=times.parse_stored(item["next_run_at"]),
            cron_expr=item.get("cron_expr"),
            timezone=item.get("timezone", "UTC"),
        )


@dataclass
class ShardReport:
    """What one shard pass did."""

    shard: int
    leased: bool = False
    buckets: int = 0
    items_read: int = 0
    jobs: int = 0
    runs_sent: int = 0


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
    max_workers: int = 8

    # -- the EventBridge tick ---------------------------------------------------------------------
    def dispatch_all(self, shards: Iterable[int] | None = None) -> DispatchReport:
        """One pass over every shard, in parallel; a shard leased by another dispatcher is skipped."""
        wanted = list(range(self.settings.shard_count) if shards is None else shards)
        report = DispatchReport()
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(wanted)))) as pool:
            report.shards.extend(pool.map(self.dispatch_shard, wanted))
        return report

    def dispatch_shard(self, shard: int) -> ShardReport:
        """Drain one shard's due entries from its watermark up to now + look-ahead, oldest first."""
        report = ShardReport(shard=shard)
        now = self.clock.now()
        # The lease runs out before the next tick, so a pass that died holding it delays its
        # shard by one tick at most; a live pass finishes well within it (one page is ~100 jobs).
        lease = self.jobs.acquire_shard(
            shard, owner=self.owner, now=now, lease_seconds=max(10, self.settings.tick_seconds - 5)
        )
        if lease is None:
            return report
        report.leased = True
        until = now + timedelta(seconds=self.settings.lookahead_seconds)
        # Always re-read the recent past too: an API request that crashed between writing a
        # due-soon job and handing it over leaves an entry behind the last window; this finds it.
        recent = times.bucket(
            now - timedelta(seconds=self.settings.lookahead_seconds + self.settings.tick_seconds)
        )
        first = min(lease.watermark, recent) if lease.watermark else recent
        buckets = times.buckets_between(first, times.bucket(until), limit=MAX_BUCKETS_PER_PASS)
        for name in buckets:
            cursor: dict[str, Any] | None = None
            while True:
                page = self.jobs.due_page(f"{name}#{shard}", until=until, cursor=cursor, limit=PAGE_SIZE)
                report.items_read += page.items_read
                entries = [DueEntry.from_index(e) for e in page.entries]
                report.jobs += len(entries)
                report.runs_sent += self.hand_over(entries, now=now, until=until)
                cursor = page.cursor
                if not cursor:
                    break
            report.buckets += 1
        # Buckets before the last one read are drained; the last is read again next pass.
        watermark = buckets[-1] if buckets else times.bucket(until)
        self.crash("dispatch.before_release")
        self.jobs.release_shard(lease, watermark=watermark)
        return report

    # -- shared with the API (a job due before the next pass can reach it) --------------------------
    def hand_over(self, entries: list[DueEntry], *, now: datetime, until: datetime) -> int:
        """Hand every tick <= until of these jobs to the queue (steps 1-3 above); returns runs sent."""
        plans: list[tuple[DueEntry, list[datetime], datetime | None]] = []
        for entry in entries:
            ticks, following = self._ticks(entry, until)
            if ticks:
                plans.append((entry, ticks, following))
        outgoing: list[Outgoing] = []
        for entry, ticks, _ in plans:  # step 1
            for tick in ticks:
                row = self.runs.put_pending(
                    job_id=entry.job_id, tenant=entry.tenant, scheduled_for=tick, now=now
                )
                status = row.execution.status if row.execution else RunStatus.PENDING
                # A row already past PENDING was sent and received before; sending it again would
                # only make a duplicate for the worker to drop.
                if status == RunStatus.PENDING:
                    outgoing.append(Outgoing(self._message(entry.job_id, tick), self._delay(tick, now)))
        self.crash("dispatch.after_put_runs")
        self.queue.send(outgoing)  # step 2
        self.crash("dispatch.after_send")
        for entry, _, following in plans:  # step 3
            self.jobs.stamp_next_tick(
                entry.job_id, expected=entry.next_run_at, next_run_at=following, now=now
            )
        self.crash("dispatch.after_stamp")
        return len(outgoing)

    def _ticks(self, entry: DueEntry, until: datetime) -> tuple[list[datetime], datetime | None]:
        """The ticks of a job to hand over now, and the tick that becomes its next pending one."""
        if entry.next_run_at > until:
            return [], entry.next_run_at
        if entry.type == "one_off" or not entry.cron_expr:
            return [entry.next_run_at], None
        schedule = cron.parse(entry.cron_expr, entry.timezone)
        ticks = [entry.next_run_at]
        ticks += schedule.ticks(entry.next_run_at, until, limit=MAX_TICKS_PER_PASS - 1)
        return ticks, schedule.next_after(ticks[-1])

    @staticmethod
    def _message(job_id: str, tick: datetime) -> RunMessage:
        return RunMessage(job_id=job_id, scheduled_for=times.stored(tick))

    @staticmethod
    def _delay(tick: datetime, now: datetime) -> int:
        # Rounded down: the message may surface up to a second early, and the worker waits out
        # the remainder, so the handler starts on the second rather than up to a second late.
        return max(0, math.floor((tick - now).total_seconds()))
