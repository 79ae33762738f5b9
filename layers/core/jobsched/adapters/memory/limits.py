"""The in-process LimitStore, QuotaStore and CapacityStore (jobsched.adapters.limits and
jobsched.adapters.capacity), among the other fakes."""

from __future__ import annotations

from jobsched.adapters.capacity import MemoryCapacityStore
from jobsched.adapters.limits import MemoryLimitStore, MemoryQuotaStore

__all__ = ["MemoryCapacityStore", "MemoryLimitStore", "MemoryQuotaStore"]
