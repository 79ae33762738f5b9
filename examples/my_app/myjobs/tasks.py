"""The example's handlers: imported at cold start (handler_modules=myjobs.tasks), registered by name."""

from __future__ import annotations

from typing import Any

from jobsched.handlers import RunContext, registry


@registry.handler("reports.nightly")
def nightly(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Build one night's report; ctx.effect_key is the same for every attempt of this run."""
    return {"report": payload.get("name", "nightly"), "effect_key": ctx.effect_key}
