"""The checks accept the legal histories the simulator's faults produce (and still name the illegal)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from tests.sim.checks import Call, check
from tests.sim.workload import Accepted
from tests.sim.world import HANDLER, build_world


@pytest.mark.parametrize("stalled", [True, False], ids=["stalled past its lease", "live"])
def test_a_cancel_answered_while_a_handler_ran_is_a_violation_unless_that_handler_lost_its_lease(
    stalled: bool,
) -> None:
    # Given a one-off whose handler started at 5.0 s and had not ended when a cancel answered 200 at
    # 100.0 s (seed 1 of a 120-seed sweep: a handler stalled 83 s, its lease and start marker lapsed)
    world = build_world(1)
    world.faults.active = False
    api = world.process("api")
    now = world.loop.instant()
    request = CreateJobRequest(type="one_off", handler=HANDLER, run_at=now + timedelta(seconds=5))
    job_id = api.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    api.svc.job_service.cancel(job_id, tenant="t")
    sf = times.stored(now + timedelta(seconds=5))
    world.ledger.calls.append(Call(job_id, sf, attempt=1, start=5.0))
    world.ledger.cancelled_at[job_id] = 100.0
    if stalled:
        world.ledger.stalled.add((job_id, sf))
    accepted = {job_id: Accepted(job_id, request, now, cancelled_at=now + timedelta(seconds=100))}
    # When the invariants are checked
    violations = check(world, accepted, load_end=now + timedelta(minutes=5))
    # Then a handler that lost its lease (taken for dead) is no broken promise; a live one is
    cancel = f"{job_id}: a cancel answered 200 at 100.00 while run {sf} ran"
    assert (cancel in violations) is not stalled, violations
