"""FargateVcpuStore in one process: the same contract as jobsched.adapters.dynamodb.fargate_vcpu.

Outside jobsched.adapters.memory (which the Lambda layer leaves out) because the composition root
falls back to it where no Fargate vCPU table is configured: reservations are then counted per process,
right for one process (tests, the simulator) and nothing else. jobsched.adapters.memory re-exports it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobsched.domain.fargate_vcpu import Scope


@dataclass
class MemoryFargateVcpuStore:
    """Per-scope counters and per-run records under one lock."""

    counters: dict[str, int] = field(default_factory=dict)
    # run -> (CPU units, the scopes it reserved in, when it lapses)
    records: dict[str, tuple[int, tuple[str, ...], datetime]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def reserve(
        self, run: str, *, cpu: int, scopes: Sequence[Scope], until: datetime, now: datetime
    ) -> Scope | None:
        with self._lock:
            if run in self.records:
                held_cpu, held_scopes, _ = self.records[run]
                self.records[run] = (held_cpu, held_scopes, until)
                return None
            full = self._full(cpu, scopes)
            if full is not None:
                for lapsed in [r for r, (_, _, u) in self.records.items() if u < now]:
                    self._release(lapsed)
                full = self._full(cpu, scopes)
            if full is not None:
                return full
            for scope in scopes:
                self.counters[scope.name] = self.counters.get(scope.name, 0) + cpu
            self.records[run] = (cpu, tuple(s.name for s in scopes), until)
            return None

    def _full(self, cpu: int, scopes: Sequence[Scope]) -> Scope | None:
        return next((s for s in scopes if self.counters.get(s.name, 0) + cpu > s.limit), None)

    def release(self, run: str) -> bool:
        with self._lock:
            return self._release(run)

    def _release(self, run: str) -> bool:
        record = self.records.pop(run, None)
        if record is None:
            return False
        cpu, names, _ = record
        for name in names:
            self.counters[name] = max(0, self.counters.get(name, 0) - cpu)
        return True

    def used(self, scope: str) -> int:
        with self._lock:
            return self.counters.get(scope, 0)

    def reservations(self) -> dict[str, datetime]:
        with self._lock:
            return {run: until for run, (_, _, until) in self.records.items()}
