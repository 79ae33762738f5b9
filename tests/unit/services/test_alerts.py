"""The scheduler's own alert detection (services/alerts.py), on the in-memory fakes: each kind, the
job without a policy, redelivery (one alert), and a failed publish (the run's outcome unchanged)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.adapters.memory import MemoryAlertPublisher, MemoryAlertStore
from jobsched.domain import times
from jobsched.domain.alerts import Alert, LateWatch, is_late_watch
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import RunStatus
from jobsched.errors import TransientStoreError
from jobsched.ports import Crash
from jobsched.services.run import Delivery, Outcome
from tests.unit.services.conftest import T0, World


def submit(world: World, **fields: Any) -> str:
    request = CreateJobRequest.model_validate({"handler": "demo.echo", **fields})
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def one_off(world: World, seconds: float = 5, **fields: Any) -> str:
    return submit(world, type="one_off", run_at=(T0 + timedelta(seconds=seconds)).isoformat(), **fields)


def every_minute(world: World, **fields: Any) -> str:
    return submit(world, type="recurring", cron_expr="* * * * *", **fields)


def published(world: World) -> list[Alert]:
    assert world.svc.alerts is not None
    publisher = world.svc.alerts.publisher
    assert isinstance(publisher, MemoryAlertPublisher)
    return publisher.published


def kept(world: World) -> list[Alert]:
    assert world.svc.alerts is not None
    store = world.svc.alerts.store
    assert isinstance(store, MemoryAlertStore)
    return list(store.kept.values())


def kinds(alerts: list[Alert]) -> list[tuple[str, str]]:
    return [(a.kind, a.job_id) for a in alerts]


def failure_inputs(world: World) -> list[dict[str, Any]]:
    return list(world.machines.started.values())


# -- failed ------------------------------------------------------------------------------------------
def test_a_failed_attempt_raises_one_failed_alert_naming_the_run_and_its_error(world: World) -> None:
    # Given a one-off that alerts on failures and always fails
    job_id = one_off(world, handler="demo.fail", alerts={"on": ["failed"]})
    # When its attempt runs and fails
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    # Then one "failed" alert is kept and published, about this run, naming the error
    [alert] = published(world)
    assert (alert.kind, alert.job_id, alert.tenant) == ("failed", job_id, "t")
    assert alert.run_id == f"{job_id}-{int((T0 + timedelta(seconds=5)).timestamp() * 1000)}"
    assert "DemoFailure" in alert.detail and "(retried)" in alert.detail
    assert kept(world) == [alert]


def test_the_same_failure_handed_over_again_raises_no_second_alert(world: World) -> None:
    # Given a failed run whose failure raised its alert
    job_id = one_off(world, handler="demo.fail", alerts={"on": ["failed"]})
    world.clock.advance(5)
    world.deliver()
    job = world.jobs.get_job(job_id)
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert job is not None and run is not None and run.status == RunStatus.FAILED
    # When the same failure is handed over again (a redelivery, the reconciler)
    world.svc.failures.hand_over(job, run)
    world.svc.failures.hand_over(job, run, origin="poison")
    # Then there is still one alert
    assert kinds(published(world)) == [("failed", job_id)]


# -- the job without a policy ------------------------------------------------------------------------
def test_a_job_without_alerts_raises_none_of_the_kinds_it_did_not_ask_for(world: World) -> None:
    # Given a failing one-off and a deadline-bound recurring job, neither with an alert policy
    one_off(world, handler="demo.fail")
    every_minute(world, starting_deadline_seconds=5)
    # When the one-off fails, and the recurring job's tick is received far too late
    world.svc.dispatcher.dispatch_all()
    world.clock.advance(200)
    world.deliver()
    world.svc.dispatcher.dispatch_all()
    # Then nothing is kept or published
    assert published(world) == [] and kept(world) == []
    # and the failure workflow is still told to alert on a dead letter, as the topic always did
    assert [p["alert_wanted"] for p in failure_inputs(world)] == [True]


# -- dead_letter -------------------------------------------------------------------------------------
def test_the_failure_workflow_is_told_whether_the_job_wants_its_dead_letter_alert(world: World) -> None:
    # Given a job that alerts on failures only, and one that alerts on dead letters too
    quiet = one_off(world, handler="demo.fail", alerts={"on": ["failed"]})
    loud = one_off(world, seconds=6, handler="demo.fail", alerts={"on": ["dead_letter"]})
    # When both fail
    world.clock.advance(6)
    world.deliver()
    # Then the workflow input of the first does not ask for the alert, the second's does, and the
    # message it would publish names its run and kind (no alerts table here: nothing to record first)
    by_job = {p["alert"]["job_id"]: p for p in failure_inputs(world)}
    assert by_job[quiet]["alert_wanted"] is False and by_job[loud]["alert_wanted"] is True
    assert by_job[loud]["alert"]["kind"] == "dead_letter"
    assert by_job[loud]["alert"]["alert_id"] == f"{by_job[loud]['alert']['run_id']}.dead_letter"
    assert by_job[loud]["record_alert"] is False and by_job[loud]["alert_item"] == {}
    # and the worker itself published only the first job's "failed" (the workflow publishes the rest)
    assert kinds(published(world)) == [("failed", quiet)]


# -- late ---------------------------------------------------------------------------------------------
def test_a_run_that_starts_later_than_late_after_seconds_raises_late_once(world: World) -> None:
    # Given a one-off due at T0+5 s that is late after 30 s, handed over on time
    job_id = one_off(world, alerts={"on": ["late"], "late_after_seconds": 30})
    # When no worker receives it before T0+95 s (a throttled mapping): then its late watch comes after
    # it, and finds it started
    world.clock.advance(95)
    assert world.deliver() == [Outcome.SUCCEEDED, Outcome.WATCHED]
    # Then one "late" alert says by how much
    [alert] = published(world)
    assert (alert.kind, alert.job_id) == ("late", job_id) and alert.detail.startswith("started 90 s")
    # When a second copy of its message arrives
    sf = times.stored(T0 + timedelta(seconds=5))
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=sf, guard=True), 0)])
    assert world.deliver() == [Outcome.DUPLICATE]
    # Then there is still one alert
    assert len(published(world)) == 1


def test_a_run_that_starts_within_late_after_seconds_raises_nothing(world: World) -> None:
    # Given a one-off that is late after 30 s
    one_off(world, alerts={"on": ["late"], "late_after_seconds": 30})
    # When it starts 20 s after its tick
    world.clock.advance(25)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then no alert
    assert published(world) == []


def test_a_tick_handed_over_already_late_raises_late_from_the_dispatcher(world: World) -> None:
    # Given a minute job that is late after 60 s, whose dispatcher was down for 5 minutes, catch-up "all"
    job_id = every_minute(world, catchup="all", alerts={"on": ["late"], "late_after_seconds": 60})
    world.clock.advance(5 * 60 + 10)
    # When the next pass hands its missed ticks over, before any worker starts them
    world.svc.dispatcher.dispatch_all()
    # Then each tick it hands over already more than 60 s past is late, with nothing started yet
    # (the first tick went out on time, with the job's creation: it is the worker's to judge)
    late = sorted(a.scheduled_for for a in published(world))
    assert {a.kind for a in published(world)} == {"late"} and {a.job_id for a in published(world)} == {job_id}
    assert late == [T0 + timedelta(minutes=m) for m in (2, 3, 4)]
    # When the workers then start those runs
    world.deliver()
    # Then no run is alerted late twice
    ids = [a.alert_id for a in published(world)]
    assert len(ids) == len(set(ids)) and len([a for a in ids if a.endswith(".late")]) == len(ids)


# -- missed and skipped -------------------------------------------------------------------------------
def test_ticks_the_catch_up_policy_drops_raise_one_missed_and_one_skipped_alert(world: World) -> None:
    # Given a minute job alerting on missed and skipped ticks, catch-up "none", down for 10 minutes
    job_id = every_minute(world, catchup="none", alerts={"on": ["missed", "skipped"]})
    world.clock.advance(10 * 60 + 10)
    # When the dispatcher's pass drops the missed ticks
    world.svc.dispatcher.dispatch_all()
    # Then one alert of each kind names how many ticks, about the oldest dropped one
    assert sorted(kinds(published(world))) == [("missed", job_id), ("skipped", job_id)]
    dropped = [r for r in world.runs.rows.values() if r.job_id == job_id and r.status == RunStatus.SKIPPED]
    oldest = min(r.scheduled_for for r in dropped)
    assert {a.scheduled_for for a in published(world)} == {oldest}
    assert all(a.detail.startswith(f"{len(dropped)} tick(s)") for a in published(world))


def test_a_pass_that_dies_after_alerting_and_runs_again_alerts_once(world: World) -> None:
    # Given a job whose missed ticks a pass drops, and a dispatcher that dies before sending
    job_id = every_minute(world, catchup="none", alerts={"on": ["missed"]})
    world.clock.advance(10 * 60 + 10)

    def die(point: str) -> None:
        if point == "dispatch.before_send":
            raise Crash(point)

    world.svc.dispatcher.crash = die
    with pytest.raises(Crash):
        world.svc.dispatcher.dispatch_all()
    # When the next pass does the same work again
    world.svc.dispatcher.crash = lambda point: None
    world.clock.advance(60)  # the dead pass's shard lease lapses
    world.svc.dispatcher.dispatch_all()
    # Then the dropped ticks were alerted once
    assert kinds(published(world)) == [("missed", job_id)]


def test_a_tick_received_past_its_starting_deadline_raises_skipped(world: World) -> None:
    # Given a minute job that must start within 5 s of its tick and alerts on skips
    job_id = every_minute(world, starting_deadline_seconds=5, alerts={"on": ["skipped"]})
    world.svc.dispatcher.dispatch_all()
    # When its first tick is received 40 s late
    world.clock.advance(100)
    assert Outcome.SKIPPED in world.deliver()
    # Then one "skipped" alert says why
    [alert] = published(world)
    assert (alert.kind, alert.job_id) == ("skipped", job_id) and "starting_deadline" in alert.detail
    # When the same message is delivered again
    sf = times.stored(T0 + timedelta(minutes=1))
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=sf, guard=True), 0)])
    world.deliver()
    # Then still one alert
    assert len(published(world)) == 1


# -- a failing topic ----------------------------------------------------------------------------------
def test_a_failed_publish_leaves_the_runs_outcome_as_it_is_and_the_alert_listed(world: World) -> None:
    # Given a failing job that alerts on failures, and a topic that refuses every publish
    job_id = one_off(world, handler="demo.fail", alerts={"on": ["failed"]})
    assert world.svc.alerts is not None
    publisher = world.svc.alerts.publisher
    assert isinstance(publisher, MemoryAlertPublisher)
    publisher.failure = TransientStoreError("SNS is unavailable: Throttling")
    # When its attempt fails
    world.clock.advance(5)
    outcome = world.deliver()
    # Then the run failed and went to the failure workflow as it would without alerts
    assert outcome == [Outcome.FAILED]
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == RunStatus.FAILED and len(failure_inputs(world)) == 1
    # and the alert is listed though it was not published
    assert kinds(kept(world)) == [("failed", job_id)] and publisher.published == []


def test_a_tick_skipped_for_overlap_raises_skipped_naming_the_policy(world: World) -> None:
    # Given a minute job (overlap "skip") alerting on skips, whose first run lasts past the next tick
    seen: list[list[Any]] = []

    def long_run(payload: dict[str, Any], ctx: Any) -> None:
        if ctx.scheduled_for == T0 + timedelta(minutes=1):
            world.clock.set(T0 + timedelta(minutes=2, seconds=1))
            world.svc.dispatcher.dispatch_all()
            seen.append(world.deliver())  # the next tick arrives while this run holds the job

    world.handler("unit.long", long_run)
    job_id = every_minute(world, handler="unit.long", alerts={"on": ["skipped"]})
    world.svc.dispatcher.dispatch_all()
    # When the first tick runs and the second is received meanwhile
    world.clock.set(T0 + timedelta(minutes=1))
    world.deliver()
    # Then the second was skipped for overlap, and alerted once as such
    assert seen == [[Outcome.SKIPPED]]
    [alert] = published(world)
    assert (alert.kind, alert.job_id, alert.scheduled_for) == ("skipped", job_id, T0 + timedelta(minutes=2))
    assert "overlap" in alert.detail


# -- late, for a run that never starts (services/late.py) -------------------------------------------------
def late_watches(world: World) -> list[LateWatch]:
    return [LateWatch.model_validate_json(body) for _, body in world.queue.peek() if is_late_watch(body)]


def deliver_watches_only(world: World) -> list[Outcome]:
    """Deliver the visible late watches, leaving every run message received and unprocessed (a run whose
    message waits: behind the job's slot, a quota, a throttled mapping)."""
    outcomes = []
    for m in world.queue.receive(limit=100):
        if is_late_watch(m.body):
            outcomes.append(world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body)))
            world.queue.delete(m.receipt_handle)
    return outcomes


def test_a_run_that_never_starts_raises_late_once_it_is_late_after_seconds_past_its_tick(
    world: World,
) -> None:
    # Given a one-off due at T0+5 s that is late after 30 s, handed over on time with its late watch
    job_id = one_off(world, alerts={"on": ["late"], "late_after_seconds": 30})
    [watch] = late_watches(world)
    assert (watch.job_id, watch.late_watch) == (job_id, times.stored(T0 + timedelta(seconds=5)))
    # When its message waits unprocessed, and the watch comes due 30 s after the tick
    world.clock.advance(40)
    assert deliver_watches_only(world) == [Outcome.WATCHED]
    # Then one "late" alert says the run has not started, and by how much
    [alert] = published(world)
    assert (alert.kind, alert.job_id) == ("late", job_id) and alert.detail.startswith("not started 35 s")
    # When the run finally starts (its message surfaces again), late by more still
    world.clock.advance(300)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then it is still one alert: once per run and kind
    assert len(published(world)) == 1


def test_a_late_watch_due_beyond_sqs_delays_sends_itself_again_for_the_rest(world: World) -> None:
    # Given a one-off due at T0+5 s that is late after 20 minutes (SQS delays a message 15 at most)
    one_off(world, alerts={"on": ["late"], "late_after_seconds": 1200})
    # When the watch surfaces at its 15 minutes, the run still waiting
    world.clock.advance(901)
    assert deliver_watches_only(world) == [Outcome.WATCHED]
    # Then nothing is alerted yet, and the watch waits again for the rest
    assert published(world) == []
    [watch] = late_watches(world)
    [(visible, _)] = [(at, b) for at, b in world.queue.peek() if is_late_watch(b)]
    assert visible >= T0 + timedelta(seconds=1205) and watch.due == times.stored(T0 + timedelta(seconds=1206))
    # When it comes due, the run not started
    world.clock.set(T0 + timedelta(seconds=1210))
    assert deliver_watches_only(world) == [Outcome.WATCHED]
    # Then it is late
    assert [a.kind for a in published(world)] == ["late"]


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "one_off", "run_at": (T0 + timedelta(seconds=5)).isoformat()},  # holds the job's slot
        {"type": "recurring", "cron_expr": "* * * * *", "overlap_policy": "allow"},  # counted in flight
    ],
    ids=["slot", "in-flight"],
)
def test_a_run_still_running_on_the_fast_path_when_its_watch_comes_is_not_late(
    world: World, fields: dict[str, Any]
) -> None:
    # Given a job late after 30 s whose run starts on time and is still running (its row not written
    # yet: the fast path writes it at the end) when its watch comes due
    seen: dict[str, Any] = {}

    def long_run(payload: dict[str, Any], ctx: Any) -> None:
        world.clock.advance(60)
        seen["watch"] = deliver_watches_only(world)

    world.handler("t.long", long_run)
    submit(world, handler="t.long", alerts={"on": ["late"], "late_after_seconds": 30}, **fields)
    world.clock.set(T0 + timedelta(seconds=65 if fields["type"] == "recurring" else 5))
    # When the run starts and the watch is delivered while it runs
    assert Outcome.SUCCEEDED in world.deliver()
    # Then the watch found the run started: no alert
    assert seen["watch"] == [Outcome.WATCHED] and published(world) == []


def test_a_job_without_late_alerts_hands_over_no_watch(world: World) -> None:
    # Given a one-off that alerts on failures only
    one_off(world, alerts={"on": ["failed"]})
    # Then only its run message is queued
    assert late_watches(world) == [] and world.queue.depth() == 1
