"""An edit of a paused job's schedule records the old schedule's ticks of the pause (tests/sim).

A paused job's ticks are decided at its resume, by its catch-up policy, over the schedule it then
has. An edit during the pause left the old schedule's ticks of the pause with no row at all: due,
never run, never recorded (tests/sim seeds 59, 118, 230).
"""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.domain.status import RunStatus
from tests.unit.services.conftest import T0, World


def test_the_old_schedules_ticks_of_a_pause_are_skipped_rescheduled_when_an_edit_replaces_it(
    world: World,
) -> None:
    # Given a job every 10 s, paused at 12:00:05, whose ticks 12:00:10 .. 12:00:30 come due paused
    request = CreateJobRequest(
        type="recurring", handler="demo.echo", cron_expr="*/10 * * * * *", catchup="all"
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
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
