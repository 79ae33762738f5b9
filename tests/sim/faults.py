"""Faults drawn from the schedule's rng, raised as the real adapters raise them (jobsched.errors).

- Before any store or queue call: a throttle or a 500 (TransientStoreError, as
  jobsched.adapters.aws maps ThrottlingException / ProvisionedThroughputExceeded / InternalServerError).
- After a write took effect: a timeout (StoreUnreachable: "a write may have applied").
- Stale reads where DynamoDB reads are eventually consistent: JobStore.due_page (the GSI),
  RunStore.get(consistent=False) and RunStore.dead_letters (the sparse dead-letter GSI). A stale
  read answers the previous answer this store gave for the same key: a real older version of the
  index or row (so it may miss a new entry, or show a moved one).
- Crashes at every CrashPoints step the services call (`crash("dispatch.after_send")`, ...).
- Clock skew per process and lost leases are drawn in world.py (a process's clock; a stalled
  handler whose heartbeat is skipped).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobsched.errors import StoreUnreachable, TransientStoreError
from jobsched.ports import Crash

JOB_WRITES = frozenset(
    {
        "create_with_idempotency", "rewire", "stamp_next_tick", "set_job_status", "save_definition",
        "hold_job", "hold_and_read", "buffer_behind", "release_job", "extend_hold", "count_and_read",
        "uncount", "extend_count", "cancel_job", "acquire_shard", "release_shard",
    }
)  # fmt: skip
RUN_WRITES = frozenset(
    {
        "put_pending", "claim", "start", "record", "persist_running", "record_unleased", "skip",
        "cancel", "lose", "extend_lease", "fail_stuck", "dead_letter",
        "note_wait",  # a run whose key is full (only those: the seeds found before keys never call it)
    }
)  # fmt: skip
QUEUE_WRITES = frozenset({"send", "extend"})
# The LimitStore's concurrency-key calls. Not take_budget: backfills take their day's ticks through
# it, and faulting it now would draw fault numbers the seeds found before keys never drew (their
# schedules would shift); the key calls are made by runs of jobs with a concurrency key only.
LIMIT_WRITES = frozenset({"acquire", "extend", "release"})
# Port methods only: the sim's own side doors (receive, delete, peek...) never fail.
JOB_CALLS = JOB_WRITES | {"get_job", "due_page"}
RUN_CALLS = RUN_WRITES | {"get", "dead_letters", "recent", "history", "since", "get_many"}
QUEUE_CALLS = QUEUE_WRITES
LIMIT_CALLS = LIMIT_WRITES | {"holders"}
# Packed one-offs' store (jobsched.domain.packs): only worlds with packs call it.
PACK_WRITES = frozenset({"put_pack", "move_cursor", "materialize"})
PACK_CALLS = PACK_WRITES | {"get_pack"}


@dataclass
class Faults:
    """The schedule's fault switchboard: rates, and what it injected by kind."""

    rng: random.Random
    rate: float = 0.02  # a throttle or 500 before a call
    timeout_rate: float = 0.01  # a timeout after a write took effect
    stale_rate: float = 0.1  # an eventually consistent read answers an older version
    crash_rate: float = 0.02  # a process dies at a step boundary
    active: bool = True
    injected: Counter[str] = field(default_factory=Counter)

    def before(self, call: str) -> None:
        if self.active and self.rng.random() < self.rate:
            code = self.rng.choice(["ThrottlingException", "InternalServerError"])
            self.injected["throttle" if code == "ThrottlingException" else "500"] += 1
            raise TransientStoreError(f"sim: {code} on {call}", aws_code=code)

    def after_write(self, call: str) -> None:
        if self.active and self.rng.random() < self.timeout_rate:
            self.injected["timeout_after_write"] += 1
            raise StoreUnreachable(f"sim: read timeout after {call} applied")

    def stale(self) -> bool:
        if self.active and self.rng.random() < self.stale_rate:
            self.injected["stale_read"] += 1
            return True
        return False

    def crash(self, point: str) -> None:
        """CrashPoints: the process dies here (Crash escapes every `except Exception`)."""
        if self.active and self.rng.random() < self.crash_rate:
            self.injected[f"crash:{point}"] += 1
            raise Crash(point)

    def step(self, name: str) -> None:
        """The workflow model's `fault`: a Step Functions task's call throttled or failed."""
        self.before(f"sfn:{name}")

    def step_after(self, name: str) -> None:
        """The workflow model's `fault_after`: a task's write applied, then its call timed out."""
        self.after_write(f"sfn:{name}")

    def count(self, kind: str, n: int = 1) -> None:
        if n:
            self.injected[kind] += n


class Faulty:
    """A store or queue seen through faults: every port call may fail before, or time out after."""

    def __init__(
        self,
        target: Any,
        faults: Faults,
        *,
        calls: frozenset[str],
        writes: frozenset[str],
        stale_key: dict[str, Callable[..., object]] | None = None,
    ) -> None:
        self._target, self._faults = target, faults
        self._calls, self._writes = calls, writes
        self._stale_key = stale_key or {}
        self._answers: dict[object, object] = {}  # last answer per stale-able read key

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in self._calls or not callable(attr):
            return attr
        faults, writes, keyer = self._faults, self._writes, self._stale_key.get(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            faults.before(name)
            key = keyer(*args, **kwargs) if keyer is not None else None
            if key is not None and key in self._answers and faults.stale():
                return self._answers[key]
            out = attr(*args, **kwargs)
            if key is not None:
                self._answers[key] = out
            if name in writes:
                faults.after_write(name)
            return out

        return call


def _due_key(due_key: str, *, until: object, cursor: Any, limit: int) -> object:
    return ("due", due_key, repr(cursor))


def _run_get_key(job_id: str, scheduled_for: object, *, consistent: bool = True) -> object:
    from jobsched.domain import times

    if consistent:
        return None
    sf = scheduled_for if isinstance(scheduled_for, str) else times.stored(scheduled_for)  # type: ignore[arg-type]
    return ("run", job_id, sf)


def _dead_key(*, dl_key: str, start: Any, limit: int, job_id: str | None) -> object:
    return ("dl", dl_key, repr(start), job_id)


def faulty_jobs(jobs: Any, faults: Faults) -> Any:
    return Faulty(jobs, faults, calls=JOB_CALLS, writes=JOB_WRITES, stale_key={"due_page": _due_key})


def faulty_runs(runs: Any, faults: Faults) -> Any:
    return Faulty(
        runs,
        faults,
        calls=RUN_CALLS,
        writes=RUN_WRITES,
        stale_key={"get": _run_get_key, "dead_letters": _dead_key},
    )


def faulty_queue(queue: Any, faults: Faults) -> Any:
    return Faulty(queue, faults, calls=QUEUE_CALLS, writes=QUEUE_WRITES)


def faulty_packs(packs: Any, faults: Faults) -> Any:
    return Faulty(packs, faults, calls=PACK_CALLS, writes=PACK_WRITES)


def faulty_limits(limits: Any, faults: Faults) -> Any:
    return Faulty(limits, faults, calls=LIMIT_CALLS, writes=LIMIT_WRITES)
