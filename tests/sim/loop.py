"""One seeded event loop on a simulated clock: every process of a schedule runs as its events.

Events are (time, seq, fn) in a heap; seq breaks ties in the order they were scheduled, so a seed
replays exactly. Time never goes backwards; nothing sleeps in real time.

A process that waits simulated seconds mid-call (a long handler, a worker waiting for its tick's
second) runs as a task (`spawn`): `sleep` parks it and schedules its wake-up, and the loop goes on
with the rest of the fleet meanwhile, as it would on other machines. Each task runs on a thread of
its own, but only one thread ever runs at a time: the loop hands over to a task and waits until the
task parks or ends, so the order of events is the seed's alone.

    loop thread:  event ... spawn(deliver) ──go──>            ... wake event ──go──>           ...
    task thread:                      deliver ... sleep(25) ──back──>  (parked)   ... returns ──back──>

(The loop used to run itself nested inside a long handler until the handler's end. A handler that
started inside the nested run and ended later held every outer handler past its own end, chain upon
chain: seeds whose load phase, with its faults, lasted hours of simulated time instead of minutes.)
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Abandoned(BaseException):
    """Raised inside a task still asleep when its schedule ends: it unwinds, and nothing more runs."""


class _Carrier:
    """A thread that runs tasks one after another (threads are reused: starting one costs more)."""

    def __init__(self) -> None:
        self.go, self.back = threading.Semaphore(0), threading.Semaphore(0)
        self.task: _Task | None = None
        threading.Thread(target=self._run, daemon=True, name="sim-task").start()

    def _run(self) -> None:
        while True:
            self.go.acquire()
            task = self.task
            if task is None:
                return  # the loop closed
            try:
                task.fn()
            except BaseException as exc:  # handed to the loop thread, which raises it (but Abandoned)
                task.error = exc
            task.done = True
            self.back.release()


class _Task:
    def __init__(self, fn: Callable[[], None], carrier: _Carrier) -> None:
        self.fn, self.carrier = fn, carrier
        self.error: BaseException | None = None
        self.done = False
        self.abandoned = False

    def park(self) -> None:
        """In the task's thread: hand the loop back, and wait until an event resumes this task."""
        if self.abandoned:
            raise Abandoned
        self.carrier.back.release()
        self.carrier.go.acquire()
        if self.abandoned:
            raise Abandoned


class Loop:
    """The schedule's event loop; `now` is simulated seconds since T0."""

    def __init__(self, *, start: datetime = T0) -> None:
        self.start = start
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.events = 0
        self.tasks = 0  # spawned, in all
        self._current: _Task | None = None
        self._parked: dict[int, _Task] = {}
        self._idle: list[_Carrier] = []

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Run `fn` at simulated second `when` (at once if that has passed)."""
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), fn))

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        """Run `fn` `delay` simulated seconds from now (the `schedule` the workflow model takes)."""
        self.at(self.now + max(0.0, delay), fn)

    def run_until(self, until: float) -> None:
        """Run every event due up to `until`, then set the clock to `until` (if it is not past it)."""
        if self._current is not None:
            raise RuntimeError("run_until inside a task: a process waits with Loop.sleep")
        heap, pop = self._heap, heapq.heappop
        while heap and heap[0][0] <= until:
            when, _, fn = pop(heap)
            if when > self.now:
                self.now = when
            self.events += 1
            fn()
        if until > self.now:
            self.now = until

    def pending(self) -> int:
        return len(self._heap)

    def instant(self, offset: float = 0.0) -> datetime:
        return self.start + timedelta(seconds=self.now + offset)

    # -- tasks: processes that wait simulated seconds mid-call ------------------------------------------
    def spawn(self, fn: Callable[[], None]) -> None:
        """Run `fn` now as a task: until it ends or first sleeps, then the loop goes on."""
        carrier = self._idle.pop() if self._idle else _Carrier()
        task = _Task(fn, carrier)
        carrier.task = task
        self.tasks += 1
        self._switch(task)

    def sleep(self, seconds: float) -> None:
        """The calling task waits `seconds` of simulated time while the loop runs everything else."""
        task = self._current
        if task is None:
            raise RuntimeError("Loop.sleep outside a task: spawn the process that waits")
        if task.abandoned:
            raise Abandoned
        self._parked[id(task)] = task
        self.after(seconds, lambda: self._wake(task))
        task.park()

    def _wake(self, task: _Task) -> None:
        if self._parked.pop(id(task), None) is not None:
            self._switch(task)

    def _switch(self, task: _Task) -> None:
        """In the loop thread: let `task` run until it parks or ends; raise what it raised."""
        self._current = task
        try:
            task.carrier.go.release()
            task.carrier.back.acquire()
        finally:
            self._current = None
        if task.done:
            task.carrier.task = None
            self._idle.append(task.carrier)
            if task.error is not None and not isinstance(task.error, Abandoned):
                raise task.error

    def close(self) -> None:
        """End the schedule: unwind every task still asleep (Abandoned), and stop the threads."""
        while self._parked:
            _, task = self._parked.popitem()
            task.abandoned = True
            self._switch(task)
        for carrier in self._idle:
            carrier.go.release()  # its task is None: the thread returns
        self._idle.clear()


class SimClock:
    """A process's view of simulated time (jobsched.ports.Clock): the loop's time plus its skew."""

    def __init__(self, loop: Loop, skew: float = 0.0) -> None:
        self.loop, self.skew = loop, skew

    def now(self) -> datetime:
        return self.loop.instant(self.skew)
