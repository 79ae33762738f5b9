"""One-off and recurring jobs through submit -> dispatch -> SQS -> worker, against moto."""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.ports import FakeClock
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import Pump, run_rows


def one_off(seconds_ahead: float, handler: str = "demo.echo", **payload: object) -> CreateJobRequest:
    return CreateJobRequest(
        type="one_off", handler=handler, payload=dict(payload), run_at=T0 + timedelta(seconds=seconds_ahead)
    )


def every_10s() -> CreateJobRequest:
    return CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="*/10 * * * * *")


def test_a_one_off_due_in_5s_is_handed_over_by_the_request_and_succeeds(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a one-off job due in 5 s (before any dispatcher pass could reach it)
    created = svc.job_service.submit(one_off(5, hello="world"), tenant="t1", idempotency_key="k1")
    # Then the request itself handed it to SQS with a 5 s delay and left the due index
    assert pump.svc.queue.requested_delays == [5]  # type: ignore[attr-defined]
    job = svc.jobs.get_job(created.job_id)
    assert job is not None and job.next_run_at is None
    # When the worker receives it at its second
    assert pump.run_due(T0 + timedelta(seconds=5))["succeeded"] == 1
    # Then the run succeeded on its second with the payload as result, and the job completed
    detail = svc.job_service.get(created.job_id, tenant="t1")
    assert detail.job.status == JobStatus.COMPLETED
    [run] = detail.runs
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 1
    assert run.started_at == T0 + timedelta(seconds=5)
    assert run.result == {"hello": "world"}


def test_a_one_off_far_ahead_waits_in_the_due_index_for_the_dispatcher(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    created = svc.job_service.submit(one_off(3600), tenant="t1", idempotency_key=None)
    assert pump.receive_all() == []
    clock.advance(3600 - 60)
    report = svc.dispatcher.dispatch_all()
    assert report.runs_sent == 1
    assert pump.svc.queue.requested_delays == [60]  # type: ignore[attr-defined]
    assert pump.run_due(T0 + timedelta(seconds=3600))["succeeded"] == 1
    # A second pass finds nothing: the job left the index when its only tick was handed over
    assert svc.dispatcher.dispatch_all().runs_sent == 0
    assert svc.jobs.get_job(created.job_id).status == JobStatus.COMPLETED  # type: ignore[union-attr]


def test_a_10_second_cron_fires_every_tick_without_drift(svc: Services, pump: Pump, clock: FakeClock) -> None:
    # Given a 6-field cron every 10 s, created at T0
    created = svc.job_service.submit(every_10s(), tenant="t1", idempotency_key="cron")
    assert created.next_run_at == T0 + timedelta(seconds=10)
    # When three once-a-minute dispatcher passes run, workers being slow (each run late)
    for minute in range(3):
        clock.set(T0 + timedelta(minutes=minute))
        svc.dispatcher.dispatch_all()
        pump.run_due(T0 + timedelta(minutes=minute + 1))
    # Then every tick in those three minutes ran exactly once, on the 10-second grid
    rows = [r for r in run_rows(svc.settings.runs_table, created.job_id) if r["SK"]["S"].startswith("RUN#")]
    scheduled = sorted(
        times.parse_stored(r["scheduled_for"]["S"]) for r in rows if r["status"]["S"] == "SUCCEEDED"
    )
    expected = [T0 + timedelta(seconds=10 * i) for i in range(1, 19)]
    assert scheduled == expected
    assert len({r["SK"]["S"] for r in rows}) == len(rows)
    # and the job waits at the next grid tick after the look-ahead window, whatever the run times were
    job = svc.jobs.get_job(created.job_id)
    assert job is not None and job.next_run_at is not None
    assert (job.next_run_at - T0).total_seconds() % 10 == 0


def test_a_cancelled_job_does_not_fire_its_pre_dispatched_runs(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    created = svc.job_service.submit(every_10s(), tenant="t1", idempotency_key="c")
    assert svc.job_service.cancel(created.job_id, tenant="t1").status == "CANCELLED"
    outcomes = pump.run_due(T0 + timedelta(minutes=2))
    assert outcomes["succeeded"] == 0 and outcomes["duplicate"] + outcomes["cancelled"] > 0
    statuses = {r["status"]["S"] for r in run_rows(svc.settings.runs_table, created.job_id)}
    assert statuses == {"CANCELLED"}
    assert svc.dispatcher.dispatch_all().runs_sent == 0


def test_cancel_is_idempotent_and_refused_while_a_run_is_running(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    import pytest

    from jobsched.domain.records import AttemptEnd, Lease
    from jobsched.errors import Conflict

    created = svc.job_service.submit(one_off(5, "demo.echo"), tenant="t1", idempotency_key="r")
    sf = times.stored(T0 + timedelta(seconds=5))
    lease = Lease(owner="w", message="m", worker="w", until=clock.now() + timedelta(seconds=30))
    assert svc.runs.claim(created.job_id, sf, lease=lease, now=clock.now()).applied
    assert svc.runs.start(created.job_id, sf, owner="w", now=clock.now()).applied
    with pytest.raises(Conflict):
        svc.job_service.cancel(created.job_id, tenant="t1")
    failed = AttemptEnd(attempt=1, started_at=clock.now(), finished_at=clock.now(), error=("E", "failed"))
    assert svc.runs.record(created.job_id, sf, owner="w", end=failed).applied
    assert svc.job_service.cancel(created.job_id, tenant="t1").status == "CANCELLED"
    assert svc.job_service.cancel(created.job_id, tenant="t1").status == "CANCELLED"


def test_a_duplicate_message_for_a_finished_run_is_dropped(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    created = svc.job_service.submit(one_off(5), tenant="t1", idempotency_key="d")
    # The dispatcher's crash window: the same run is sent twice
    from jobsched.adapters.sqs import Outgoing
    from jobsched.domain.models import RunMessage

    svc.queue.send(
        [
            Outgoing(
                RunMessage(job_id=created.job_id, scheduled_for=times.stored(T0 + timedelta(seconds=5))), 5
            )
        ]
    )
    outcomes = pump.run_due(T0 + timedelta(seconds=10))
    assert outcomes["succeeded"] == 1 and outcomes["duplicate"] == 1
    rows = run_rows(svc.settings.runs_table, created.job_id)
    assert [r["status"]["S"] for r in rows] == ["SUCCEEDED"]
