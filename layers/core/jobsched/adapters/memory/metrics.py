"""Metrics kept in a list: what the services emitted, for tests to read back."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from jobsched import telemetry


@dataclass(frozen=True, slots=True)
class Emitted:
    """One emitted value."""

    name: str
    value: float
    unit: str


@dataclass
class MemoryMetrics:
    """Every value emitted, in order (thread-safe: the worker runs a batch's runs on threads)."""

    emitted: list[Emitted] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def emit(self, name: str, value: float, unit: str) -> None:
        """Keep the value."""
        with self._lock:
            self.emitted.append(Emitted(name, value, unit))

    def alert(self, kind: str) -> None:
        """Keep one count of the alert's kind."""
        self.emit(telemetry.alerts(kind), 1, telemetry.COUNT)

    def values(self, name: str) -> list[float]:
        """The values emitted under `name`, in order."""
        with self._lock:
            return [e.value for e in self.emitted if e.name == name]
