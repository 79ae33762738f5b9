"""What the services emit (jobsched.telemetry), read back from the in-memory metrics, not from stdout;
and the log scope a run runs in (jobsched.logcontext)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched import telemetry
from jobsched.adapters.memory import MemoryMetrics
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.keys import run_id_for
from jobsched.domain.models import Job
from jobsched.domain.status import JobStatus
from jobsched.handlers import RunContext
from jobsched.logcontext import current_run
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World


@pytest.fixture
def metrics(world: World) -> MemoryMetrics:
    recorded = MemoryMetrics()
    world.svc.worker.metrics = recorded
    world.svc.dispatcher.metrics = recorded
    world.svc.failures.metrics = recorded
    return recorded


def one_off(world: World, *, seconds: float, handler: str, max_attempts: int = 3) -> str:
    request = CreateJobRequest(
        type="one_off",
        handler=handler,
        payload={},
        run_at=T0 + timedelta(seconds=seconds),
        max_attempts=max_attempts,
    )
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def test_a_run_that_starts_late_emits_its_lateness_its_duration_and_its_outcome(
    world: World, metrics: MemoryMetrics
) -> None:
    # Given a one-off due at +5 s whose handler takes 2 s (on the fake clock)
    def slow(payload: dict[str, Any], ctx: RunContext) -> str:
        world.clock.advance(2)
        return "done"

    world.handler("test.slow", slow)
    one_off(world, seconds=5, handler="test.slow")
    # When the worker receives it 2.5 s after its second
    world.clock.advance(7.5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then the run's lateness (at its start), its duration and its outcome are emitted, once each
    assert metrics.values(telemetry.LATENESS) == [2500]
    assert metrics.values(telemetry.DURATION) == [2000]
    assert metrics.values(telemetry.runs("succeeded")) == [1]
    assert metrics.values(telemetry.runs("failed")) == []


def test_a_failed_attempt_with_attempts_left_counts_a_retry_and_no_dead_letter(
    world: World, metrics: MemoryMetrics
) -> None:
    # Given a one-off that always fails, allowed 3 attempts
    one_off(world, seconds=5, handler="demo.fail", max_attempts=3)
    # When its first attempt fails
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    # Then the failure is counted, and one retry: the workflow will re-arm it
    assert metrics.values(telemetry.runs("failed")) == [1]
    assert metrics.values(telemetry.RETRIES) == [1]
    assert metrics.values(telemetry.runs("dead_letter")) == []


def test_a_last_failed_attempt_counts_a_dead_letter_once_however_often_it_is_handed_over(
    world: World, metrics: MemoryMetrics
) -> None:
    # Given a one-off allowed one attempt, which fails
    job_id = one_off(world, seconds=5, handler="demo.fail", max_attempts=1)
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    # When its failure is handed over again (a redelivery after a crash does that)
    job = world.jobs.get_job(job_id)
    row = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert job is not None and row is not None
    assert world.svc.failures.hand_over(job, row) is False
    # Then one dead letter is counted, and no retry
    assert metrics.values(telemetry.runs("dead_letter")) == [1]
    assert metrics.values(telemetry.RETRIES) == []


def stored_recurring(world: World, *, next_run_at_seconds: float) -> None:
    job = Job(
        job_id="job_lagging",
        tenant="t",
        type="recurring",
        status=JobStatus.SCHEDULED,
        handler="demo.echo",
        payload={},
        cron_expr="* * * * *",
        next_run_at=T0 + timedelta(seconds=next_run_at_seconds),
        created_at=T0 - timedelta(hours=1),
        updated_at=T0 - timedelta(hours=1),
    )
    world.jobs.create_with_idempotency(job, idempotency_key="k", request_hash="h", response={}, now=T0)


def test_a_pass_emits_the_age_of_the_oldest_due_entry_it_found_not_handed_over(
    world: World, metrics: MemoryMetrics
) -> None:
    # Given a job whose tick at 11:59:00 is still in the due index at 12:00 (no pass ran since)
    stored_recurring(world, next_run_at_seconds=-60)
    # When a pass runs at 12:00
    report = world.svc.dispatcher.dispatch_all()
    # Then it emits a dispatch lag of 60 s and the entries it handed over
    assert metrics.values(telemetry.DISPATCH_LAG) == [60_000]
    assert metrics.values(telemetry.HANDED_OVER) == [report.runs_sent] and report.runs_sent >= 1


def test_a_pass_that_finds_every_due_tick_ahead_of_its_time_emits_no_lag(
    world: World, metrics: MemoryMetrics
) -> None:
    # Given a job whose next tick is 30 s ahead (the look-ahead hands it over before it is due)
    stored_recurring(world, next_run_at_seconds=30)
    # When a pass runs
    world.svc.dispatcher.dispatch_all()
    # Then the lag is 0
    assert metrics.values(telemetry.DISPATCH_LAG) == [0]


def test_the_alert_hook_counts_one_alert_of_its_kind(metrics: MemoryMetrics) -> None:
    # Given the metrics the services are wired with; When an alert of kind "late" is raised
    metrics.alert("late")
    # Then one Alerts_late is counted
    assert metrics.values(telemetry.alerts("late")) == [1]


def test_a_handler_runs_inside_its_runs_log_scope_and_the_scope_ends_with_the_run(world: World) -> None:
    # Given a handler that notes the log keys it runs under, with and without a timeout (a timeout
    # runs the handler on a thread of its own)
    seen: list[dict[str, str]] = []

    def note(payload: dict[str, Any], ctx: RunContext) -> None:
        seen.append(current_run())

    world.handler("test.note", note)
    plain = one_off(world, seconds=5, handler="test.note")
    request = CreateJobRequest(
        type="one_off", handler="test.note", payload={}, run_at=T0 + timedelta(seconds=5), timeout_seconds=30
    )
    timed = world.svc.job_service.submit(request, tenant="t2", idempotency_key=None).job_id
    # When both run
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED, Outcome.SUCCEEDED]
    # Then each handler saw its own run's job_id, run_id and tenant, and nothing is left after
    sf = T0 + timedelta(seconds=5)
    assert sorted(seen, key=lambda k: k["job_id"]) == sorted(
        [
            {"job_id": plain, "run_id": run_id_for(plain, sf), "tenant": "t"},
            {"job_id": timed, "run_id": run_id_for(timed, sf), "tenant": "t2"},
        ],
        key=lambda k: k["job_id"],
    )
    assert current_run() == {}
