"""A handler that ran while its worker stalled past every lease is recorded as executed (issue 19).

A stall (a process frozen, or a handler holding the GIL in C code) stops the heartbeat too: the
job's slot and the message's visibility lapse, and the fleet rightly takes the worker for dead. Its
message's redelivery then meets the next tick in the slot and writes the run SKIPPED, or a cancel
finds nothing running and writes it CANCELLED. When the stalled handler returns, its outcome was
refused, and the history said a run that executed never ran (tests/sim seeds 28, 49: 101 of the
113 such violations in 300 seeds). The run's own outcome now replaces that record.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.records import NewRun
from jobsched.domain.status import RunStatus
from jobsched.handlers import RunContext
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World


@pytest.mark.parametrize("record", ["SKIPPED", "CANCELLED"])
def test_a_run_recorded_as_never_started_while_its_stalled_handler_ran_ends_as_what_the_handler_did(
    world: World, record: str
) -> None:
    # Given a one-off whose handler stalls past its leases, and meanwhile the fleet writes its run
    # SKIPPED (its redelivery met the next tick in the slot) or CANCELLED (a cancel found it idle)
    calls: list[int] = []

    def stalled(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        sf = times.stored(ctx.scheduled_for)
        world.clock.advance(301)  # no heartbeat: the hold and the message's visibility lapse
        created, now = NewRun(ctx.job_id, ctx.tenant, sf), world.clock.now()
        if record == "SKIPPED":
            assert world.runs.skip(ctx.job_id, sf, reason="overlap", now=now, create=created).applied
        else:
            assert world.runs.cancel(ctx.job_id, sf, now=now, create=created).applied
        return {"ok": True}

    world.handler("test.stalled", stalled)
    request = CreateJobRequest(type="one_off", handler="test.stalled", run_at=T0 + timedelta(seconds=5))
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.svc.dispatcher.dispatch_all()
    # When the handler returns and the worker records its outcome
    outcomes = world.deliver()
    # Then the run says it executed, on attempt 1, with the handler's result: it did run
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and (run.status, run.attempt) == (RunStatus.SUCCEEDED, 1)
    assert run.result == {"ok": True} and calls == [1] and outcomes == [Outcome.SUCCEEDED]
