"""Handlers for the worker-pool end-to-end tests (loaded by `jobsched worker --handlers`)."""

from __future__ import annotations

import os
import time
from typing import Any

from jobsched.handlers import RunContext, registry


@registry.handler("pool.work")
def work(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Sleep `seconds` on the first attempt (`later_seconds` on later ones), beating; answer the pid."""
    seconds = float(payload.get("seconds", 0) if ctx.attempt == 1 else payload.get("later_seconds", 0))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not ctx.cancelled:
        time.sleep(min(left, 1.0))
        ctx.heartbeat()
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@registry.handler("pool.flaky")
def flaky(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Fail the first attempt, succeed on the next: the failure workflow's retry, on a pool."""
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return {"pid": os.getpid(), "attempt": ctx.attempt}
