"""LimitStore and QuotaStore in one process: the same contracts as jobsched.adapters.dynamodb.limits.

Outside jobsched.adapters.memory (which the Lambda layer leaves out) because the composition root
falls back to it where no limits table is configured: keys are then held per process, which is
right for one process (tests, the simulator) and nothing else. jobsched.adapters.memory re-exports it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from jobsched.domain.limits import Quota


@dataclass
class MemoryLimitStore:
    """Concurrency-key holder sets and daily budgets, per tenant, under one lock."""

    slots: dict[tuple[str, str], dict[str, datetime]] = field(default_factory=dict)
    budgets: dict[tuple[str, str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def acquire(
        self, tenant: str, key: str, *, holder: str, limit: int, until: datetime, now: datetime
    ) -> bool:
        with self._lock:
            live = {h: u for h, u in self.slots.get((tenant, key), {}).items() if u >= now}
            if holder not in live and len(live) >= limit:
                return False
            live[holder] = until
            self.slots[(tenant, key)] = live
            return True

    def extend(self, tenant: str, key: str, *, holder: str, until: datetime) -> bool:
        with self._lock:
            held = self.slots.get((tenant, key), {})
            if holder not in held:
                return False
            held[holder] = until
            return True

    def release(self, tenant: str, key: str, *, holder: str) -> None:
        with self._lock:
            self.slots.get((tenant, key), {}).pop(holder, None)

    def holders(self, tenant: str, key: str, *, now: datetime) -> dict[str, datetime]:
        with self._lock:
            return {h: u for h, u in self.slots.get((tenant, key), {}).items() if u >= now}

    def take_budget(self, tenant: str, name: str, *, day: str, amount: int, limit: int) -> bool:
        with self._lock:
            used = self.budgets.get((tenant, name, day), 0)
            if used + amount > limit:
                return False
            self.budgets[(tenant, name, day)] = used + amount
            return True


@dataclass
class MemoryQuotaStore:
    """Operator-set quotas by tenant."""

    quotas: dict[str, Quota] = field(default_factory=dict)

    def get_quota(self, tenant: str) -> Quota | None:
        return self.quotas.get(tenant)

    def put_quota(self, tenant: str, quota: Quota) -> None:
        self.quotas[tenant] = quota

    def list_quotas(self) -> dict[str, Quota]:
        return dict(self.quotas)
