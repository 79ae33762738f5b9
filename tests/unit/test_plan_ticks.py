"""The dispatcher's planning of a job's ticks (pure): catch-up, bounds, and DST as it will fire."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobsched import cron
from jobsched.domain.models import SchedulePolicy
from jobsched.services.dispatch import DueEntry, plan_ticks

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def entry(first: datetime, cron_expr: str = "* * * * *", tz: str = "UTC", **policy: object) -> DueEntry:
    return DueEntry(
        job_id="job_x", tenant="t", type="recurring", next_run_at=first, cron_expr=cron_expr, timezone=tz,
        policy=SchedulePolicy.model_validate(policy),
    )  # fmt: skip


def m(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


@pytest.mark.parametrize(
    ("catchup", "max_catchup", "run", "skip"),
    [
        ("one", 10, [m(5), m(6), m(7)], [(m(i), "coalesced") for i in range(1, 5)]),
        ("none", 10, [m(6), m(7)], [(m(i), "missed") for i in range(1, 6)]),
        ("all", 10, [m(i) for i in range(1, 8)], []),
        ("all", 3, [m(3), m(4), m(5), m(6), m(7)], [(m(1), "catchup_limit"), (m(2), "catchup_limit")]),
    ],
)
def test_it_applies_the_catchup_policy_to_missed_ticks(
    catchup: str, max_catchup: int, run: list[datetime], skip: list[tuple[datetime, str]]
) -> None:
    # Given ticks 12:01..12:05 missed (before 12:05:30) and a window up to 12:07
    plan = plan_ticks(
        entry(m(1), catchup=catchup, max_catchup=max_catchup),
        until=m(7),
        missed_before=m(5) + timedelta(seconds=30),
    )
    assert plan.run == run and plan.skip == skip and plan.following == m(8)


def test_it_records_a_huge_backlog_skipped_pass_by_pass() -> None:
    plan = plan_ticks(entry(T0 - timedelta(days=30)), until=T0, missed_before=T0 - timedelta(minutes=1))
    # the pending tick and the next 1,000 are recorded; the next pass goes on from there
    assert len(plan.skip) == 1001 and plan.run == [] and {r for _, r in plan.skip} == {"catchup_backlog"}
    assert plan.following == T0 - timedelta(days=30) + timedelta(minutes=1001)


def test_it_honours_end_at_and_max_runs() -> None:
    plan = plan_ticks(entry(m(1), end_at=m(3)), until=m(10), missed_before=m(0))
    assert plan.run == [m(1), m(2), m(3)] and plan.following is None
    capped = dataclasses.replace(entry(m(1), max_runs=5), dispatched=3)
    plan = plan_ticks(capped, until=m(10), missed_before=m(0))
    assert plan.run == [m(1), m(2)] and plan.following is None


def test_a_one_off_is_one_tick_and_leaves_the_index() -> None:
    one = DueEntry(job_id="j", tenant="t", type="one_off", next_run_at=m(1), cron_expr=None, timezone="UTC")
    plan = plan_ticks(one, until=m(2), missed_before=m(0))
    assert plan.run == [m(1)] and plan.following is None
    assert plan_ticks(one, until=m(0), missed_before=m(0)).run == []


@pytest.mark.parametrize("tz", ["America/New_York", "Europe/Berlin"])
@pytest.mark.parametrize("cron_expr", ["0 1 * * *", "30 2 * * *"])
@pytest.mark.parametrize("month", [3, 10])
def test_it_fires_a_daily_job_exactly_once_per_local_day_across_2026_dst(
    tz: str, cron_expr: str, month: int
) -> None:
    # Given a dispatcher passing once a minute-ish (here every 10 minutes, look-ahead 15) across a
    # week around the zone's 2026 transition in `month` (US: Mar 8 / Nov 1 are covered by the
    # window start; EU: Mar 29 / Oct 25)
    start = (
        datetime(2026, month, 24 if month == 3 else 22, tzinfo=UTC)
        if tz == "Europe/Berlin"
        else (datetime(2026, 3, 5, tzinfo=UTC) if month == 3 else datetime(2026, 10, 29, tzinfo=UTC))
    )
    schedule = cron.parse(cron_expr, tz)
    pending = schedule.next_after(start)
    fired: list[datetime] = []
    now = start
    while now < start + timedelta(days=7):
        plan = plan_ticks(
            entry(pending, cron_expr, tz),
            until=now + timedelta(minutes=15),
            missed_before=now - timedelta(minutes=20),
        )
        fired += plan.run
        assert not plan.skip
        pending = plan.following or pending
        now += timedelta(minutes=10)
    days = Counter(t.astimezone(ZoneInfo(tz)).date() for t in fired)
    assert len(fired) == 7 and set(days.values()) == {1}


def test_a_resumes_plan_sends_the_queued_ticks_due_soon_again_and_counts_none_of_them_twice() -> None:
    # Given a job every minute resumed at 12:02:30 from a pause since 12:00:30: 12:01 and 12:02 were
    # missed, and 12:03 .. 12:05 were handed over before the pause and still wait in the queue
    plan = plan_ticks(
        entry(m(1)),
        until=m(7),
        missed_before=m(2) + timedelta(seconds=30),
        queued_before=m(6),
        resend_before=m(3) + timedelta(seconds=40),
    )
    # Then the catch-up decides the missed ones, the queued tick due soon (12:03) goes out again, the
    # other queued ones are left to their messages, and only the ticks sent for the first time count
    assert plan.skip == [(m(1), "coalesced")]
    assert plan.run == [m(2), m(6), m(7)]
    assert plan.resent == [m(3)]
    assert plan.following == m(8)
