"""Tenant quotas at request time: max jobs, the shortest cron interval, a day's backfill ticks.

The quota is read through a per-process cache with a short TTL (QUOTA_CACHE_SECONDS): a warm API
Lambda reads a tenant's quota item at most once per TTL, so a create costs no extra read most of the
time, and an operator's change applies everywhere within the TTL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobsched import cron
from jobsched.domain.limits import DEFAULT_QUOTA, Quota, QuotaExceeded
from jobsched.domain.status import JobStatus
from jobsched.ports import Clock, LimitStore, QuotaStore

QUOTA_CACHE_SECONDS = 30
# The jobs that count toward max_jobs: those not finished (a finished job holds no schedule).
LIVE_STATUSES = (JobStatus.SCHEDULED, JobStatus.PAUSED)


@dataclass
class TenantQuotas:
    """The tenants' quotas (cached) and the request-time checks against them."""

    store: QuotaStore | None
    limits: LimitStore
    clock: Clock
    ttl_seconds: float = QUOTA_CACHE_SECONDS
    _cache: dict[str, tuple[datetime, Quota | None]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def of(self, tenant: str) -> Quota:
        """The tenant's quota (DEFAULT_QUOTA when none is set), at most ttl_seconds old."""
        return self.set_for(tenant) or DEFAULT_QUOTA

    def set_for(self, tenant: str) -> Quota | None:
        """The quota an operator set for the tenant (None: none, the defaults apply), at most
        ttl_seconds old: "none set" is cached as well, so a tenant without one costs no read either."""
        now = self.clock.now()
        with self._lock:
            cached = self._cache.get(tenant)
        if cached is not None and cached[0] > now:
            return cached[1]
        quota = self.store.get_quota(tenant) if self.store is not None else None
        with self._lock:
            self._cache[tenant] = (now + timedelta(seconds=self.ttl_seconds), quota)
        return quota

    def check_jobs(self, tenant: str, count: Callable[[int], int]) -> None:
        """429 max_jobs when the tenant holds max_jobs live jobs already; `count(stop_at)` counts
        them (it may stop counting at stop_at: only whether the quota is reached matters)."""
        limit = self.of(tenant).max_jobs
        if count(limit) >= limit:
            raise QuotaExceeded(
                "max_jobs", limit, f"quota max_jobs: the tenant holds {limit} unfinished jobs already"
            )

    def check_cron_interval(self, tenant: str, schedule: cron.CronSchedule) -> None:
        """429 min_cron_interval_seconds when the schedule fires more often than the quota allows."""
        limit = self.of(tenant).min_cron_interval_seconds
        interval = schedule.min_interval_seconds()
        if interval < limit:
            raise QuotaExceeded(
                "min_cron_interval_seconds",
                limit,
                f"quota min_cron_interval_seconds: the schedule fires every {interval} s, "
                f"the tenant's shortest interval is {limit} s",
            )

    def take_backfill(self, tenant: str, ticks: int) -> None:
        """Count a backfill's ticks into the tenant's day (UTC); 429 backfill_ticks_per_day past it."""
        limit = self.of(tenant).backfill_ticks_per_day
        if ticks == 0:
            return
        day = self.clock.now().strftime("%Y-%m-%d")
        if not self.limits.take_budget(tenant, "backfill_ticks", day=day, amount=ticks, limit=limit):
            raise QuotaExceeded(
                "backfill_ticks_per_day",
                limit,
                f"quota backfill_ticks_per_day: {ticks} more ticks would pass the tenant's {limit} for {day}",
            )
