"""A start kept on a holder's row always has a message to finish its run (tests/sim seeds 2521, 5050).

A tick that takes over a lapsed slot keeps the holder's start on the holder's row (RUNNING under a
lapsed lease: Worker._keep_dead_holders_start), and counts on the holder's redelivery to take it
over. But the holder's message may be gone: SQS handed it out twice, one receive stopped at the
run's gate (the job was paused) and acknowledged it, and the other's hold outlived it, its release
failed. The kept row then stayed RUNNING for good, with nothing left to move it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import RunStatus
from jobsched.errors import TransientStoreError
from jobsched.services.run import Delivery, Outcome
from tests.unit.services.conftest import T0, World


def test_a_kept_start_whose_holders_message_is_gone_is_taken_over_by_a_copy(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a job every 10 s (skip, catch-up all), paused at 12:00:05
    request = CreateJobRequest(
        type="recurring", handler="demo.echo", cron_expr="*/10 * * * * *", catchup="all"
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.set(T0 + timedelta(seconds=5))
    world.svc.schedule.pause(job_id, tenant="t")
    # And its 12:00:10 message handed out twice: one receive stops at the pause and acknowledges it,
    # the other holds the slot, stops at the pause too, and its release fails
    world.clock.set(T0 + timedelta(seconds=10))
    [m] = world.queue.receive()
    delivery = Delivery(m.message_id, m.receipt_handle, m.body)
    assert world.svc.worker.process(delivery) == Outcome.PAUSED
    world.queue.delete(m.receipt_handle)
    release = world.jobs.release_job

    def fails(*args: object, **kwargs: object) -> object:
        raise TransientStoreError("release failed")

    monkeypatch.setattr(world.jobs, "release_job", fails)
    with pytest.raises(TransientStoreError):
        world.svc.worker.process(delivery)
    monkeypatch.setattr(world.jobs, "release_job", release)
    # When the job is resumed once that hold lapsed (the lapsed marker on the job reads as a start:
    # the resume's catch-up leaves 12:00:10 to it), and a later tick takes the slot over
    world.clock.advance(world.svc.worker.hold_seconds() + 1)
    world.svc.schedule.resume(job_id, tenant="t")
    world.svc.dispatcher.dispatch_all()
    while world.deliver():
        pass
    # Then the taker kept 12:00:10's start (it may have run), and a copy of its message, delayed
    # past the visibility timeout, took the run over: it ran as a retry. Before, the row stayed
    # RUNNING for good, with no message left to move it.
    for _ in range(3):
        world.clock.advance(world.svc.worker.settings.lease_seconds + 1)
        world.svc.dispatcher.dispatch_all()
        while world.deliver():
            pass
    row = world.runs.get(job_id, times.stored(T0 + timedelta(seconds=10)))
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 2
