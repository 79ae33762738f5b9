"""The handler registry: dotted names to the Python callables that run a job's payload.

A handler receives (payload, context) and returns a JSON-serialisable result; an exception is
a failed attempt. Runs are at least once, so a handler makes its side effect idempotent with
`context.effect_key`, the same for every attempt and delivery of one (job, scheduled_for).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobsched.errors import UnknownHandler

# What a run's row holds for its long-job helpers (compact JSON, UTF-8): a progress is a glance (a
# number, a few fields), a checkpoint the state an attempt resumes from; both ride on the run row,
# which stays far below DynamoDB's 400 KB with the run's attempts and result (16 KiB) beside them.
MAX_PROGRESS_BYTES = 1024
MAX_CHECKPOINT_BYTES = 32 * 1024

Note = Callable[[str | None, str | None], bool]
"""The worker's write of (progress JSON, checkpoint JSON) on the run's row; False: not this worker's."""


class ProgressTooLarge(ValueError):
    """ctx.heartbeat(progress) with a progress that is not JSON or over MAX_PROGRESS_BYTES."""


class CheckpointTooLarge(ValueError):
    """ctx.checkpoint(state) with a state that is not JSON or over MAX_CHECKPOINT_BYTES."""


def json_within(value: object, limit: int, error: type[ValueError], what: str) -> str:
    """`value` as compact JSON text (the run row's form); raises `error` if it is not JSON or over
    `limit` bytes (the worker API checks a remote worker's progress and checkpoint with it too)."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise error(f"{what} must be JSON: {exc}") from None
    size = len(text.encode())
    if size > limit:
        raise error(f"{what} is {size} bytes; at most {limit}")
    return text


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a handler knows about the run it is executing."""

    job_id: str
    run_id: str
    tenant: str
    scheduled_for: datetime
    attempt: int
    effect_key: str
    """Idempotency key of the run's effect: (job_id, scheduled_for), stable across attempts."""
    beat: Callable[[], None] | None = None
    """The worker's heartbeat for this run (None outside a worker)."""
    cancel_requested: Callable[[], bool] | None = None
    """Whether the run's last heartbeat found it asked to stop (None outside a worker)."""
    note: Note | None = None
    """The worker's write of progress and checkpoints on the run's row (None outside a worker)."""
    task_noted: Callable[[str], None] | None = None
    """The worker's note on the run's row of a container task this attempt runs (None outside a worker)."""
    last_checkpoint: Any = None
    """The state the run's last ctx.checkpoint() stored, as this attempt found it (None: none yet):
    a retried or taken-over attempt resumes from it."""

    def heartbeat(self, progress: Any = None) -> None:
        """Renew this run's leases now (the worker also renews them every lease/3 on its own).

        `progress` (a number or a small JSON value, at most MAX_PROGRESS_BYTES) is kept on the run,
        shown by GET /api/runs/{id} and the run's history; None leaves the last one as it is. Raises
        ProgressTooLarge for a value that is not JSON or too big.
        """
        text = (
            None
            if progress is None
            else json_within(progress, MAX_PROGRESS_BYTES, ProgressTooLarge, "progress")
        )
        if self.beat is not None:
            self.beat()
        if text is not None and self.note is not None:
            self.note(text, None)

    def checkpoint(self, state: Any) -> bool:
        """Store `state` (JSON, at most MAX_CHECKPOINT_BYTES) durably with the run: the next attempt
        of this run (a retry, or a takeover after this worker died) finds it as ctx.last_checkpoint.

        True once stored; False if the run is no longer this attempt's (another worker took it over:
        finish quickly, this attempt's result will be refused). Raises CheckpointTooLarge for a
        state that is not JSON or too big, and a store error if the write failed (nothing stored).
        """
        text = json_within(state, MAX_CHECKPOINT_BYTES, CheckpointTooLarge, "checkpoint")
        return self.note is None or self.note(None, text)

    def note_task(self, task_arn: str) -> None:
        """Keep on the run that this attempt runs ECS task `task_arn` (the ecs target's: GET
        /api/runs/{id}/logs reads the task's output by it). Idempotent; never raises (a note that
        could not be written is logged by the worker: the run goes on, its output unlinked)."""
        if self.task_noted is not None:
            self.task_noted(task_arn)

    @property
    def cancelled(self) -> bool:
        """POST /api/runs/{id}/cancel asked this run to stop: finish early (a cooperative stop).

        Read by the heartbeat (every lease/3 s, and at each ctx.heartbeat()), so a handler that
        polls it in a loop sees a cancel within one beat. What the run answers after it is its result.
        """
        return self.cancel_requested is not None and self.cancel_requested()


Handler = Callable[[dict[str, Any], RunContext], Any]


@dataclass(frozen=True, slots=True)
class PythonHandler:
    """The python target: a registered callable, given the envelope's payload and the run context."""

    name: str
    fn: Handler

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Call the handler with (payload, context); its exception is the attempt's failure."""
        return self.fn(envelope["payload"], ctx)


class HandlerRegistry:
    """Maps dotted names to handlers; thread-safe, shared by API (validation) and workers (execution)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()

    def register(self, name: str, fn: Handler) -> Handler:
        """Register `fn` under `name` (replacing any earlier one); returns `fn`."""
        with self._lock:
            self._handlers[name] = fn
        return fn

    def handler(self, name: str) -> Callable[[Handler], Handler]:
        """Decorator form of register()."""
        return lambda fn: self.register(name, fn)

    def get(self, name: str) -> Handler:
        """The handler for `name`; raises UnknownHandler naming it."""
        try:
            return self._handlers[name]
        except KeyError:
            raise UnknownHandler(f"handler '{name}' is not registered", field="handler") from None

    def target(self, name: str) -> PythonHandler:
        """The python target for `name` (jobsched.ports.Target); raises UnknownHandler naming it."""
        return PythonHandler(name, self.get(name))

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def copy(self) -> HandlerRegistry:
        """A copy of this registry: a test registers its own handlers on it, this one unchanged."""
        return self.without(())

    def without(self, names: Iterable[str]) -> HandlerRegistry:
        """A copy of this registry less `names` (this one is left as it is)."""
        copy = HandlerRegistry()
        left_out = set(names)
        with self._lock:
            copy._handlers = {n: fn for n, fn in self._handlers.items() if n not in left_out}
        return copy

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._handlers)

    def load_modules(self, modules: Iterable[str]) -> None:
        """Import modules that register their handlers on `registry` at import time.

        They are found on sys.path and in the working directory: `jobsched local` runs as a console
        script, whose sys.path holds .venv/bin but not the directory it was started from, so
        JOBSCHED_HANDLER_MODULES=mypkg.jobs would otherwise need PYTHONPATH=. as well. The directory
        is searched last, so it shadows no installed package; on Lambda it is the task root, already
        on sys.path.
        """
        modules = list(modules)
        if modules and os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        for module in modules:
            importlib.import_module(module)


registry = HandlerRegistry()
# The built-in demo handlers below: registered on `registry` at import, and left out of a deployed
# function's registry unless JOBSCHED_DEMO_HANDLERS=true (Settings.demo_handlers; jobsched.wiring).
DEMO_HANDLERS = ("demo.echo", "demo.sleep", "demo.fail", "demo.flaky", "demo.checkpoint")


class DemoFailure(RuntimeError):
    """The error demo.fail and demo.flaky raise."""


@registry.handler("demo.echo")
def _echo(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    return payload


@registry.handler("demo.sleep")
def _sleep(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Sleep `seconds`, stopping early when the run is cancelled (the worker's heartbeat reads it)."""
    seconds = max(0.0, min(float(payload.get("seconds", 1)), 900.0))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if ctx.cancelled:
            return {"slept": round(seconds - left, 3), "cancelled": True}
        time.sleep(min(left, 0.5))
    return {"slept": seconds}


@registry.handler("demo.fail")
def _fail(payload: dict[str, Any], ctx: RunContext) -> None:
    raise DemoFailure(str(payload.get("message", "demo.fail always fails")))


@registry.handler("demo.flaky")
def _flaky(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    fail_times = int(payload.get("fail_times", 1))
    if ctx.attempt <= fail_times:
        raise DemoFailure(f"demo.flaky fails attempt {ctx.attempt} of the first {fail_times}")
    return {"attempt": ctx.attempt}


@registry.handler("demo.checkpoint")
def _checkpointing(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """`steps` steps of `step_seconds` each, checkpointing after every one: an attempt resumes after the
    last step its run checkpointed (a retry, or a takeover after a lost worker), never from step 0."""
    steps = max(0, min(int(payload.get("steps", 5)), 10_000))
    step_seconds = max(0.0, min(float(payload.get("step_seconds", 1)), 60.0))
    resumed = ctx.last_checkpoint
    start = int(resumed["done"]) if isinstance(resumed, dict) and "done" in resumed else 0
    for step in range(start, steps):
        if ctx.cancelled:
            return {"done": step, "steps": steps, "resumed_from": start, "cancelled": True}
        time.sleep(step_seconds)
        ctx.checkpoint({"done": step + 1})
        ctx.heartbeat(progress={"done": step + 1, "of": steps})
    return {"done": steps, "steps": steps, "resumed_from": start, "attempt": ctx.attempt}
