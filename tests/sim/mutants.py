"""Planted bugs (issue 19, item 4): each a context manager that monkeypatches the real classes where the
real mechanism lives, and restores them on exit. Nothing here is a switch in shipped code.

    stamp_before_send     Dispatcher.hand_over stamps the next tick before its sends go out: a crash
                          between them (or a failed send) leaves the job advanced and the tick unsent.
    unconditional_record  RunStore.record / record_unleased overwrite the run row whatever it holds:
                          a duplicate or a lapsed holder's outcome replaces the recorded one.
    double_count          the DAG workflow's Count drops its "not counted yet" condition: a second
                          signal of one upstream run counts again, and a dependant fires early.
    early_hold_lapse      the overlap hold is taken for lease/4 and never renewed: a long run's slot
                          lapses while it runs and the job's next tick starts beside it.
    skip_on_pause         a handed-over tick that comes due while its job is paused is recorded
                          SKIPPED "paused" instead of being left to the resume's catch-up policy.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from jobsched.adapters.memory import MemoryJobStore, MemoryRunStore
from jobsched.adapters.memory import runs as memory_runs
from jobsched.domain.models import Job
from jobsched.domain.records import AttemptEnd, Transition
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.services.dispatch import Dispatcher
from jobsched.services.run import Delivery, Outcome, Worker


@contextlib.contextmanager
def _patched(owner: type, **attrs: Any) -> Iterator[None]:
    originals = {name: owner.__dict__[name] for name in attrs}
    for name, value in attrs.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name, value in originals.items():
            setattr(owner, name, value)


@contextlib.contextmanager
def stamp_before_send() -> Iterator[None]:
    """The dispatcher's two steps swapped: step 2 (stamp) first, then step 1 (send)."""
    original_send, original_hand_over = Dispatcher._send, Dispatcher.hand_over
    held: dict[int, list[Any]] = {}
    lock = threading.Lock()

    def send_later(self: Dispatcher, batch: Any) -> None:
        with lock:
            held.setdefault(id(self), []).append(batch)

    def hand_over(self: Dispatcher, entries: Any, **kwargs: Any) -> int:
        try:
            sent = original_hand_over(self, entries, **kwargs)  # stamps; the sends are held back
        except BaseException:
            held.pop(id(self), None)  # the process died (or a call failed) after stamping
            raise
        for batch in held.pop(id(self), []):
            original_send(self, batch)
        return sent

    with _patched(Dispatcher, _send=send_later, hand_over=hand_over):
        yield


@contextlib.contextmanager
def unconditional_record() -> Iterator[None]:
    """The worker's record of an attempt without its condition (status and lease owner)."""
    original_record, original_unleased = MemoryRunStore.record, MemoryRunStore.record_unleased

    def force(
        runs: MemoryRunStore, job_id: str, sf: str, end: AttemptEnd, extra: dict[str, Any]
    ) -> Transition:
        with runs._lock:
            row = runs.rows.get((job_id, sf))
            if row is None:
                return Transition(applied=False, row=None)
            update: dict[str, Any] = {
                "status": end.status,
                **memory_runs._end_changes(end),
                "attempts": [*row.attempts, memory_runs._attempt_record(end)],
                **extra,
            }
            if end.status == RunStatus.SUCCEEDED:
                update["error"] = None
            runs.rows[(job_id, sf)] = row.model_copy(update=update)
            return Transition(applied=True, previous=row)

    def record(
        self: MemoryRunStore, job_id: str, scheduled_for: str, *, owner: str, end: AttemptEnd
    ) -> Transition:
        done = original_record(self, job_id, scheduled_for, owner=owner, end=end)
        return done if done.applied else force(self, job_id, scheduled_for, end, {})

    def record_unleased(
        self: MemoryRunStore, job_id: str, scheduled_for: str, *, worker: str, end: AttemptEnd, create: Any
    ) -> Transition:
        done = original_unleased(self, job_id, scheduled_for, worker=worker, end=end, create=create)
        if done.applied or done.row is None:
            return done
        extra = {"worker": worker, "started_at": end.started_at, "attempt": done.row.attempt + 1}
        return force(self, job_id, scheduled_for, end, extra)

    with _patched(MemoryRunStore, record=record, record_unleased=record_unleased):
        yield


@contextlib.contextmanager
def double_count() -> Iterator[None]:
    """The DAG workflow's Count without `NOT contains(counted, :run_id)`: counted per signal, not per run."""

    def count_upstream(
        self: MemoryRunStore, job_id: str, period: str, *, fan_in: int, upstream_run: str
    ) -> int:
        with self._lock:
            outstanding, counted = self.waits.get((job_id, period), (fan_in, frozenset()))
            self.waits[(job_id, period)] = (outstanding - 1, counted | {upstream_run})
            return outstanding - 1

    with _patched(MemoryRunStore, count_upstream=count_upstream):
        yield


@contextlib.contextmanager
def early_hold_lapse() -> Iterator[None]:
    """The overlap hold taken until now + lease/4, and the heartbeat's renewal of it dropped."""

    def hold_seconds(self: Worker) -> int:
        return max(1, self.settings.lease_seconds // 4)

    def extend_hold(self: MemoryJobStore, job_id: str, *, run: str, until: Any) -> bool:
        with self._lock:
            job = self.jobs.get(job_id)
            return job is not None and job.active_run == run  # answers "renewed", writes nothing

    with _patched(Worker, hold_seconds=hold_seconds), _patched(MemoryJobStore, extend_hold=extend_hold):
        yield


@contextlib.contextmanager
def skip_on_pause() -> Iterator[None]:
    """A tick of a pause is written SKIPPED "paused" by the worker (the defect issue 18 item 3 fixed)."""
    original_gate: Callable[..., Outcome | None] = Worker._gate

    def gate(
        self: Worker, job: Job, sf: str, delivery: Delivery, *, kind: str, held: bool, started: bool = False
    ) -> Outcome | None:
        if job.status == JobStatus.PAUSED and kind != "manual" and self._new_tick_of_pause(job, sf):
            skipped = self._skip(job, sf, "paused", kind=kind, first_attempt_only=True)
            if skipped is not None:
                return skipped
        return original_gate(self, job, sf, delivery, kind=kind, held=held, started=started)

    with _patched(Worker, _gate=gate):
        yield


MUTANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "stamp_before_send": stamp_before_send,
    "unconditional_record": unconditional_record,
    "double_count": double_count,
    "early_hold_lapse": early_hold_lapse,
    "skip_on_pause": skip_on_pause,
}
