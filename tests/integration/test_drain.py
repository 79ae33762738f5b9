"""The drains and pump_until fail when they should: tests that use them can fail as they mean to.

A check of "exactly once" or "and stays so" means something only after everything that could still
happen has happened. These tests plant what a bug would leave (a message that makes a second run, a
message that never settles) and show the helpers deliver it or fail naming it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from jobsched.adapters.sqs import Outgoing
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.ports import FakeClock
from jobsched.services.run import Delivery, InFlightElsewhere
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import CrashAt, Pump, drain, pump_until, run_rows


def one_off(svc: Services, at: datetime) -> str:
    request = CreateJobRequest(type="one_off", handler="demo.echo", run_at=at)
    return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def a_second_run_of(svc: Services, job_id: str, at: datetime) -> None:
    """Plant what a broken duplicate guard would let through: a message that makes a second run."""
    message = RunMessage(job_id=job_id, scheduled_for=times.stored(at), kind="backfill")
    svc.queue.send([Outgoing(message, 0)])


def assert_exactly_one_run(svc: Services, job_id: str) -> None:
    runs = [r for r in run_rows(svc.settings.runs_table, job_id) if r["SK"]["S"].startswith("RUN#")]
    assert len(runs) == 1, [r["SK"]["S"] for r in runs]


def queued(svc: Services) -> int:
    attrs = svc.queue.client.get_queue_attributes(
        QueueUrl=svc.queue.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


# -- real-time helpers (drain, pump_until), here against in-process moto --------------------------------
def test_pump_until_raises_on_a_condition_never_met(svc: Services) -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.2 s waiting for .*never"):

        def never() -> bool:
            return False

        pump_until(svc, never, timeout=0.2)


def test_drain_delivers_a_planted_second_run_so_the_exactly_once_check_catches_it(svc: Services) -> None:
    # Given a one-off that ran, and a planted message that would make a second run of it
    job_id = one_off(svc, T0)
    pump_until(svc, lambda: len(svc.runs.recent(job_id, limit=5)) == 1)
    drain(svc)
    assert_exactly_one_run(svc, job_id)
    a_second_run_of(svc, job_id, T0 + timedelta(seconds=1))
    assert queued(svc) == 1
    assert_exactly_one_run(svc, job_id)
    # When the test drains instead
    outcomes = drain(svc)
    # Then the planted message was delivered, and the exactly-once check fails as it should
    assert outcomes == {"succeeded": 1} and queued(svc) == 0
    with pytest.raises(AssertionError, match="RUN#"):
        assert_exactly_one_run(svc, job_id)


def test_drain_fails_naming_a_message_that_never_settles(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message every delivery of which is left in the queue (another worker holds it)
    one_off(svc, T0)

    def held_elsewhere(delivery: Delivery) -> Any:
        raise InFlightElsewhere("held by another worker")

    monkeypatch.setattr(svc.worker, "process", held_elsewhere)
    # When a test drains, Then the drain fails and says what is left, instead of returning
    with pytest.raises(AssertionError, match=r"not at rest .* 'in_flight': 1"):
        drain(svc, timeout=0.3)


# -- the fake-clock pump's drain --------------------------------------------------------------------------
def test_pump_drain_delivers_a_planted_second_run_so_the_exactly_once_check_catches_it(
    svc: Services, pump: Pump
) -> None:
    job_id = one_off(svc, T0 + timedelta(seconds=5))
    assert pump.drain(T0 + timedelta(seconds=5)) == {"succeeded": 1}
    assert_exactly_one_run(svc, job_id)
    a_second_run_of(svc, job_id, T0 + timedelta(seconds=6))
    assert pump.drain(T0 + timedelta(seconds=10)) == {"succeeded": 1}
    with pytest.raises(AssertionError, match="RUN#"):
        assert_exactly_one_run(svc, job_id)


def test_pump_drain_fails_on_a_crashed_delivery_unless_told_to_expire_leases(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a worker that dies on the run, once
    job_id = one_off(svc, T0 + timedelta(seconds=5))
    svc.worker.crash = CrashAt("run.after_lease")
    # When a test drains without letting the lease run out, Then the drain fails, naming it
    with pytest.raises(AssertionError, match="1 in flight"):
        pump.drain(T0 + timedelta(seconds=5))
    # and when the scenario says leases expire, the redelivery settles it: one run, succeeded
    assert pump.drain(T0 + timedelta(seconds=5), lease_seconds=svc.settings.lease_seconds) == {"succeeded": 1}
    assert [r.status.value for r in svc.runs.recent(job_id, limit=5)] == ["SUCCEEDED"]
    assert clock.now() > T0 + timedelta(seconds=5 + svc.settings.lease_seconds)


def test_pump_drain_fails_when_a_delivery_crashes_every_time(svc: Services, pump: Pump) -> None:
    one_off(svc, T0 + timedelta(seconds=5))
    svc.worker.crash = CrashAt("run.after_lease", times=1_000)
    with pytest.raises(AssertionError, match=r"did not come to rest .* within 3 rounds"):
        pump.drain(T0 + timedelta(seconds=5), lease_seconds=svc.settings.lease_seconds, max_rounds=3)
