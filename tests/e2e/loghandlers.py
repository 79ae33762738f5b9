"""A handler that logs, for the per-run logs test (loaded by the local stack as a handler module)."""

from __future__ import annotations

import logging
from typing import Any

from jobsched.handlers import RunContext, registry

log = logging.getLogger("tests.e2e.loghandlers")


@registry.handler("test.says")
def says(payload: dict[str, Any], ctx: RunContext) -> str:
    """Log the payload's `line` (at INFO: the console stays quiet, the run's logs keep it) and succeed."""
    log.info(str(payload["line"]))
    return "said"
