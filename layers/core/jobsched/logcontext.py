"""Run-scoped structured logs: every line logged while a run runs carries its job_id, run_id and tenant.

The keys live in powertools' context variable (Logger.thread_safe_append_keys), not in a logger's
own keys, because one worker runs a batch's runs on threads at once: each thread (and the handler
thread a timeout spawns, which copies the context) sees its own run's keys, never a neighbour's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.filters import SuppressFilter
from aws_lambda_powertools.logging.formatter import THREAD_LOCAL_KEYS, clear_context_keys, set_context_keys

RUN_KEYS = ("job_id", "run_id", "tenant")
_ROUTED = "jobsched_routed"


@contextmanager
def run_scope(*, job_id: str, run_id: str, tenant: str | None) -> Iterator[None]:
    """Within the block, log lines carry the run's keys; after it, the keys before it (none, usually)."""
    before = dict(THREAD_LOCAL_KEYS.get())
    keys = {"job_id": job_id, "run_id": run_id}
    if tenant:
        keys["tenant"] = tenant
    set_context_keys(**keys)  # type: ignore[arg-type]  # powertools types the values oddly
    try:
        yield
    finally:
        # A new dict, not pops: a context copied from this one shares the dict object.
        clear_context_keys()
        if before:
            set_context_keys(**before)


def current_run() -> dict[str, str]:
    """The run keys of the scope this thread is in (empty outside a run)."""
    keys = THREAD_LOCAL_KEYS.get()
    return {k: str(keys[k]) for k in RUN_KEYS if keys.get(k)}


def route_stdlib_logs(logger: Logger) -> logging.Handler:
    """A handler's own `logging` lines become JSON lines like `logger`'s, run keys included.

    The root logger writes through a handler with `logger`'s formatter, at its level; Lambda's own
    root handler (plain text, no keys) is taken off. `logger`'s own lines (and its children's)
    reach the root too: SuppressFilter keeps them from printing twice. Idempotent: a second call
    (another cold start in one process) replaces the handler the first added.
    """
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _ROUTED, False) or type(old).__name__ == "LambdaLoggerHandler":
            root.removeHandler(old)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logger.registered_formatter)
    handler.addFilter(SuppressFilter(logger.service))
    handler.setLevel(logger.log_level)
    setattr(handler, _ROUTED, True)
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logger.log_level:
        root.setLevel(logger.log_level)
    return handler
