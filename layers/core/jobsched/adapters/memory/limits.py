"""The in-process LimitStore and QuotaStore (jobsched.adapters.limits), among the other fakes."""

from __future__ import annotations

from jobsched.adapters.limits import MemoryLimitStore, MemoryQuotaStore

__all__ = ["MemoryLimitStore", "MemoryQuotaStore"]
