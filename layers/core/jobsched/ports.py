"""Ports: the contracts services rely on. Adapters implement them; tests substitute them.

Stores and queues are used through their adapters' public methods (jobsched.adapters), whose
docstrings state each contract; time and crash injection are ports here because every
service takes them as inputs (time is an input: nothing in a service reads the wall clock).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """The authoritative time source of a process."""

    def now(self) -> datetime:
        """The current instant, timezone-aware."""
        ...


class SystemClock:
    """The machine's clock, in UTC."""

    def now(self) -> datetime:
        """The current instant, UTC."""
        return datetime.now(UTC)


class FakeClock:
    """A clock that only moves when told to (tests, simulations)."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The simulated instant."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move time forward and return the new instant."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, moment: datetime) -> None:
        """Jump to `moment`."""
        with self._lock:
            self._now = moment


class Crash(BaseException):
    """A simulated process death: it escapes every `except Exception`, as a SIGKILL would."""


class CrashPoints(Protocol):
    """Called between the steps of a service; a test implementation raises Crash at one of them."""

    def __call__(self, point: str) -> None:
        """Reached step boundary `point`."""
        ...


def no_crash(point: str) -> None:
    """The production crash points: none."""
