"""An edit of a job's schedule loses no tick that came due before it (tests/sim).

A paused job's ticks are decided at its resume, by its catch-up policy, over the schedule it then
has. An edit during the pause left the old schedule's ticks of the pause with no row at all: due,
never run, never recorded (tests/sim seeds 59, 118, 230). So did an edit of a running job whose
dispatcher was behind: ticks due before the edit but not handed over yet (seed 213), and an edit
after a resume whose hand-over failed, the stamp left at the pause's first tick (seed 5309). An edit
whose records of the overdue ticks it took off the schedule met a fault after its write left the rest
with no row (seed 5225): it now hands the overdue ticks over first, as the next pass would have.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.domain.status import RunStatus
from jobsched.errors import StoreUnreachable, TransientStoreError
from tests.unit.services.conftest import T0, World


def test_the_old_schedules_ticks_of_a_pause_are_skipped_rescheduled_when_an_edit_replaces_it(
    world: World,
) -> None:
    # Given a job every 10 s, paused at 12:00:05, whose ticks 12:00:10 .. 12:00:30 come due paused
    job_id = _every_10s(world)
    world.clock.set(T0 + timedelta(seconds=5))
    world.svc.schedule.pause(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=35))
    world.svc.dispatcher.dispatch_all()
    world.deliver()
    # When an edit moves it to every 15 s during the pause, and it is resumed at 12:00:50
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/15 * * * * *"), tenant="t")
    world.clock.set(T0 + timedelta(seconds=50))
    world.svc.schedule.resume(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=70))
    world.svc.dispatcher.dispatch_all()
    world.deliver()
    # Then the old schedule's ticks of the pause are recorded SKIPPED "rescheduled" (the edit replaced
    # them), and the new schedule's tick of the pause (12:00:45, after the edit) follows the catch-up
    # policy: it runs. Before, 12:00:10, :20 and :30 had no row at all.
    rows = {times.stored(r.scheduled_for): r for r in world.runs.recent(job_id, limit=20)}
    for second in (10, 20, 30):
        row = rows.get(times.stored(T0 + timedelta(seconds=second)))
        assert row is not None and (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled"), second
    after = rows.get(times.stored(T0 + timedelta(seconds=45)))
    assert after is not None and after.status == RunStatus.SUCCEEDED


def test_an_edit_while_the_dispatcher_is_behind_keeps_the_ticks_that_came_due_before_it(world: World) -> None:
    # Given a job every 10 s, handed over at its create up to the lookahead (12:01:30), whose
    # dispatcher is then down: its ticks 12:01:40 .. 12:03:20 come due and are not handed over
    job_id = _every_10s(world)
    job = world.jobs.get_job(job_id)
    assert job is not None and job.next_run_at == T0 + timedelta(seconds=100)
    # When, at 12:03:20, an edit moves it to every 20 s (:00, :20 and :40 stay ticks; :10, :30 and :50
    # do not), and the dispatcher comes back
    world.clock.set(T0 + timedelta(seconds=200))
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/20 * * * * *"), tenant="t")
    world.clock.set(T0 + timedelta(seconds=230))
    world.svc.dispatcher.dispatch_all()
    while world.deliver():  # every visible message, ten at a time
        pass
    # Then every tick that came due before the edit has a row: the new schedule's ran late, by the
    # catch-up policy (all); those the edit took off the schedule are SKIPPED "rescheduled". Before,
    # the edit restarted the schedule at 12:03:20, and none of them had a row.
    rows = {times.stored(r.scheduled_for): r for r in world.runs.recent(job_id, limit=50)}
    for second in range(100, 201, 10):
        row = rows.get(times.stored(T0 + timedelta(seconds=second)))
        assert row is not None, second
        if second % 20 == 0:
            assert row.status == RunStatus.SUCCEEDED, second
        else:
            assert (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled"), second


def _paused_every_10s_job_edited_while_its_write_times_out(world: World, *, applies: bool) -> str:
    """A job every 10 s, paused at 12:00:05, edited at 12:00:35 to every 15 s, whose definition write
    answers a timeout (after it applied, or not); its id."""
    job_id = _every_10s(world)
    world.clock.set(T0 + timedelta(seconds=5))
    world.svc.schedule.pause(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=35))
    real = world.jobs.save_definition

    def times_out(job: Any, *, expected_version: int) -> bool:
        if applies:
            real(job, expected_version=expected_version)
        raise StoreUnreachable("read timeout")

    world.jobs.save_definition = times_out  # type: ignore[method-assign]
    with contextlib.suppress(StoreUnreachable):
        world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/15 * * * * *"), tenant="t")
    world.jobs.save_definition = real  # type: ignore[method-assign]
    return job_id


def test_an_edit_whose_write_timed_out_after_it_applied_still_records_the_old_ticks_of_the_pause(
    world: World,
) -> None:
    # Given a paused job's edit whose write applied, and whose answer timed out
    job_id = _paused_every_10s_job_edited_while_its_write_times_out(world, applies=True)
    # Then the edit read the job back, found its write, and went on: the old schedule's ticks of the
    # pause are recorded SKIPPED "rescheduled". Before, the 503 left them with no row for good (a
    # retry finds nothing left to change: tests/sim seed 355).
    rows = {times.stored(r.scheduled_for): r for r in world.runs.recent(job_id, limit=20)}
    for second in (10, 20, 30):
        row = rows.get(times.stored(T0 + timedelta(seconds=second)))
        assert row is not None and (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled"), second
    job = world.jobs.get_job(job_id)
    assert job is not None and job.cron_expr == "*/15 * * * * *"


def test_an_edit_whose_write_timed_out_before_it_applied_answers_the_timeout_and_records_nothing(
    world: World,
) -> None:
    # Given a paused job's edit whose write did not apply, and whose answer timed out
    job_id = _paused_every_10s_job_edited_while_its_write_times_out(world, applies=False)
    # Then nothing changed (the caller got the 503 and retries with the same key)
    assert world.runs.recent(job_id, limit=20) == []
    job = world.jobs.get_job(job_id)
    assert job is not None and job.cron_expr == "*/10 * * * * *"


def _paused_every_10s_job_edited_while_a_record_fails(world: World, *, cron_expr: str) -> str:
    """A job every 10 s, paused at 12:00:05, edited at 12:00:35 to `cron_expr`, whose write applies
    and whose second SKIPPED record (12:00:20) meets a 500; its id."""
    job_id = _every_10s(world)
    world.clock.set(T0 + timedelta(seconds=5))
    world.svc.schedule.pause(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=35))
    real = world.runs.put_pending
    calls = 0

    def fails_once(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise TransientStoreError("sim: InternalServerError on put_pending")
        return real(**kwargs)

    world.runs.put_pending = fails_once  # type: ignore[method-assign]
    with contextlib.suppress(TransientStoreError):
        world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr=cron_expr), tenant="t")
    world.runs.put_pending = real  # type: ignore[method-assign]
    return job_id


def test_the_resume_records_the_old_ticks_of_the_pause_an_edit_failed_to_record(world: World) -> None:
    # Given a paused job's edit whose write applied, and whose records of the old schedule's ticks of
    # the pause stopped at a 500 (12:00:10 recorded, 12:00:20 and :30 not)
    job_id = _paused_every_10s_job_edited_while_a_record_fails(world, cron_expr="*/15 * * * * *")
    assert world.runs.get(job_id, T0 + timedelta(seconds=20)) is None
    # When the job is resumed at 12:00:50
    world.clock.set(T0 + timedelta(seconds=50))
    world.svc.schedule.resume(job_id, tenant="t")
    # Then every old tick of the pause is recorded SKIPPED "rescheduled", and the job keeps no more of
    # them. Before, the 503 left 12:00:20 and :30 with no row for good: the edit's write had replaced
    # the old schedule, and nothing else knew those ticks (tests/sim seed 2140).
    for second in (10, 20, 30):
        row = world.runs.get(job_id, T0 + timedelta(seconds=second))
        assert row is not None and (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled"), second
    job = world.jobs.get_job(job_id)
    assert job is not None and job.rescheduled is None


def test_a_second_edit_of_the_pause_records_the_old_ticks_the_first_failed_to_record(world: World) -> None:
    # Given a paused job's edit to every 15 s whose records of the old ticks of the pause stopped at
    # a 500 (12:00:20 and :30 not recorded)
    job_id = _paused_every_10s_job_edited_while_a_record_fails(world, cron_expr="*/15 * * * * *")
    # When a second edit, at 12:01:05, moves it to every 20 s, the pause going on
    world.clock.set(T0 + timedelta(seconds=65))
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/20 * * * * *"), tenant="t")
    # Then the first schedule's ticks of the pause (12:00:10 .. :30) and the second's (12:00:45,
    # 12:01:00) are recorded SKIPPED "rescheduled", and the job keeps the second's until the resume
    expected = (10, 20, 30, 45, 60)
    for second in expected:
        row = world.runs.get(job_id, T0 + timedelta(seconds=second))
        assert row is not None and (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled"), second
    job = world.jobs.get_job(job_id)
    kept = job.rescheduled if job is not None else None
    assert kept is not None and (kept.cron_expr, kept.first) == ("*/15 * * * * *", T0 + timedelta(seconds=45))


def _every_10s(world: World) -> str:
    """A job every 10 s with catch-up "all", created at 12:00; its id."""
    request = CreateJobRequest(
        type="recurring", handler="demo.echo", cron_expr="*/10 * * * * *", catchup="all"
    )
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def test_a_pause_hands_over_the_ticks_due_before_it_that_the_dispatcher_had_not_reached(world: World) -> None:
    # Given a job every 10 s, handed over at its create up to the lookahead (12:01:30), whose
    # dispatcher is then down: its ticks 12:01:40 .. 12:02:00 come due and are not handed over
    job_id = _every_10s(world)
    job = world.jobs.get_job(job_id)
    assert job is not None and job.next_run_at == T0 + timedelta(seconds=100)
    # When it is paused at 12:02:05, and never resumed
    world.clock.set(T0 + timedelta(seconds=125))
    world.svc.schedule.pause(job_id, tenant="t")
    while world.deliver():  # every visible message, ten at a time
        pass
    # Then the ticks due before the pause ran, as ticks before a pause do, and the pause waits from
    # the next one. Before, the pause kept them for the resume: never resumed, they had no row
    # (tests/sim seed 767).
    for second in range(100, 121, 10):
        row = world.runs.get(job_id, T0 + timedelta(seconds=second))
        assert row is not None and row.status == RunStatus.SUCCEEDED, second
    job = world.jobs.get_job(job_id)
    assert job is not None and job.resume_from == T0 + timedelta(seconds=130)


def test_an_edit_after_a_resume_whose_hand_over_failed_keeps_the_new_schedules_ticks_of_the_pause(
    world: World,
) -> None:
    # Given a job every 10 s, handed over up to 12:01:30, paused at 12:00:05 (its ticks 12:00:10 ..
    # :30 left alone by the worker), resumed at 12:00:45 with a write that re-plans the pause from
    # 12:00:10, whose hand-over then meets a throttle: the job's stamp stays at 12:00:10
    job_id = _every_10s(world)
    world.clock.set(T0 + timedelta(seconds=5))
    world.svc.schedule.pause(job_id, tenant="t")
    world.clock.set(T0 + timedelta(seconds=35))
    world.deliver()
    world.clock.set(T0 + timedelta(seconds=45))
    real = world.queue.send

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise TransientStoreError("sim: ThrottlingException on send")

    world.queue.send = throttled  # type: ignore[method-assign]
    with contextlib.suppress(TransientStoreError):
        world.svc.schedule.resume(job_id, tenant="t")
    world.queue.send = real  # type: ignore[method-assign]
    job = world.jobs.get_job(job_id)
    assert job is not None and job.next_run_at == T0 + timedelta(seconds=10)
    # and the ticks handed over before the pause and delivered after the resume, 12:00:40 .. 12:01:00,
    # run
    world.clock.set(T0 + timedelta(seconds=61))
    world.deliver()
    assert world.runs.get(job_id, T0 + timedelta(seconds=60)) is not None
    # When, at 12:01:02, an edit moves it to every 15 s, and its ticks are delivered
    world.clock.set(T0 + timedelta(seconds=62))
    world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/15 * * * * *"), tenant="t")
    world.clock.set(T0 + timedelta(seconds=100))
    while world.deliver():  # every visible message, ten at a time
        pass
    # Then every old tick of the pause has a row: 12:00:30, on the new schedule too, ran late by the
    # catch-up policy (all); 12:00:10 and :20, which the edit took off the schedule, are SKIPPED
    # "rescheduled".
    # Before, the edit started the new schedule after the newest run row (12:01:00): 12:00:30 had
    # no row for good (tests/sim seed 5309).
    for second in (10, 20, 30, 40, 50, 60):
        row = world.runs.get(job_id, T0 + timedelta(seconds=second))
        assert row is not None, second
        if second >= 30:
            assert row.status == RunStatus.SUCCEEDED, second
        else:
            assert (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled"), second


def test_an_edit_while_the_dispatcher_is_behind_loses_no_tick_when_a_write_after_it_fails(
    world: World,
) -> None:
    # Given a job every 10 s, handed over at its create up to the lookahead (12:01:30), whose
    # dispatcher is then down: its ticks 12:01:40 .. 12:03:20 come due and are not handed over
    job_id = _every_10s(world)
    # When, at 12:03:20, an edit moves it to every 20 s, and the second of its SKIPPED "rescheduled"
    # records (had it any to write after its own) meets a timeout, before it applied
    world.clock.set(T0 + timedelta(seconds=200))
    real = world.runs.put_pending
    records = 0

    def times_out_once(**kwargs: Any) -> Any:
        nonlocal records
        if kwargs.get("skipped") == "rescheduled":
            records += 1
            if records == 2:
                raise StoreUnreachable("sim: read timeout on put_pending")
        return real(**kwargs)

    world.runs.put_pending = times_out_once  # type: ignore[method-assign]
    with contextlib.suppress(StoreUnreachable):
        world.svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/20 * * * * *"), tenant="t")
    world.runs.put_pending = real  # type: ignore[method-assign]
    job = world.jobs.get_job(job_id)
    assert job is not None and job.cron_expr == "*/20 * * * * *"
    # and the dispatcher comes back
    world.clock.set(T0 + timedelta(seconds=230))
    world.svc.dispatcher.dispatch_all()
    while world.deliver():  # every visible message, ten at a time
        pass
    # Then every tick that came due before the edit has a row: the edit handed them over first, as the
    # next pass would have; those on the new schedule ran, and the workers recorded those it took off
    # the schedule SKIPPED "rescheduled". Before, the edit recorded these itself after its write: the
    # fault left 12:02:10 .. 12:03:10 with no row for good (tests/sim seed 5225).
    rows = {times.stored(r.scheduled_for): r for r in world.runs.recent(job_id, limit=50)}
    for second in range(100, 201, 10):
        row = rows.get(times.stored(T0 + timedelta(seconds=second)))
        assert row is not None, second
        if second % 20 == 0:
            assert row.status == RunStatus.SUCCEEDED, second
        else:
            assert (row.status, row.reason) == (RunStatus.SKIPPED, "rescheduled"), second
