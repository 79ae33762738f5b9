"""A run cancel (POST /api/runs/{id}/cancel) never writes CANCELLED over a run that may have run.

A run held (LEASED or RUNNING) under a lapsed lease is a worker that died or stalled past its claim,
maybe after its handler ran: the row cannot tell. The run cancel used to write it RUNNING -> PENDING
-> CANCELLED (RunStore.cancel takes an expired lease over) and answer 200, though the handler had
run, and its redelivery then found it finished (tests/sim seeds 1, 4, 6: issue 19's run cancels). Now it is
marked cancel-requested (202, stopping), and the redelivery that takes it over records it LOST
instead of running it again; so does a redelivery of a dead fast-path receive whose start marker is
left on the job.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.keys import run_id_for
from jobsched.domain.status import RunStatus
from jobsched.handlers import RunContext
from jobsched.ports import Crash, no_crash
from jobsched.services.run import Outcome
from jobsched.services.runs import RunService
from tests.unit.services.conftest import T0, World

VISIBILITY = 300  # the world's queue and lease: a message not acknowledged surfaces again after this long
RUN_AT = T0 + timedelta(seconds=5)


def _died_after_its_handler(world: World, *, fast_path: bool) -> tuple[str, list[int]]:
    """A one-off whose worker ran the handler and died before recording it: its id, the calls."""
    calls: list[int] = []

    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        return {"ok": True}

    world.handler("test.effect", effect)
    request = CreateJobRequest(type="one_off", handler="test.effect", run_at=RUN_AT)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.svc.worker.fast_path = fast_path
    died = [1]

    def crash(point: str) -> None:
        if point == "run.after_handler" and died:
            died.pop()
            raise Crash(point)

    world.svc.worker.crash = crash
    with pytest.raises(Crash):
        world.deliver()
    world.svc.worker.crash = no_crash
    return job_id, calls


@pytest.mark.parametrize("fast_path", [False, True], ids=["leased", "fast"])
def test_a_run_cancel_of_a_run_whose_worker_died_after_its_handler_marks_it_and_its_redelivery_loses_it(
    world: World, fast_path: bool
) -> None:
    # Given a run whose worker died after its handler ran: the leased path's row RUNNING, the fast
    # path's row not written (its start marker, the slot, left on the job); then its lease and
    # marker lapsed
    job_id, calls = _died_after_its_handler(world, fast_path=fast_path)
    world.clock.advance(VISIBILITY + 1)
    # When a client cancels the run, and its message comes back
    answer = RunService(job_service=world.svc.job_service).cancel(run_id_for(job_id, RUN_AT), tenant="t")
    outcomes = world.deliver()
    # Then the cancel answered "stopping" (202), not CANCELLED (200): the run may have run
    assert answer.stopping and answer.status != RunStatus.CANCELLED
    # And the redelivery did not run the handler again: the run is recorded LOST (before: the
    # leased run was written CANCELLED over its executed handler)
    assert outcomes == [Outcome.LOST] and calls == [1]
    row = world.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.LOST and row.cancel_requested_at is not None


def test_a_run_cancel_of_a_run_not_started_still_cancels_it(world: World) -> None:
    # Given a one-off handed over, not yet received
    calls: list[int] = []
    world.handler("test.effect", lambda payload, ctx: calls.append(ctx.attempt))
    request = CreateJobRequest(type="one_off", handler="test.effect", run_at=RUN_AT)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    # When a client cancels its run, and then the message is received
    answer = RunService(job_service=world.svc.job_service).cancel(run_id_for(job_id, RUN_AT), tenant="t")
    world.clock.advance(5)
    world.deliver()
    # Then it is CANCELLED (200), and its handler never runs
    assert (answer.status, answer.stopping) == (RunStatus.CANCELLED, False)
    assert calls == []
    row = world.runs.get(job_id, times.stored(RUN_AT))
    assert row is not None and row.status == RunStatus.CANCELLED
