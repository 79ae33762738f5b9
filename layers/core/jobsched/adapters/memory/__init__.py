"""In-memory implementations of the ports (jobsched.ports), with the same conditional semantics.

For unit tests of the services: no network, no moto, no sleeps. Each store keeps its state in
dicts behind one lock, so every method is atomic, as one DynamoDB conditional write is; reads
are always consistent (an allowed case of "may be stale"). tests/contract/ runs one suite over
these and the AWS adapters (on moto) to prove they keep the same contracts.
"""

from __future__ import annotations

from jobsched.adapters.memory.alerts import MemoryAlertPublisher, MemoryAlertStore
from jobsched.adapters.memory.jobs import MemoryJobStore
from jobsched.adapters.memory.limits import MemoryFargateVcpuStore, MemoryLimitStore, MemoryQuotaStore
from jobsched.adapters.memory.logs import MemoryRunLogs, MemoryTaskLogs
from jobsched.adapters.memory.metrics import MemoryMetrics
from jobsched.adapters.memory.packs import MemoryPackStore
from jobsched.adapters.memory.queue import MemoryRunQueue, Received
from jobsched.adapters.memory.runs import MemoryRunStore
from jobsched.adapters.memory.secrets import MemorySigningSecrets
from jobsched.adapters.memory.state_machines import MemoryStateMachines
from jobsched.adapters.memory.workers import MemoryWorkerStore

__all__ = [
    "MemoryAlertPublisher",
    "MemoryAlertStore",
    "MemoryFargateVcpuStore",
    "MemoryJobStore",
    "MemoryLimitStore",
    "MemoryMetrics",
    "MemoryPackStore",
    "MemoryQuotaStore",
    "MemoryRunLogs",
    "MemoryRunQueue",
    "MemoryRunStore",
    "MemorySigningSecrets",
    "MemoryStateMachines",
    "MemoryTaskLogs",
    "MemoryWorkerStore",
    "Received",
]
