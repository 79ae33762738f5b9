"""The reconciler and a re-armed run whose message was redriven (found by tests/sim, seed 7)."""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.domain.status import RunStatus
from tests.unit.services.conftest import T0, World


def test_a_re_armed_run_whose_message_was_redriven_is_handed_to_a_workflow_of_its_own(world: World) -> None:
    # Given a one-off whose attempt 1 failed and was handed over ("fail-...-a1"), and that workflow
    # re-armed it (FAILED -> PENDING, attempt 1 kept)
    request = CreateJobRequest(
        type="one_off", handler="demo.flaky", payload={"fail_times": 5}, run_at=T0 + timedelta(seconds=5)
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.deliver()
    sf = times.stored(T0 + timedelta(seconds=5))
    key = (job_id, sf)
    world.runs.rows[key] = world.runs.rows[key].model_copy(update={"status": RunStatus.PENDING})
    assert len(world.machines.started) == 1
    # When its retry message is redriven to the dead-letter queue and the reconciler gets it
    answer = world.svc.failures.reconcile(RunMessage(job_id=job_id, scheduled_for=sf, guard=True))
    # Then the run is FAILED, and a second execution (its own name) dead-letters it; before, the
    # start reused "fail-...-a1", was a no-op, and the run stayed FAILED forever
    run = world.runs.get(job_id, sf)
    assert answer == "dead_lettered" and run is not None and run.status == RunStatus.FAILED
    names = sorted(n for (_, n) in world.machines.started)
    assert len(names) == 2, names
    poison = next(p for (_, n), p in world.machines.started.items() if n.startswith("poison"))
    assert poison["retryable"] is False and poison["attempt"] == 1
