"""A tick of a pause received before its second (found by tests/sim, seed 5)."""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import RunStatus
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World


def test_a_tick_received_early_during_a_pause_still_runs_after_a_resume_before_its_second(
    world: World,
) -> None:
    # Given a per-minute job created at 12:00:00.5, whose 12:01 tick went out at once (SQS delays are
    # whole seconds, rounded down: the message surfaces at 12:00:59.5), and the job is paused
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *", catchup="one")
    world.clock.advance(0.5)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.svc.schedule.pause(job_id, tenant="t")
    # When a worker receives it at 12:00:59.6, and the job is resumed at 12:00:59.8, before the tick
    world.clock.set(T0 + timedelta(seconds=59.6))
    early = world.deliver()
    world.clock.set(T0 + timedelta(seconds=59.8))
    world.svc.schedule.resume(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=65))
    later = world.deliver()
    # Then the early receive left the message queued (the resume counts on it: the tick was not yet
    # missed), and the tick runs. Before, the worker acknowledged it as a tick of the pause and the
    # resume did not replan a tick still in the future: 12:01 never ran and left no row.
    assert early == ["left"]
    assert Outcome.SUCCEEDED in later
    run = world.runs.get(job_id, T0 + timedelta(seconds=60))
    assert run is not None and run.status == RunStatus.SUCCEEDED
