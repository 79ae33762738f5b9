"""The in-process LimitStore, QuotaStore and FargateVcpuStore (jobsched.adapters.limits and
jobsched.adapters.fargate_vcpu), among the other fakes."""

from __future__ import annotations

from jobsched.adapters.fargate_vcpu import MemoryFargateVcpuStore
from jobsched.adapters.limits import MemoryLimitStore, MemoryQuotaStore

__all__ = ["MemoryFargateVcpuStore", "MemoryLimitStore", "MemoryQuotaStore"]
