"""The checks accept the legal histories the simulator's faults produce (and still name the illegal)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.limits import Concurrency
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


def _keyed_one_offs(count: int) -> tuple[Any, dict[str, Accepted], list[str]]:
    """A fault-free world with `count` one-offs naming the key "db" (limit 1), and their runs' sf."""
    world = build_world(1)
    world.faults.active = False
    api = world.process("api")
    now = world.loop.instant()
    accepted, sfs = {}, []
    for i in range(count):
        run_at = now + timedelta(seconds=5 + i)
        request = CreateJobRequest(
            type="one_off", handler=HANDLER, run_at=run_at, concurrency=Concurrency(key="db", limit=1)
        )
        job_id = api.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
        accepted[job_id] = Accepted(job_id, request, now)
        sfs.append(times.stored(run_at))
    return world, accepted, sfs


@pytest.mark.parametrize(
    ("second", "stalled", "passed"),
    [
        ((10.0, 20.0), False, True),  # started while the first ran
        ((10.0, 20.0), True, False),  # ... but the first stalled past its lease: taken for dead
        ((30.0, 40.0), False, False),  # started at the first's end: after it
        ((30.0, 30.0), False, False),  # a handler of no time, at the first's end
    ],
    ids=["overlapping", "over a stalled handler", "back to back", "back to back in no time"],
)
def test_more_handlers_of_a_concurrency_key_at_once_than_its_limit_is_a_violation(
    second: tuple[float, float], stalled: bool, passed: bool
) -> None:
    # Given two jobs of the key "db" (limit 1), the first's handler from 5.0 s to 30.0 s, the
    # second's as given; its start is recorded after the first's end where both are at one instant
    world, accepted, sfs = _keyed_one_offs(2)
    (first_job, second_job), ledger = list(accepted), world.ledger
    ledger.calls.append(Call(first_job, sfs[0], attempt=1, start=5.0, end=30.0, ok=True, started=1, ended=2))
    ledger.calls.append(
        Call(second_job, sfs[1], attempt=1, start=second[0], end=second[1], ok=True, started=3, ended=4)
    )
    if stalled:
        ledger.stalled.add((first_job, sfs[0]))
    # When the invariants are checked
    violations = check(world, accepted, load_end=world.loop.instant() + timedelta(minutes=5))
    # Then the key's limit was passed only where a live handler of the key ran when the second started
    over = [v for v in violations if "concurrency key 'db' (limit 1)" in v]
    assert bool(over) is passed, violations
