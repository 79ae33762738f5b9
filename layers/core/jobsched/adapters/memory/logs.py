"""Run log lines kept in a list; container tasks' output kept per task."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from jobsched.domain.logs import LogLine, LogPage


@dataclass
class MemoryRunLogs:
    """ports.RunLogs over a list of (run_id, tenant, line); the cursor is an index into it."""

    _lines: list[tuple[str, str, LogLine]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def append(self, run_id: str, tenant: str, at: datetime, message: str) -> None:
        """A line run `run_id` of `tenant` logged at `at` (kept in the order appended)."""
        with self._lock:
            self._lines.append((run_id, tenant, LogLine(at, message)))

    def page(self, run_id: str, *, tenant: str, since: datetime, cursor: str | None, limit: int) -> LogPage:
        """See ports.RunLogs."""
        start = int(cursor) if cursor else 0
        with self._lock:
            rows = list(enumerate(self._lines))[start:]
        lines: list[LogLine] = []
        for index, (rid, owner, line) in rows:
            if rid != run_id or owner != tenant or line.at < since:
                continue
            if len(lines) == limit:
                return LogPage(lines, str(index))
            lines.append(line)
        return LogPage(lines, None)


@dataclass
class MemoryTaskLogs:
    """ports.TaskLogs over the lines each task printed; the cursor is an index into its lines."""

    _lines: dict[str, list[LogLine]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def print(self, task_arn: str, at: datetime, message: str) -> None:
        """A line task `task_arn` printed at `at` (kept in the order printed)."""
        with self._lock:
            self._lines.setdefault(task_arn, []).append(LogLine(at, message))

    def page(self, task_arn: str, *, cursor: str | None, limit: int) -> LogPage:
        """See ports.TaskLogs."""
        start = int(cursor) if cursor else 0
        with self._lock:
            lines = list(self._lines.get(task_arn, []))
        end = start + limit
        return LogPage(lines[start:end], str(end) if end < len(lines) else None)
