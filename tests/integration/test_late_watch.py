"""A run that never starts is alerted late through moto: the dispatcher's pass reads the job's alert
policy from the due index, hands the tick over with its late watch, and the watch raises "late"."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pydantic

from jobsched.domain.alerts import AlertPolicy, LateWatch, is_late_watch
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.ports import FakeClock
from jobsched.services.run import Delivery, Outcome
from jobsched.wiring import Services
from tests.conftest import T0
from tests.support import use_clocked_queue


def deliver_watches_only(svc: Services) -> list[Outcome]:
    """Every queued late watch to the worker; each run message left received and unprocessed."""
    sqs = boto3.client("sqs")
    outcomes = []
    while got := sqs.receive_message(QueueUrl=svc.queue.queue_url, MaxNumberOfMessages=10).get("Messages"):
        for m in got:
            if is_late_watch(m["Body"]):
                outcomes.append(svc.worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"])))
                sqs.delete_message(QueueUrl=svc.queue.queue_url, ReceiptHandle=m["ReceiptHandle"])
    return outcomes


def test_an_hourly_tick_that_never_starts_is_alerted_late_by_its_watch(
    svc: Services, clock: FakeClock
) -> None:
    queue = use_clocked_queue(svc)  # SQS's delays played by the fake clock
    # Given an hourly job (first tick 13:00) that alerts when a run has not started 60 s after its tick
    policy = AlertPolicy(on=("late",), late_after_seconds=60)
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="0 * * * *", alerts=policy)
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    # When the dispatcher's pass at 12:59:30 hands the tick over (from the due index)
    clock.set(T0 + timedelta(minutes=59, seconds=30))
    assert svc.dispatcher.dispatch_all().runs_sent == 1
    assert [type(m).__name__ for m in queue.sent] == ["RunMessage", "LateWatch"]
    assert queue.requested_delays == [30, 91]
    # and at 13:01:30 the run has not started (its message waits), when its watch is delivered
    clock.set(T0 + timedelta(minutes=61, seconds=30))
    assert deliver_watches_only(svc) == [Outcome.WATCHED]
    # Then the tenant's alerts list one "late" about that tick, saying it has not started
    assert svc.alerts is not None
    alerts, _ = svc.alerts.store.recent("t", since=None, start=None, limit=10)
    tick = T0 + timedelta(hours=1)
    assert [(a.kind, a.job_id, a.scheduled_for) for a in alerts] == [("late", job_id, tick)]
    assert alerts[0].detail.startswith("not started 90 s")
    # and no run row was written by the watch: the run is still the worker's to start
    assert svc.runs.get(job_id, T0 + timedelta(hours=1)) is None


def test_the_watch_is_a_message_no_run_reader_takes_for_a_run() -> None:
    # Given a late watch's body
    body = LateWatch(late_watch="2026-11-30T13:00:00.000Z", job_id="j", due="2026-11-30T13:01:01.000Z")
    # Then it is known as a watch, and it is not a RunMessage (it names no scheduled_for)
    assert is_late_watch(body.model_dump_json())
    try:
        RunMessage.model_validate_json(body.model_dump_json())
    except pydantic.ValidationError:
        return
    raise AssertionError("a late watch parsed as a RunMessage")
