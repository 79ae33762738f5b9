"""Recurring-job semantics against reference timelines, on a simulated clock.

Every test names its timeline: which ticks run, which are SKIPPED (and why), which coalesce.
T0 = 12:00:00Z; "every minute" is `* * * * *`, first tick 12:01.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from jobsched.domain import times
from jobsched.domain.commands import BackfillRequest, CreateJobRequest, PatchJobRequest
from jobsched.errors import Conflict, ValidationFailed
from jobsched.handlers import HandlerRegistry, RunContext, registry
from jobsched.ports import FakeClock
from jobsched.settings import Settings
from jobsched.wiring import Services, build
from tests.conftest import T0
from tests.support import Pump, run_rows, use_clocked_queue


def at(minute: int, second: int = 0) -> datetime:
    return T0 + timedelta(minutes=minute, seconds=second)


def fates(svc: Services, job_id: str) -> dict[str, str]:
    """{"HH:MM:SS": "STATUS" or "SKIPPED:reason"} of every run of the job."""
    out = {}
    for row in run_rows(svc.settings.runs_table, job_id):
        key = times.parse_stored(row["scheduled_for"]["S"]).strftime("%H:%M:%S")
        status = row["status"]["S"]
        out[key] = f"{status}:{row['reason']['S']}" if status == "SKIPPED" else status
    return dict(sorted(out.items()))


def recurring(svc: Services, cron_expr: str = "* * * * *", **policy: Any) -> str:
    request = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr=cron_expr, **policy)
    return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def tick_every_minute(svc: Services, clock: FakeClock, pump: Pump, until: datetime) -> None:
    """Dispatcher passes once a minute (at :00) and workers running every due run, up to `until`."""
    while clock.now() < until:
        svc.dispatcher.dispatch_all()
        pump.run_due(min(until, clock.now() + timedelta(minutes=1)))
        clock.set(max(clock.now(), times.bucket_start(times.bucket(clock.now())) + timedelta(minutes=1)))


# -- pause / resume under each catch-up policy -----------------------------------------------------------
@pytest.mark.parametrize(
    ("catchup", "max_catchup", "expected"),
    [
        # the pause covers five ticks: 12:01 (handed over before the pause, left alone when due while
        # paused) and 12:02-12:05 (never handed over): all five follow the policy alike
        ("one", 10, {"12:01:00": "SKIPPED:coalesced", "12:02:00": "SKIPPED:coalesced",
                     "12:03:00": "SKIPPED:coalesced", "12:04:00": "SKIPPED:coalesced",
                     "12:05:00": "SUCCEEDED"}),
        ("none", 10, {"12:01:00": "SKIPPED:missed", "12:02:00": "SKIPPED:missed",
                      "12:03:00": "SKIPPED:missed", "12:04:00": "SKIPPED:missed",
                      "12:05:00": "SKIPPED:missed"}),
        ("all", 10, {"12:01:00": "SUCCEEDED", "12:02:00": "SUCCEEDED", "12:03:00": "SUCCEEDED",
                     "12:04:00": "SUCCEEDED", "12:05:00": "SUCCEEDED"}),
        ("all", 2, {"12:01:00": "SKIPPED:catchup_limit", "12:02:00": "SKIPPED:catchup_limit",
                    "12:03:00": "SKIPPED:catchup_limit", "12:04:00": "SUCCEEDED",
                    "12:05:00": "SUCCEEDED"}),
    ],
)  # fmt: skip
def test_it_pauses_for_five_ticks_and_resumes_by_the_catchup_policy(
    svc: Services, pump: Pump, clock: FakeClock, catchup: str, max_catchup: int, expected: dict[str, str]
) -> None:
    job_id = recurring(svc, catchup=catchup, max_catchup=max_catchup)  # 12:01 handed over at once
    clock.set(at(0, 30))
    assert svc.schedule.pause(job_id, tenant="t").status == "PAUSED"
    tick_every_minute(svc, clock, pump, at(5, 30))  # 12:01 comes due while paused
    assert "12:01:00" not in fates(svc, job_id)  # left to the resume: nothing written while paused
    clock.set(at(5, 30))
    control = svc.schedule.resume(job_id, tenant="t")
    # 12:06 and 12:07 are handed over (the cursor is 12:08): the next firing shown is 12:06
    assert control.status == "SCHEDULED" and control.next_run_at == at(6)
    pump.run_due(at(5, 30))
    tick_every_minute(svc, clock, pump, at(7, 30))
    assert {k: v for k, v in fates(svc, job_id).items() if k <= "12:07:00"} == {
        **expected,
        "12:06:00": "SUCCEEDED",
        "12:07:00": "SUCCEEDED",
    }


def test_catchup_all_runs_every_missed_tick_up_to_max_catchup(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given catchup "all" with the default max_catchup 10, paused over 7 ticks (12:01-12:07)
    job_id = recurring(svc, catchup="all")
    clock.set(at(0, 30))
    svc.schedule.pause(job_id, tenant="t")
    tick_every_minute(svc, clock, pump, at(7, 30))
    # When it resumes
    clock.set(at(7, 30))
    svc.schedule.resume(job_id, tenant="t")
    pump.run_due(at(7, 30))
    # Then all 7 run: 7 <= 10 (it used to run the newest 3 and skip 4 as "catchup_limit")
    got = fates(svc, job_id)
    assert [got[f"12:0{m}:00"] for m in range(1, 8)] == ["SUCCEEDED"] * 7


def test_a_short_pause_follows_catchup_for_ticks_handed_over_far_ahead(
    aws: Settings, clock: FakeClock
) -> None:
    # Given the AWS hand-over horizon (840 s): an every-minute job's next 14 ticks are in the queue
    svc = _services(aws, clock, handover_horizon_seconds=840)
    pump = Pump(svc, clock)
    job_id = recurring(svc, catchup="none")
    assert svc.jobs.get_job(job_id).next_run_at == at(15)  # type: ignore[union-attr]
    # When it is paused over 12:01-12:03 (a 3-minute pause, far shorter than the horizon)
    clock.set(at(0, 30))
    svc.schedule.pause(job_id, tenant="t")
    pump.run_due(at(3, 30))
    clock.set(at(3, 30))
    svc.schedule.resume(job_id, tenant="t")
    pump.run_due(at(6, 30))
    # Then the pause's ticks follow catchup "none" (SKIPPED "missed", not "paused"); the ticks
    # handed over for after the resume run, once each, and nothing is handed over twice
    got = fates(svc, job_id)
    assert [got[f"12:0{m}:00"] for m in (1, 2, 3)] == ["SKIPPED:missed"] * 3
    assert [got[f"12:0{m}:00"] for m in (4, 5, 6)] == ["SUCCEEDED"] * 3
    # the resume's hand-over went on from 12:15, the first tick not handed over, to its horizon
    assert svc.jobs.get_job(job_id).next_run_at == at(18)  # type: ignore[union-attr]
    sent = Counter(m.scheduled_for for m in svc.queue.sent)  # type: ignore[attr-defined]
    assert max(sent.values()) == 1 and pump.outcomes["duplicate"] == 0


def _services(aws: Settings, clock: FakeClock, **settings: Any) -> Services:
    services = build(
        aws.model_copy(update=settings),
        dynamodb=boto3.client("dynamodb"),
        sqs=boto3.client("sqs"),
        stepfunctions=boto3.client("stepfunctions"),
        clock=clock,
    )
    services.worker.sleep = lambda seconds: clock.advance(seconds)
    services.dispatcher.max_workers = services.dispatcher.io_workers = 1
    use_clocked_queue(services)
    return services


def test_a_dispatcher_outage_is_caught_up_by_the_policy(svc: Services, pump: Pump, clock: FakeClock) -> None:
    # Given the dispatcher ran at 12:00 and 12:01, then was down until 12:08 (no pass), catchup "one"
    job_id = recurring(svc)
    tick_every_minute(svc, clock, pump, at(1, 30))
    clock.set(at(8))
    tick_every_minute(svc, clock, pump, at(9, 30))
    # Then 12:02-12:05 coalesce into 12:05: ticks later than a pass's grace (look-ahead + tick) were
    # missed; 12:06 and 12:07, within it, are only late and run
    got = fates(svc, job_id)
    assert got["12:01:00"] == "SUCCEEDED"
    assert [got[f"12:0{m}:00"] for m in (2, 3, 4)] == ["SKIPPED:coalesced"] * 3
    assert got["12:05:00"] == "SUCCEEDED"  # newest missed tick (before now - look-ahead - tick)
    assert all(got[f"12:0{m}:00"] == "SUCCEEDED" for m in (6, 7, 8, 9))


def test_a_run_that_cannot_start_by_its_deadline_is_skipped(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    job_id = recurring(svc, starting_deadline_seconds=30)
    pump.run_due(at(1))  # 12:01 starts on time
    svc.dispatcher.dispatch_all()
    clock.set(at(2, 45))  # workers were stalled: 12:02 is 45 s late
    pump.run_due(at(2, 45))
    got = fates(svc, job_id)
    assert got["12:01:00"] == "SUCCEEDED" and got["12:02:00"] == "SKIPPED:deadline"


# -- overlap: a 30 s handler on a 10 s schedule --------------------------------------------------------------
class Long:
    """Tick 12:00:10's run lasts 30 s; while it runs, the ticks due meanwhile reach (other) workers."""

    def __init__(self, pump: Pump, clock: FakeClock) -> None:
        self.pump, self.clock = pump, clock
        self.started: list[str] = []

    def __call__(self, payload: dict[str, Any], ctx: RunContext) -> None:
        self.started.append(ctx.scheduled_for.strftime("%H:%M:%S"))
        if len(self.started) == 1:
            worker = self.pump.svc.worker
            for step in (10, 20):  # 12:00:20 and 12:00:30 come due during the run
                self.clock.set(ctx.scheduled_for + timedelta(seconds=step))
                # what the heartbeat does every lease/3 s of real time, played on the fake clock
                worker.jobs.extend_hold(
                    ctx.job_id,
                    run=times.stored(ctx.scheduled_for),
                    until=self.clock.now() + timedelta(seconds=worker.hold_seconds()),
                )
                self.pump.run_due(self.clock.now())
            self.clock.set(ctx.scheduled_for + timedelta(seconds=30))


@pytest.mark.parametrize(
    ("policy", "expected", "started"),
    [
        ("skip", {"12:00:20": "SKIPPED:overlap", "12:00:30": "SKIPPED:overlap"}, ["12:00:10", "12:00:40"]),
        ("buffer_one", {"12:00:20": "SUCCEEDED", "12:00:30": "SKIPPED:overlap"},
         ["12:00:10", "12:00:20", "12:00:40"]),
        ("allow", {"12:00:20": "SUCCEEDED", "12:00:30": "SUCCEEDED"},
         ["12:00:10", "12:00:20", "12:00:30", "12:00:40"]),
    ],
)  # fmt: skip
def test_a_30s_handler_on_a_10s_schedule_under_each_overlap_policy(
    svc: Services, pump: Pump, clock: FakeClock, policy: str, expected: dict[str, str], started: list[str]
) -> None:
    long = Long(pump, clock)
    handlers = HandlerRegistry()
    handlers.register("test.long", long)
    svc.worker.registry = svc.job_service.registry = handlers
    request = CreateJobRequest(
        type="recurring", handler="test.long", cron_expr="*/10 * * * * *", overlap_policy=policy
    )
    job_id = svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    pump.run_due(at(0, 40))
    got = fates(svc, job_id)
    assert {k: got[k] for k in ("12:00:10", "12:00:20", "12:00:30", "12:00:40")} == {
        "12:00:10": "SUCCEEDED",
        **expected,
        "12:00:40": "SUCCEEDED",
    }
    assert sorted(long.started) == started
    assert svc.jobs.get_job(job_id).active_run is None  # type: ignore[union-attr]


# -- jitter ------------------------------------------------------------------------------------------------
def test_jitter_is_a_stable_per_job_offset_inside_the_window(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    from jobsched.services.dispatch import jitter_offset

    job_id = recurring(svc, cron_expr="*/10 * * * * *", jitter_seconds=9)
    offset = jitter_offset(job_id, 9)
    assert 0 <= offset <= 9
    delays = pump.svc.queue.requested_delays  # type: ignore[attr-defined]
    ticks = [T0 + timedelta(seconds=10 * i) for i in range(1, len(delays) + 1)]
    assert delays == [int((t - T0).total_seconds()) + offset for t in ticks]
    # and the runs keep their tick as scheduled_for: one run per tick, jitter or not
    pump.run_due(at(1, 30))
    assert all(v == "SUCCEEDED" for v in fates(svc, job_id).values())
    offsets = {jitter_offset(f"job_{i}", 30) for i in range(200)}
    assert len(offsets) > 20  # spread over the window


# -- what a reader sees ----------------------------------------------------------------------------------
def test_next_run_at_is_the_next_tick_to_fire_not_the_dispatchers_hand_over_cursor(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given a */20-second job whose ticks are handed over 840 s ahead (the AWS horizon)
    settings = svc.settings.model_copy(update={"handover_horizon_seconds": 840})
    svc.dispatcher.settings = settings
    job_id = recurring(svc, cron_expr="*/20 * * * * *")  # 12:00:20 .. 12:14:00 handed over at once
    stored = svc.jobs.get_job(job_id)
    assert stored is not None and stored.next_run_at == at(14, 20)  # the cursor, unchanged
    # When it is read at 12:00:22, after the 12:00:20 tick ran
    clock.set(at(0, 22))
    assert pump.run_due(at(0, 22))["succeeded"] == 1
    # Then every view of the job shows 12:00:40, the next tick that fires
    assert svc.job_service.get(job_id, tenant="t").next_run_at == at(0, 40)
    edited = svc.schedule.edit(job_id, PatchJobRequest(payload={"v": 2}), tenant="t")
    assert edited.next_run_at == at(14, 20)  # an edit of the payload leaves the cursor where it was
    assert svc.job_service.get(job_id, tenant="t").next_run_at == at(0, 40)
    # And a paused job shows none; once resumed, the next tick again
    svc.schedule.pause(job_id, tenant="t")
    assert svc.job_service.get(job_id, tenant="t").next_run_at is None
    assert svc.schedule.resume(job_id, tenant="t").next_run_at == at(0, 40)


# -- edit, run now, backfill, history ---------------------------------------------------------------
def test_an_edit_recomputes_the_next_tick_and_never_hands_a_tick_over_twice(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    job_id = recurring(svc)  # 12:01 handed over at creation
    clock.set(at(0, 20))
    job = svc.schedule.edit(job_id, PatchJobRequest(cron_expr="*/2 * * * *", payload={"v": 2}), tenant="t")
    assert job.next_run_at == at(2) and job.payload == {"v": 2} and job.cron_expr == "*/2 * * * *"
    tick_every_minute(svc, clock, pump, at(6, 30))
    # 12:01 was handed over before the edit; it is no tick of the new schedule, so it does not run
    assert fates(svc, job_id) == {
        "12:01:00": "SKIPPED:rescheduled", "12:02:00": "SUCCEEDED", "12:04:00": "SUCCEEDED",
        "12:06:00": "SUCCEEDED",
    }  # fmt: skip


def test_run_now_is_a_manual_run_with_its_own_key(svc: Services, pump: Pump, clock: FakeClock) -> None:
    job_id = recurring(svc, cron_expr="0 3 * * *")
    clock.set(at(0, 5))
    control = svc.schedule.run_now(job_id, tenant="t")
    pump.run_due(at(0, 5))
    [run] = svc.runs.recent(job_id, limit=5)
    assert run.run_id == control.run_id and run.kind == "manual" and run.status == "SUCCEEDED"


def test_backfill_of_seven_days_of_an_hourly_job_creates_168_runs_and_a_repeat_none(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    job_id = recurring(svc, cron_expr="0 * * * *")
    request = BackfillRequest.model_validate(
        {"from": "2026-11-20T00:00:00+00:00", "to": "2026-11-27T00:00:00+00:00"}
    )
    first = svc.schedule.backfill(job_id, request, tenant="t")
    assert (first.ticks, first.created, first.existing) == (168, 168, 0)
    assert first.first == datetime(2026, 11, 20, tzinfo=UTC) and first.last == datetime(
        2026, 11, 26, 23, tzinfo=UTC
    )
    delays = pump.svc.queue.requested_delays  # type: ignore[attr-defined]
    assert delays == sorted(delays) and max(delays) == 16  # 10 a second, oldest first
    again = svc.schedule.backfill(job_id, request, tenant="t")
    assert (again.created, again.existing) == (0, 168)
    pump.run_due(at(1))
    history = svc.schedule.history(
        job_id, tenant="t", start=None, end=at(0), status="SUCCEEDED", cursor=None, limit=100
    )
    assert len(history.items) == 100 and history.next_cursor
    rest = svc.schedule.history(
        job_id, tenant="t", start=None, end=at(0), status="SUCCEEDED", cursor=history.next_cursor, limit=100
    )
    assert len(rest.items) == 68 and rest.next_cursor is None
    assert all(r.kind == "backfill" and r.lateness_ms() is not None for r in history.items + rest.items)


def test_a_backfill_run_is_late_from_when_the_backfill_asked_for_it_not_from_its_tick(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # Given an hourly job and, at 12:00:30, a backfill of the day before's 06:00-09:00
    job_id = recurring(svc, cron_expr="0 * * * *")
    clock.set(at(0, 30))
    request = BackfillRequest.model_validate(
        {"from": "2026-11-29T06:00:00+00:00", "to": "2026-11-29T09:00:00+00:00"}
    )
    asked = svc.schedule.backfill(job_id, request, tenant="t")
    # When its runs start 2 s after the request
    clock.set(at(0, 32))
    pump.run_due(at(0, 32))
    # Then each is 2 s late (from the request), in the runs listing and in the job view alike
    listed = svc.schedule.history(
        job_id, tenant="t", start=None, end=at(0), status=None, cursor=None, limit=10
    ).items
    assert asked.created == 3 and [(r.kind, r.status) for r in listed] == [("backfill", "SUCCEEDED")] * 3
    assert [r.lateness_ms() for r in listed] == [2000, 2000, 2000]
    shown = svc.job_service.get(job_id, tenant="t").runs
    assert [(r.run_id, r.lateness_ms()) for r in shown] == [(r.run_id, r.lateness_ms()) for r in listed]


def test_history_pages_newest_first_with_lateness(svc: Services, pump: Pump, clock: FakeClock) -> None:
    job_id = recurring(svc, cron_expr="*/10 * * * * *")
    pump.run_due(at(1, 30))
    page = svc.schedule.history(
        job_id, tenant="t", start=at(0, 30), end=at(1), status=None, cursor=None, limit=2
    )
    assert [i.scheduled_for for i in page.items] == [at(0, 50), at(0, 40)]
    assert page.items[0].lateness_ms() == 0 and page.items[0].status == "SUCCEEDED"
    rest = svc.schedule.history(
        job_id, tenant="t", start=at(0, 30), end=at(1), status=None, cursor=page.next_cursor, limit=10
    )
    assert [i.scheduled_for for i in rest.items] == [at(0, 30)]


# -- bad input -----------------------------------------------------------------------------------------
def test_bad_recurring_requests_are_clear_4xx(svc: Services, pump: Pump, clock: FakeClock) -> None:
    with pytest.raises(ValidationFailed, match="jitter_seconds"):
        recurring(svc, cron_expr="*/10 * * * * *", jitter_seconds=10)
    job_id = recurring(svc, cron_expr="0 * * * *")
    with pytest.raises(ValidationFailed, match="more than 1000 ticks"):
        svc.schedule.backfill(
            job_id,
            BackfillRequest.model_validate({"from": "2026-09-01T00:00Z", "to": "2026-11-01T00:00Z"}),
            tenant="t",
        )
    with pytest.raises(ValidationFailed, match="future"):
        svc.schedule.backfill(
            job_id,
            BackfillRequest.model_validate({"from": "2026-11-30T00:00Z", "to": "2026-12-30T00:00Z"}),
            tenant="t",
        )
    svc.job_service.cancel(job_id, tenant="t")
    with pytest.raises(Conflict, match="CANCELLED"):
        svc.schedule.edit(job_id, PatchJobRequest(payload={"x": 1}), tenant="t")
    one_off = svc.job_service.submit(
        CreateJobRequest(type="one_off", handler="demo.echo", run_at=at(0, 5)),
        tenant="t",
        idempotency_key=None,
    ).job_id
    pump.run_due(at(0, 5))
    with pytest.raises(Conflict, match="nothing to pause"):
        svc.schedule.pause(one_off, tenant="t")
    assert "demo.echo" in registry


def test_a_tick_held_up_front_but_not_started_gives_the_job_back(
    svc: Services, pump: Pump, clock: FakeClock
) -> None:
    # ticks of a "skip" job carry the guard hint: the worker's hold is its read of the job. A tick
    # that then does not start (paused job) must not leave the job held for the next one.
    job_id = recurring(svc)  # 12:01 handed over at creation, guarded
    svc.schedule.pause(job_id, tenant="t")
    pump.run_due(at(1))
    assert fates(svc, job_id) == {} and pump.outcomes["paused"] == 1  # left to the resume
    assert svc.jobs.get_job(job_id).active_run is None  # type: ignore[union-attr]
    svc.schedule.resume(job_id, tenant="t")
    tick_every_minute(svc, clock, pump, at(3, 30))
    assert fates(svc, job_id)["12:03:00"] == "SUCCEEDED"
