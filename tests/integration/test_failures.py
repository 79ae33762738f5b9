"""The failure path against the embedded moto server, with Step Functions executing for real.

Real time here: the failure workflow's Wait state sleeps the backoff, so backoffs are 1 s.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import Backoff, Execution, RunMessage
from jobsched.domain.status import RunStatus
from jobsched.errors import Conflict
from jobsched.handlers import RunContext
from jobsched.services.run import Delivery
from jobsched.wiring import Services
from tests.support import CallCounter, CrashAt, await_workflows, drain, pump_until

__all__ = ["pump_until"]  # it lived here: tests elsewhere may still import it from this module

pytestmark = pytest.mark.slow


class Switch:
    """A handler that fails while `failing` is set (the cause an operator fixes before a replay)."""

    def __init__(self) -> None:
        self.failing = True
        self.calls: list[tuple[str, int]] = []

    def __call__(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        self.calls.append((ctx.effect_key, ctx.attempt))
        if self.failing:
            raise RuntimeError("switch is off")
        return {"ok": True}


@pytest.fixture
def svc(served: Services) -> Services:
    return served


def submit(svc: Services, handler: str, payload: dict[str, Any] | None = None, **policy: Any) -> str:
    request = CreateJobRequest(
        type="one_off",
        handler=handler,
        payload=payload or {},
        run_at=datetime.now(UTC),
        backoff=Backoff(initial_seconds=1, multiplier=1, max_seconds=1, jitter=False),
        **policy,
    )
    return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def the_run(svc: Services, job_id: str) -> Execution:
    [run] = svc.runs.recent(job_id, limit=5)
    return run


def status_is(svc: Services, job_id: str, *statuses: RunStatus) -> Callable[[], bool]:
    return lambda: bool(svc.runs.recent(job_id, limit=1)) and the_run(svc, job_id).status in statuses


def executions(svc: Services) -> list[dict[str, Any]]:
    sfn = svc.failures.state_machines.client
    return list(sfn.list_executions(stateMachineArn=svc.settings.failure_workflow_arn)["executions"])


def transitions(svc: Services) -> int:
    """State transitions billed so far: states entered, over every execution."""
    sfn = svc.failures.state_machines.client
    total = 0
    for ex in executions(svc):
        events = sfn.get_execution_history(executionArn=ex["executionArn"], maxResults=1000)["events"]
        total += sum(e["type"].endswith("StateEntered") for e in events)
    return total


def wait_executions_done(svc: Services, timeout: float = 10) -> None:
    await_workflows(svc, timeout=timeout)


def test_a_failing_job_is_dead_lettered_after_exactly_max_attempts_with_backoff(svc: Services) -> None:
    alerts = svc.queue.client.create_queue(QueueName=f"alerts-{time.time_ns()}")["QueueUrl"]
    alerts_arn = svc.queue.client.get_queue_attributes(QueueUrl=alerts, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    svc.sns.subscribe(TopicArn=svc.settings.alert_topic_arn, Protocol="sqs", Endpoint=alerts_arn)  # type: ignore[attr-defined]
    job_id = submit(svc, "demo.fail", max_attempts=3)
    pump_until(svc, status_is(svc, job_id, RunStatus.DEAD_LETTER))
    run = the_run(svc, job_id)
    assert run.attempt == 3 and [a.attempt for a in run.attempts] == [1, 2, 3]
    assert all(a.outcome == "FAILED" and a.error and a.error.type == "DemoFailure" for a in run.attempts)
    starts = [a.started_at for a in run.attempts]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts) if a and b]
    assert len(gaps) == 2 and all(gap >= 1.0 for gap in gaps), gaps
    page = svc.failures.list_dead_letters(tenant="t", cursor=None, limit=10)
    assert [(i.run_id, i.attempt) for i in page.items] == [(run.run_id, 3)]
    assert page.items[0].error_type == "DemoFailure"
    assert (page.items[0].error_message or "").startswith("demo.fail always fails")
    wait_executions_done(svc)
    [alert] = svc.queue.client.receive_message(QueueUrl=alerts, WaitTimeSeconds=0).get("Messages", [])
    assert json.loads(json.loads(alert["Body"])["Message"])["run_id"] == run.run_id


def test_a_flaky_job_succeeds_on_its_third_attempt_and_costs_two_workflows(svc: Services) -> None:
    job_id = submit(svc, "demo.flaky", {"fail_times": 2}, max_attempts=3)
    pump_until(svc, status_is(svc, job_id, RunStatus.SUCCEEDED))
    run = the_run(svc, job_id)
    assert run.attempt == 3 and [a.outcome for a in run.attempts] == ["FAILED", "FAILED", "SUCCEEDED"]
    wait_executions_done(svc)
    assert len(executions(svc)) == 2
    # Route, CanRetry, Backoff, Rearm, Enqueue, Done per failed attempt
    assert transitions(svc) == 12


def test_a_run_that_succeeds_on_its_third_attempt_shows_no_top_level_error(svc: Services) -> None:
    # Given a job whose first two attempts fail
    job_id = submit(svc, "demo.flaky", {"fail_times": 2}, max_attempts=3)
    # When its third attempt succeeds
    pump_until(svc, status_is(svc, job_id, RunStatus.SUCCEEDED))
    # Then the run's own error is gone (the row, the job view, the runs listing), and each failed
    # attempt still carries its error in the attempts list
    run = the_run(svc, job_id)
    assert run.error is None
    assert [a.error.type if a.error else None for a in run.attempts] == ["DemoFailure", "DemoFailure", None]
    [shown] = svc.job_service.get(job_id, tenant="t").runs
    assert shown.error is None and shown.status == "SUCCEEDED"
    [listed] = svc.schedule.history(
        job_id, tenant="t", start=None, end=None, status=None, cursor=None, limit=5
    ).items
    assert listed.error is None


def test_a_replayed_run_that_succeeds_shows_no_top_level_error(svc: Services) -> None:
    # Given a dead-lettered run whose cause is then fixed
    switch = Switch()
    svc.worker.registry.register("test.switch", switch)
    svc.job_service.registry = svc.worker.registry
    job_id = submit(svc, "test.switch", max_attempts=1)
    pump_until(svc, status_is(svc, job_id, RunStatus.DEAD_LETTER))
    assert the_run(svc, job_id).error is not None
    switch.failing = False
    # When it is replayed and succeeds
    svc.failures.replay(the_run(svc, job_id).run_id, tenant="t")
    pump_until(svc, status_is(svc, job_id, RunStatus.SUCCEEDED))
    # Then its top-level error is cleared; the failed attempt keeps its own
    run = the_run(svc, job_id)
    assert run.error is None
    assert [a.outcome for a in run.attempts] == ["FAILED", "SUCCEEDED"]
    assert run.attempts[0].error is not None and run.attempts[0].error.message == "switch is off"


def test_a_healthy_run_starts_no_workflow(svc: Services) -> None:
    counter = CallCounter(svc.failures.state_machines.client)
    job_id = submit(svc, "demo.echo")
    pump_until(svc, status_is(svc, job_id, RunStatus.SUCCEEDED))
    assert counter.calls["SFN.StartExecution"] == 0 and executions(svc) == []


def test_a_handler_over_its_timeout_fails_as_a_timeout_and_is_retried(svc: Services) -> None:
    job_id = submit(svc, "demo.sleep", {"seconds": 3}, max_attempts=2, timeout_seconds=1)
    pump_until(svc, status_is(svc, job_id, RunStatus.DEAD_LETTER), timeout=40)
    run = the_run(svc, job_id)
    assert [a.error.type for a in run.attempts if a.error] == ["Timeout", "Timeout"]
    assert run.attempt == 2


def test_a_non_retryable_error_dead_letters_at_once(svc: Services) -> None:
    job_id = submit(svc, "demo.fail", max_attempts=5, non_retryable_errors=["DemoFailure"])
    pump_until(svc, status_is(svc, job_id, RunStatus.DEAD_LETTER))
    assert the_run(svc, job_id).attempt == 1


def test_a_worker_dying_after_recording_a_failure_still_hands_it_over(svc: Services) -> None:
    job_id = submit(svc, "demo.fail", max_attempts=1)
    sqs = svc.queue.client
    [m] = sqs.receive_message(QueueUrl=svc.queue.queue_url, WaitTimeSeconds=2).get("Messages", [])
    svc.worker.crash = CrashAt("run.after_record")
    with pytest.raises(BaseException, match=r"run\.after_record"):
        svc.worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
    assert the_run(svc, job_id).status == RunStatus.FAILED and executions(svc) == []
    # the message surfaces again (visibility timeout: the leases have lapsed); its redelivery
    # starts the workflow
    expire_lease(svc, job_id, times.stored(the_run(svc, job_id).scheduled_for))
    svc.worker.crash = lambda point: None
    svc.worker.process(Delivery(m["MessageId"], "redelivered", m["Body"]))
    wait_executions_done(svc)
    assert the_run(svc, job_id).status == RunStatus.DEAD_LETTER and len(executions(svc)) == 1
    svc.worker.process(Delivery(m["MessageId"], "again", m["Body"]))  # a third delivery: nothing new
    wait_executions_done(svc)
    assert len(executions(svc)) == 1


def test_replay_after_the_cause_is_fixed_succeeds_and_a_double_replay_runs_once(svc: Services) -> None:
    switch = Switch()
    svc.worker.registry.register("test.switch", switch)
    svc.job_service.registry = svc.worker.registry
    job_id = submit(svc, "test.switch", max_attempts=2)
    pump_until(svc, status_is(svc, job_id, RunStatus.DEAD_LETTER))
    run_id = the_run(svc, job_id).run_id
    switch.failing = False
    # two operators replay at once
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(svc.failures.replay(run_id, tenant="t")))
        for _ in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    pump_until(svc, status_is(svc, job_id, RunStatus.SUCCEEDED))
    # and everything either replay set going is delivered: a second run would show below
    drain(svc)
    run = the_run(svc, job_id)
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 1 and run.replays == 1
    assert [c for c in switch.calls if c[1] == 1][-1:] and sum(
        1 for _ in switch.calls
    ) == 3  # 2 failed + 1 replay
    assert svc.failures.list_dead_letters(tenant="t", cursor=None, limit=10).items == []
    with pytest.raises(Exception, match="not DEAD_LETTER"):
        svc.failures.replay(run_id, tenant="t")


def test_a_dead_lettered_one_off_shows_its_job_failed_and_a_replay_that_succeeds_completes_it(
    svc: Services,
) -> None:
    # Given a one-off whose only run is dead-lettered
    switch = Switch()
    svc.worker.registry.register("test.switch", switch)
    svc.job_service.registry = svc.worker.registry
    job_id = submit(svc, "test.switch", max_attempts=1)
    pump_until(svc, status_is(svc, job_id, RunStatus.DEAD_LETTER))
    wait_executions_done(svc)
    # Then its job says so, and the controls that need a live job answer 409
    assert svc.job_service.get(job_id, tenant="t").job.status == "FAILED"
    with pytest.raises(Conflict, match="already failed"):
        svc.job_service.cancel(job_id, tenant="t")
    with pytest.raises(Conflict, match="FAILED"):
        svc.schedule.run_now(job_id, tenant="t")
    # When the cause is fixed and the run replayed to success
    switch.failing = False
    svc.failures.replay(the_run(svc, job_id).run_id, tenant="t")
    pump_until(svc, status_is(svc, job_id, RunStatus.SUCCEEDED))
    # Then the job was scheduled again before its run, and completed with it
    assert svc.job_service.get(job_id, tenant="t").job.status == "COMPLETED"


def test_a_lost_lease_on_a_non_idempotent_job_is_marked_lost(svc: Services) -> None:
    job_id = submit(svc, "demo.echo", idempotent=False)
    sqs = svc.queue.client
    [m] = sqs.receive_message(QueueUrl=svc.queue.queue_url, WaitTimeSeconds=2).get("Messages", [])
    svc.worker.crash = CrashAt("run.after_lease")
    with pytest.raises(BaseException, match="after_lease"):
        svc.worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
    svc.worker.crash = lambda point: None
    sf = times.stored(the_run(svc, job_id).scheduled_for)
    expire_lease(svc, job_id, sf)
    outcome = svc.worker.process(Delivery(m["MessageId"], "redelivered", m["Body"]))
    assert outcome.value == "lost" and the_run(svc, job_id).status == RunStatus.LOST


def test_a_run_whose_workers_keep_dying_is_dead_lettered(svc: Services) -> None:
    # On the leased path every dead worker's attempt is on the row, and they use up max_attempts.
    # (On the fast path a death before the write leaves no trace: the queue's redrive limit bounds
    # the repeats and the reconciler dead-letters the run: the next test.)
    svc.worker.fast_path = False
    job_id = submit(svc, "demo.echo", max_attempts=2)
    sqs = svc.queue.client
    [m] = sqs.receive_message(QueueUrl=svc.queue.queue_url, WaitTimeSeconds=2).get("Messages", [])
    sf = times.stored(the_run(svc, job_id).scheduled_for)
    svc.worker.crash = CrashAt("run.after_lease", times=2)
    for _ in range(2):
        with pytest.raises(BaseException, match="after_lease"):
            svc.worker.process(Delivery(m["MessageId"], "r", m["Body"]))
        expire_lease(svc, job_id, sf)
    svc.worker.process(Delivery(m["MessageId"], "r3", m["Body"]))
    wait_executions_done(svc)
    run = the_run(svc, job_id)
    assert run.status == RunStatus.DEAD_LETTER and run.error and run.error.type == "LeaseExpired"
    # (what happened, and no more: attempts that failed in their handlers are not deaths)
    assert run.error.message == (
        "the worker of attempt 2 died holding this run, and max_attempts (2) is used up"
    )


def test_the_reconciler_dead_letters_a_poison_message(svc: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobsched.local import events, lambdas

    job_id = submit(svc, "demo.echo")
    sqs = svc.queue.client
    [m] = sqs.receive_message(QueueUrl=svc.queue.queue_url, WaitTimeSeconds=2).get("Messages", [])
    svc.worker.crash = CrashAt("run.after_lease")
    with pytest.raises(BaseException, match="after_lease"):
        svc.worker.process(Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"]))
    # SQS gave up on the message (maxReceiveCount): it sits in the DLQ; the reconciler Lambda gets it
    for key, value in svc.settings.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", svc.queue.client.meta.endpoint_url)
    reconciler = lambdas.load("reconciler")
    event = events.sqs_event(
        [{**m, "MessageId": "dlq-1"}], queue_arn="arn:aws:sqs:us-east-1:000000000000:dlq"
    )
    assert reconciler.lambda_handler(event, lambdas.LambdaContext("reconciler")) == {"batchItemFailures": []}
    wait_executions_done(svc)
    run = the_run(svc, job_id)
    assert run.status == RunStatus.DEAD_LETTER and run.error and run.error.type == "PoisonMessage"


def expire_lease(svc: Services, job_id: str, sf: str) -> None:
    """Time passes beyond the lease (the row's clock; SQS's is played by redelivering by hand)."""
    past = times.stored(datetime.now(UTC) - timedelta(seconds=1))
    svc.runs.client.update_item(
        TableName=svc.settings.runs_table,
        Key={"PK": {"S": f"JOB#{job_id}"}, "SK": {"S": f"RUN#{sf}"}},
        UpdateExpression="SET lease_until = :past",
        ExpressionAttributeValues={":past": {"S": past}},
    )
    # The run's start marker on its job has a lease too, and it lapses with the same time: else a
    # redelivery meets its own live hold and is taken for a twin delivery (left to its visibility).
    with contextlib.suppress(svc.jobs.client.exceptions.ConditionalCheckFailedException):  # no slot held
        svc.jobs.client.update_item(
            TableName=svc.settings.jobs_table,
            Key={"PK": {"S": f"JOB#{job_id}"}, "SK": {"S": "META"}},
            UpdateExpression="SET active_until = :past",
            ConditionExpression="attribute_exists(active_run)",
            ExpressionAttributeValues={":past": {"S": past}},
        )


def test_run_message_is_what_the_workflow_re_enqueues(svc: Services) -> None:
    # The workflow sends the same body the dispatcher does, so workers need no second format.
    body = RunMessage(job_id="job_x", scheduled_for="2026-01-01T00:00:00.000Z").model_dump_json()
    assert RunMessage.model_validate_json(body).scheduled_for == "2026-01-01T00:00:00.000Z"


def test_two_workers_racing_for_overlapping_ticks_run_one_and_skip_the_other(svc: Services) -> None:
    """Real threads, real moto server: the overlap guard is a compare-and-set, not a read-then-write."""
    started = threading.Barrier(2)
    calls: list[str] = []
    one_returned = threading.Event()

    def slow(payload: dict[str, Any], ctx: RunContext) -> None:
        # Runs until the other worker has returned: the two overlap for certain. (Were both let
        # in, neither returns first: each waits out the timeout, and the check below fails.)
        calls.append(ctx.scheduled_for.isoformat())
        one_returned.wait(timeout=10)

    svc.worker.registry.register("test.slow", slow)
    svc.job_service.registry = svc.worker.registry
    request = CreateJobRequest(
        type="recurring", handler="test.slow", cron_expr="*/10 * * * * *", overlap_policy="skip"
    )
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    # two ticks' runs, both due, delivered to two workers at the same moment
    now = datetime.now(UTC).replace(microsecond=0)
    last = now - timedelta(seconds=now.second % 10)  # ticks of the job's schedule (*/10 s)
    ticks = [last - timedelta(seconds=20), last - timedelta(seconds=10)]
    bodies = []
    for tick in ticks:
        svc.runs.put_pending(job_id=job_id, tenant="t", scheduled_for=tick, now=now)
        bodies.append(RunMessage(job_id=job_id, scheduled_for=times.stored(tick)).model_dump_json())
    outcomes: list[str] = []

    def work(i: int) -> None:
        started.wait()
        outcomes.append(svc.worker.process(Delivery(f"m{i}", f"r{i}", bodies[i])).value)
        one_returned.set()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(outcomes) == ["skipped", "succeeded"] and len(calls) == 1
    statuses = sorted(svc.runs.get(job_id, t).status.value for t in ticks)  # type: ignore[union-attr]
    assert statuses == ["SKIPPED", "SUCCEEDED"]
    assert svc.jobs.get_job(job_id).active_run is None  # type: ignore[union-attr]
