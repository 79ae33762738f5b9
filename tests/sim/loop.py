"""One seeded event loop on a simulated clock: every process of a schedule runs as its events.

Events are (time, seq, fn) in a heap; seq breaks ties in the order they were scheduled, so a seed
replays exactly. A long handler "takes" simulated seconds by running the loop nested until its end
(`run_until`): the rest of the fleet goes on meanwhile, as it would on other machines. Time never
goes backwards; nothing sleeps and no thread does work.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Loop:
    """The schedule's event loop; `now` is simulated seconds since T0."""

    def __init__(self, *, start: datetime = T0) -> None:
        self.start = start
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.events = 0
        self.depth = 0  # nesting of run_until: long handlers in progress

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Run `fn` at simulated second `when` (at once if that has passed)."""
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), fn))

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        """Run `fn` `delay` simulated seconds from now (the `schedule` the workflow model takes)."""
        self.at(self.now + max(0.0, delay), fn)

    def run_until(self, until: float) -> None:
        """Run every event due up to `until`, then set the clock to `until` (if it is not past it)."""
        self.depth += 1
        try:
            while self._heap and self._heap[0][0] <= until:
                when, _, fn = heapq.heappop(self._heap)
                self.now = max(self.now, when)
                self.events += 1
                fn()
            self.now = max(self.now, until)
        finally:
            self.depth -= 1

    def pending(self) -> int:
        return len(self._heap)

    def instant(self, offset: float = 0.0) -> datetime:
        return self.start + timedelta(seconds=self.now + offset)


class SimClock:
    """A process's view of simulated time (jobsched.ports.Clock): the loop's time plus its skew."""

    def __init__(self, loop: Loop, skew: float = 0.0) -> None:
        self.loop, self.skew = loop, skew

    def now(self) -> datetime:
        return self.loop.instant(self.skew)
