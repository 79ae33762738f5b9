"""A run's log lines, as GET /api/runs/{run_id}/logs answers them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a run logged: when, and its message (the line's own text, not its JSON envelope)."""

    at: datetime
    message: str


@dataclass(frozen=True, slots=True)
class LogPage:
    """Lines oldest first; `next_cursor` None: no more lines now (a running run may log more later)."""

    lines: list[LogLine] = field(default_factory=list)
    next_cursor: str | None = None
