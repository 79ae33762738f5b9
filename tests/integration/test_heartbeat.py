"""A heartbeat outlives a fault: one throttle or timeout on one renewal neither skips the others nor
ends the heartbeat, so a long run keeps its slot (found by the chaos harness: a dead heartbeat let a
`skip` job's slot lapse mid-run, and its next tick ran beside it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from botocore.exceptions import ReadTimeoutError

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.errors import TransientStoreError
from jobsched.handlers import HandlerRegistry, RunContext
from jobsched.ports import FakeClock
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import Pump


def test_a_heartbeat_whose_renewals_fault_keeps_the_slot_and_keeps_beating(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a `skip` job whose run beats at +10 s and +20 s, and faults on its first renewals
    faults: list[str] = []
    real_extend, real_hold = svc.worker.queue.extend, svc.jobs.extend_hold

    def flaky_extend(*args: Any, **kw: Any) -> bool:
        if not faults:
            faults.append("sqs")
            raise ReadTimeoutError(endpoint_url="test")
        return real_extend(*args, **kw)

    def flaky_hold(*args: Any, **kw: Any) -> bool:
        if len(faults) == 1:
            faults.append("dynamodb")
            raise TransientStoreError("throttled")
        return real_hold(*args, **kw)

    svc.worker.queue.extend = flaky_extend  # type: ignore[method-assign]
    svc.jobs.extend_hold = flaky_hold  # type: ignore[method-assign]
    seen: list[Any] = []

    def long(payload: dict[str, Any], ctx: RunContext) -> None:
        for _ in range(2):
            clock.advance(10)
            ctx.heartbeat()  # raises nothing, whatever its renewals met
            seen.append(svc.jobs.get_job(ctx.job_id).active_until)  # type: ignore[union-attr]

    # When it runs
    _run_a_minute_skip_job(svc, pump, long)
    # Then both faults were met, retried, and the slot was renewed at each beat
    assert faults == ["sqs", "dynamodb"]
    hold = svc.worker.hold_seconds()
    assert seen == [T0 + timedelta(seconds=60 + 10 + hold), T0 + timedelta(seconds=60 + 20 + hold)]


def test_a_second_receive_of_a_running_message_leaves_the_first_its_slot(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a `skip` job's run, beating (its row RUNNING), whose message SQS hands out again meanwhile
    # (its visibility ran out): the same message id, a second receive
    from jobsched.services.run import Delivery, InFlightElsewhere

    deliveries: list[Delivery] = []
    inner: list[str] = []

    def long(payload: dict[str, Any], ctx: RunContext) -> None:
        clock.advance(10)
        ctx.heartbeat()
        try:
            svc.worker.process(deliveries[0])
        except InFlightElsewhere as exc:
            inner.append(type(exc).__name__)
        job = svc.jobs.get_job(ctx.job_id)
        assert job is not None
        inner.append(f"slot={job.active_run == times.stored(ctx.scheduled_for)}")

    handlers = HandlerRegistry()
    handlers.register("t.long", long)
    svc.worker.registry = svc.job_service.registry = handlers
    request = CreateJobRequest(type="recurring", handler="t.long", cron_expr="0 * * * * *")
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    [m] = pump.receive_all()
    deliveries.append(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
    clock.set(T0 + timedelta(minutes=1))
    # When the first receive runs it, and the second arrives mid-run
    assert svc.worker.process(deliveries[0]).value == "succeeded"
    # Then the second backed off and the first still held the job's slot after it (it used to be
    # freed by the second's back-off, and the job's next tick could have started beside the run)
    assert inner == ["InFlightElsewhere", "slot=True"]
    assert svc.job_service.get(job_id, tenant="t").runs[0].status == "SUCCEEDED"


def test_a_beat_whose_slot_renewal_fails_twice_leaves_the_slot_held_until_the_next_beat(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a `skip` job whose run beats every lease/3 s and whose second beat's slot renewal fails
    # on both of its tries (a throttle burst; found by the chaos harness, seed 1 in CI)
    real_hold = svc.jobs.extend_hold
    calls: list[str] = []

    def burst(*args: Any, **kw: Any) -> bool:
        calls.append("extend_hold")
        if len(calls) in (2, 3):
            raise TransientStoreError("throttled")
        return real_hold(*args, **kw)

    svc.jobs.extend_hold = burst  # type: ignore[method-assign]
    beat = svc.worker.settings.lease_seconds // 3
    holders: list[str | None] = []

    def long(payload: dict[str, Any], ctx: RunContext) -> None:
        for _ in range(2):
            clock.advance(beat)
            ctx.heartbeat()
        # just before the third beat (the second failed), another worker looks at the slot: it is
        # still held, so a later tick may not start
        clock.advance(beat - 1)
        job = svc.jobs.get_job(ctx.job_id)
        assert job is not None
        live = job.active_until is not None and job.active_until > clock.now()
        holders.append(job.active_run if live else None)
        ctx.heartbeat()

    # When it runs
    _run_a_minute_skip_job(svc, pump, long)
    # Then the failed beat cost nothing: the slot was still this run's when the next beat came
    assert calls.count("extend_hold") == 4
    assert holders == [times.stored(T0 + timedelta(minutes=1))]


def _run_a_minute_skip_job(svc: Services, pump: Pump, handler: Any) -> None:
    """Run `handler` as the 12:01 tick of a per-minute `skip` job; it succeeds."""
    handlers = HandlerRegistry()
    handlers.register("t.long", handler)
    svc.worker.registry = svc.job_service.registry = handlers
    request = CreateJobRequest(type="recurring", handler="t.long", cron_expr="0 * * * * *")
    svc.job_service.submit(request, tenant="t", idempotency_key=None)
    assert pump.run_due(T0 + timedelta(minutes=1))["succeeded"] == 1
