"""Cron parsing and fire-time rules, DST included, against spelled-out reference timelines."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobsched import cron
from jobsched.cron import CronError, CronSchedule

NY = "America/New_York"
BERLIN = "Europe/Berlin"


def z(text: str) -> datetime:
    """An aware UTC datetime from 'YYYY-MM-DDTHH:MM[:SS]'."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def zs(*texts: str) -> list[datetime]:
    return [z(text) for text in texts]


# ---------------------------------------------------------------------------------------------
# Basics


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("*/15 * * * *", "2026-01-01T00:00", ["2026-01-01T00:15", "2026-01-01T00:30", "2026-01-01T00:45"]),
        ("0 9 * * 1-5", "2026-01-02T10:00", ["2026-01-05T09:00", "2026-01-06T09:00", "2026-01-07T09:00"]),
        ("0 0 1 * *", "2026-01-15T00:00", ["2026-02-01T00:00", "2026-03-01T00:00", "2026-04-01T00:00"]),
        ("30 0 12 * * *", "2026-01-01T00:00", ["2026-01-01T12:00:30", "2026-01-02T12:00:30"]),
        ("0 0 * * 7", "2026-01-01T00:00", ["2026-01-04T00:00", "2026-01-11T00:00"]),  # 7 is Sunday
        ("0 0 * FEB-mar Mon", "2026-02-20T00:00", ["2026-02-23T00:00", "2026-03-02T00:00"]),
        ("5/20 * * * *", "2026-01-01T00:00", ["2026-01-01T00:05", "2026-01-01T00:25", "2026-01-01T00:45"]),
        # Day-of-month and day-of-week both restricted: either matches (13th, or any Friday).
        ("0 0 13 * 5", "2026-02-01T00:00", ["2026-02-06T00:00", "2026-02-13T00:00", "2026-02-20T00:00"]),
        ("0 0 29 2 *", "2026-01-01T00:00", ["2028-02-29T00:00", "2032-02-29T00:00"]),
        ("@hourly", "2026-01-01T00:30", ["2026-01-01T01:00", "2026-01-01T02:00"]),
        ("@daily", "2026-01-01T00:00", ["2026-01-02T00:00", "2026-01-03T00:00"]),
        ("@weekly", "2026-01-01T00:00", ["2026-01-04T00:00", "2026-01-11T00:00"]),
        ("@monthly", "2026-01-01T00:00", ["2026-02-01T00:00", "2026-03-01T00:00"]),
        ("@yearly", "2026-01-01T00:00", ["2027-01-01T00:00", "2028-01-01T00:00"]),
    ],
)
def test_it_fires_at_the_reference_times(expr: str, after: str, expected: list[str]) -> None:
    schedule = cron.parse(expr)

    assert schedule.ticks(z(after), z("2100-01-01T00:00"), limit=len(expected)) == zs(*expected)
    assert schedule.next_after(z(after)) == z(expected[0])


def test_it_fires_six_times_a_minute_for_a_ten_second_step() -> None:
    # Given a 6-field expression whose first field is seconds
    schedule = cron.parse("*/10 * * * * *")

    # When one minute is listed
    got = schedule.ticks(z("2026-05-01T12:00:00") - timedelta(seconds=1), z("2026-05-01T12:00:59"), limit=100)

    # Then it fires at :00 :10 ... :50
    assert got == [z("2026-05-01T12:00:00") + timedelta(seconds=10 * i) for i in range(6)]


def test_it_excludes_after_and_includes_until() -> None:
    schedule = cron.parse("0 * * * *")

    got = schedule.ticks(z("2026-01-01T01:00"), z("2026-01-01T04:00"), limit=10)

    assert got == zs("2026-01-01T02:00", "2026-01-01T03:00", "2026-01-01T04:00")


def test_it_returns_at_most_limit_ticks_oldest_first() -> None:
    schedule = cron.parse("*/10 * * * * *")

    # A ten-year window must not be enumerated: the limit bounds the work.
    got = schedule.ticks(z("2026-01-01T00:00"), z("2036-01-01T00:00"), limit=3)

    assert got == zs("2026-01-01T00:00:10", "2026-01-01T00:00:20", "2026-01-01T00:00:30")


@pytest.mark.parametrize(
    ("after", "until", "limit"),
    [
        ("2026-01-01T00:00", "2026-01-01T05:00", 0),
        ("2026-01-01T05:00", "2026-01-01T05:00", 10),
        ("2026-01-01T05:00", "2026-01-01T01:00", 10),
        ("2026-01-01T00:01", "2026-01-01T00:59", 10),
    ],
)
def test_it_returns_no_ticks_for_an_empty_window_or_zero_limit(after: str, until: str, limit: int) -> None:
    assert cron.parse("0 * * * *").ticks(z(after), z(until), limit=limit) == []


def test_it_rejects_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        cron.parse("0 * * * *").ticks(z("2026-01-01T00:00"), z("2026-01-02T00:00"), limit=-1)


def test_it_returns_aware_utc_for_an_aware_non_utc_input() -> None:
    # Given `after` expressed in Tokyo time (00:30 local = 15:30Z the day before)
    after = datetime(2026, 1, 2, 0, 30, tzinfo=ZoneInfo("Asia/Tokyo"))

    got = cron.parse("0 * * * *").next_after(after)

    assert got == z("2026-01-01T16:00")
    assert got.tzinfo is UTC


def test_it_ignores_sub_second_parts_of_after() -> None:
    schedule = cron.parse("*/10 * * * * *")

    assert schedule.next_after(z("2026-01-01T00:00:10") + timedelta(microseconds=1)) == z(
        "2026-01-01T00:00:20"
    )
    assert schedule.next_after(z("2026-01-01T00:00:10") - timedelta(microseconds=1)) == z(
        "2026-01-01T00:00:10"
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.next_after(datetime(2026, 1, 1)),
        lambda s: s.ticks(datetime(2026, 1, 1), z("2026-01-02T00:00"), limit=5),
        lambda s: s.ticks(z("2026-01-01T00:00"), datetime(2026, 1, 2), limit=5),
    ],
)
def test_it_rejects_naive_datetimes(call: Callable[[CronSchedule], object]) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        call(cron.parse("0 * * * *"))


def test_it_normalises_whitespace_and_caches_parse() -> None:
    schedule = cron.parse("  */5   *  * * *\t")

    assert schedule.expr == "*/5 * * * *"
    assert schedule.timezone == "UTC"
    assert cron.parse("  */5   *  * * *\t") is schedule
    assert CronSchedule("*/5 * * * *", "UTC") == schedule
    assert hash(CronSchedule("*/5 * * * *", "UTC")) == hash(schedule)


def test_it_validates_on_direct_construction() -> None:
    with pytest.raises(CronError, match="5 fields"):
        CronSchedule("* * *", "UTC")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [("*/10 * * * * *", True), ("*/10 * * * *", False), ("@hourly", False), (" 0  0 * * * * ", True)],
)
def test_it_tells_whether_the_first_field_is_seconds(expr: str, expected: bool) -> None:
    assert cron.seconds_field(expr) is expected


# ---------------------------------------------------------------------------------------------
# DST: one fire per local day for daily schedules, around both 2026 transitions of each zone.

DAILY_ACROSS_DST = [
    # (expr, zone, transition day, five consecutive fires (day-2 .. day+2) in UTC)
    # New York spring-forward 2026-03-08 02:00 EST -> 03:00 EDT
    ("0 1 * * *", NY, "2026-03-08",
     ["2026-03-06T06:00", "2026-03-07T06:00", "2026-03-08T06:00", "2026-03-09T05:00", "2026-03-10T05:00"]),
    ("30 2 * * *", NY, "2026-03-08",  # 02:30 does not exist: 03:00 EDT
     ["2026-03-06T07:30", "2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30", "2026-03-10T06:30"]),
    # New York fall-back 2026-11-01 02:00 EDT -> 01:00 EST
    ("0 1 * * *", NY, "2026-11-01",  # 01:00 happens twice: the EDT one
     ["2026-10-30T05:00", "2026-10-31T05:00", "2026-11-01T05:00", "2026-11-02T06:00", "2026-11-03T06:00"]),
    ("30 2 * * *", NY, "2026-11-01",
     ["2026-10-30T06:30", "2026-10-31T06:30", "2026-11-01T07:30", "2026-11-02T07:30", "2026-11-03T07:30"]),
    # Berlin spring-forward 2026-03-29 02:00 CET -> 03:00 CEST
    ("0 1 * * *", BERLIN, "2026-03-29",
     ["2026-03-27T00:00", "2026-03-28T00:00", "2026-03-29T00:00", "2026-03-29T23:00", "2026-03-30T23:00"]),
    ("30 2 * * *", BERLIN, "2026-03-29",  # 02:30 does not exist: 03:00 CEST
     ["2026-03-27T01:30", "2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30", "2026-03-31T00:30"]),
    # Berlin fall-back 2026-10-25 03:00 CEST -> 02:00 CET
    ("0 1 * * *", BERLIN, "2026-10-25",
     ["2026-10-22T23:00", "2026-10-23T23:00", "2026-10-24T23:00", "2026-10-26T00:00", "2026-10-27T00:00"]),
    ("30 2 * * *", BERLIN, "2026-10-25",  # 02:30 happens twice: the CEST one
     ["2026-10-23T00:30", "2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30", "2026-10-27T01:30"]),
]  # fmt: skip


@pytest.mark.parametrize(("expr", "zone", "day", "expected"), DAILY_ACROSS_DST)
def test_it_fires_a_daily_schedule_once_per_local_day_across_dst(
    expr: str, zone: str, day: str, expected: list[str]
) -> None:
    # Given the five local days centred on a transition day
    tz = ZoneInfo(zone)
    first_day = date.fromisoformat(day) - timedelta(days=2)
    start = datetime.combine(first_day, datetime.min.time(), tzinfo=tz)
    end = datetime.combine(first_day + timedelta(days=5), datetime.min.time(), tzinfo=tz)

    # When every tick in that window is listed
    got = cron.parse(expr, zone).ticks(start, end, limit=100)

    # Then it matches the reference timeline and each local day fires exactly once
    assert got == zs(*expected)
    per_day = Counter(t.astimezone(tz).date() for t in got)
    assert per_day == {first_day + timedelta(days=i): 1 for i in range(5)}


def test_it_fires_a_repeated_wall_time_once_at_its_first_occurrence() -> None:
    # Given 01:30 New York, which happens at 05:30Z (EDT) and again at 06:30Z (EST) on 2026-11-01
    schedule = cron.parse("30 1 * * *", NY)

    # When the day is listed, or stepped through with next_after
    got = schedule.ticks(z("2026-11-01T00:00"), z("2026-11-02T00:00"), limit=10)
    stepped = schedule.next_after(z("2026-11-01T05:30"))

    # Then only the first occurrence fires (croniter alone would also fire at 06:30Z)
    assert got == zs("2026-11-01T05:30")
    assert stepped == z("2026-11-02T06:30")


def test_it_fires_a_skipped_wall_time_at_the_end_of_the_gap() -> None:
    # Given 02:30 New York, which does not exist on 2026-03-08 (02:00 EST jumps to 03:00 EDT)
    schedule = cron.parse("30 2 * * *", NY)

    got = schedule.ticks(z("2026-03-08T00:00"), z("2026-03-09T00:00"), limit=10)

    assert got == zs("2026-03-08T07:00")
    assert schedule.next_after(z("2026-03-08T06:59:59")) == z("2026-03-08T07:00")
    assert schedule.next_after(z("2026-03-08T07:00")) == z("2026-03-09T06:30")


# ---------------------------------------------------------------------------------------------
# DST: sub-daily schedules. Every-hour schedules follow real time through both transitions;
# hour-pinned ones fire once per wall time.

SUB_DAILY_ACROSS_DST = [
    # (expr, zone, after, until, expected)
    # Fall-back, every hour: both 01:00s (EDT 05:00Z, EST 06:00Z) are distinct hourly instants.
    ("0 * * * *", NY, "2026-11-01T03:30", "2026-11-01T08:00",
     ["2026-11-01T04:00", "2026-11-01T05:00", "2026-11-01T06:00", "2026-11-01T07:00", "2026-11-01T08:00"]),
    ("*/30 * * * *", NY, "2026-11-01T04:00", "2026-11-01T07:00",
     ["2026-11-01T04:30", "2026-11-01T05:00", "2026-11-01T05:30", "2026-11-01T06:00",
      "2026-11-01T06:30", "2026-11-01T07:00"]),
    ("*/10 * * * * *", NY, "2026-11-01T05:59:30", "2026-11-01T06:00:30",
     ["2026-11-01T05:59:40", "2026-11-01T05:59:50", "2026-11-01T06:00:00", "2026-11-01T06:00:10",
      "2026-11-01T06:00:20", "2026-11-01T06:00:30"]),
    # Fall-back, hour pinned: the repeated 01:xx wall times fire in the EDT pass only.
    ("*/15 1 * * *", NY, "2026-11-01T04:00", "2026-11-01T08:00",
     ["2026-11-01T05:00", "2026-11-01T05:15", "2026-11-01T05:30", "2026-11-01T05:45"]),
    ("0 0-2 * * *", NY, "2026-11-01T03:00", "2026-11-01T08:00",
     ["2026-11-01T04:00", "2026-11-01T05:00", "2026-11-01T07:00"]),
    ("0,30 2 * * *", BERLIN, "2026-10-24T23:00", "2026-10-25T03:00",
     ["2026-10-25T00:00", "2026-10-25T00:30"]),
    # Spring-forward, every hour: the skipped 02:xx wall times do not fire; rhythm is unbroken.
    ("*/15 * * * *", NY, "2026-03-08T06:00", "2026-03-08T07:30",
     ["2026-03-08T06:15", "2026-03-08T06:30", "2026-03-08T06:45", "2026-03-08T07:00",
      "2026-03-08T07:15", "2026-03-08T07:30"]),
    ("30 * * * *", NY, "2026-03-08T05:00", "2026-03-08T09:00",
     ["2026-03-08T05:30", "2026-03-08T06:30", "2026-03-08T07:30", "2026-03-08T08:30"]),
    ("0 * * * *", BERLIN, "2026-03-28T23:30", "2026-03-29T02:00",
     ["2026-03-29T00:00", "2026-03-29T01:00", "2026-03-29T02:00"]),
    # Spring-forward, hour pinned: skipped wall times collapse into one fire at 03:00 local.
    ("*/15 2 * * *", NY, "2026-03-08T05:00", "2026-03-08T09:00", ["2026-03-08T07:00"]),
    ("0 2,3 * * *", NY, "2026-03-08T05:00", "2026-03-08T09:00", ["2026-03-08T07:00"]),
    ("30 2,3 * * *", NY, "2026-03-08T05:00", "2026-03-08T09:00", ["2026-03-08T07:00", "2026-03-08T07:30"]),
    ("0 0 2 * * *", BERLIN, "2026-03-29T00:00", "2026-03-29T02:00", ["2026-03-29T01:00"]),
]  # fmt: skip


@pytest.mark.parametrize(("expr", "zone", "after", "until", "expected"), SUB_DAILY_ACROSS_DST)
def test_it_follows_the_documented_sub_daily_dst_rules(
    expr: str, zone: str, after: str, until: str, expected: list[str]
) -> None:
    assert cron.parse(expr, zone).ticks(z(after), z(until), limit=100) == zs(*expected)


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        # `after` in the EDT pass of 01:xx: the EST pass (06:00Z on) is still ahead.
        ("*/15 * * * *", "2026-11-01T05:50", "2026-11-01T06:00"),
        # `after` in the EST pass.
        ("*/15 * * * *", "2026-11-01T06:10", "2026-11-01T06:15"),
        # An hour-pinned wall time already fired in the EDT pass is not fired again.
        ("*/15 1 * * *", "2026-11-01T05:50", "2026-11-02T06:00"),
        ("*/15 1 * * *", "2026-11-01T04:59", "2026-11-01T05:00"),
    ],
)
def test_it_resumes_correctly_from_inside_the_repeated_hour(expr: str, after: str, expected: str) -> None:
    assert cron.parse(expr, NY).next_after(z(after)) == z(expected)


# ---------------------------------------------------------------------------------------------
# DST: a brute-force oracle, minute by minute, of the documented rules.

ORACLE_CASES = [
    # (expr, minutes, hours, zone, window start UTC); every case spans a transition.
    ("*/15 * * * *", range(0, 60, 15), range(24), NY, "2026-11-01T02:00"),
    ("*/15 * * * *", range(0, 60, 15), range(24), NY, "2026-03-08T03:00"),
    ("10,40 * * * *", (10, 40), range(24), NY, "2026-03-08T03:00"),
    ("*/20 1,2 * * *", range(0, 60, 20), (1, 2), NY, "2026-11-01T02:00"),
    ("*/20 1,2 * * *", range(0, 60, 20), (1, 2), NY, "2026-03-08T03:00"),
    ("45 0-3 * * *", (45,), range(4), BERLIN, "2026-10-24T20:00"),
    ("45 0-3 * * *", (45,), range(4), BERLIN, "2026-03-28T20:00"),
    ("0,30 * * * *", (0, 30), range(24), "Australia/Lord_Howe", "2026-04-04T12:00"),  # 30-minute shift
    ("0,30 * * * *", (0, 30), range(24), "Australia/Lord_Howe", "2026-10-03T12:00"),
    ("0,30 2 * * *", (0, 30), (2,), "Australia/Lord_Howe", "2026-10-03T12:00"),
    ("10 1 * * *", (10,), (1,), "Australia/Lord_Howe", "2026-04-04T12:00"),
    ("0 0 * * *", (0,), (0,), "America/Santiago", "2026-09-05T12:00"),  # midnight does not exist
    ("*/30 * * * *", range(0, 60, 30), range(24), "America/Santiago", "2026-04-04T20:00"),
]


def _oracle(
    minutes: range | tuple[int, ...],
    hours: range | tuple[int, ...],
    zone: str,
    start: datetime,
    end: datetime,
) -> list[datetime]:
    tz = ZoneInfo(zone)
    span = int((end - start).total_seconds() // 60)
    instants = [start + timedelta(minutes=i) for i in range(span + 1)]
    locals_ = [t.astimezone(tz).replace(tzinfo=None) for t in instants]
    every_hour = set(hours) == set(range(24))
    if every_hour:
        # Every instant whose local wall time matches.
        return [
            t
            for t, w in zip(instants, locals_, strict=True)
            if t > start and w.minute in minutes and w.hour in hours
        ]
    # Each matching wall time fires when the local clock first reads it or later.
    reached, peak = [], datetime.min
    for wall in locals_:
        peak = max(peak, wall)
        reached.append(peak)
    fires = set()
    wall = min(locals_).replace(second=0)
    while wall <= reached[-1]:
        if wall.minute in minutes and wall.hour in hours:
            fires.add(instants[bisect.bisect_left(reached, wall)])
        wall += timedelta(minutes=1)
    return sorted(t for t in fires if t > start)


@pytest.mark.parametrize(("expr", "minutes", "hours", "zone", "start"), ORACLE_CASES)
def test_it_agrees_with_a_minute_by_minute_oracle(
    expr: str, minutes: range | tuple[int, ...], hours: range | tuple[int, ...], zone: str, start: str
) -> None:
    # Given a 30-hour window across a transition
    begin = z(start)
    end = begin + timedelta(hours=30)
    schedule = cron.parse(expr, zone)

    # When listing it whole, and resuming from every 10th minute inside it
    whole = schedule.ticks(begin, end, limit=10_000)

    # Then it is the oracle's timeline, strictly increasing, aware UTC, and resuming never disagrees
    assert whole == _oracle(minutes, hours, zone, begin, end)
    assert all(a < b for a, b in itertools.pairwise(whole))
    assert all(t.tzinfo is UTC for t in whole)
    for i in range(0, 30 * 60, 10):
        resume = begin + timedelta(minutes=i)
        assert schedule.ticks(resume, end, limit=10_000) == [t for t in whole if t > resume]


def _windows_around_transitions(zone: str, year: int) -> list[tuple[datetime, datetime]]:
    """Three-day UTC windows around each offset change of `zone` in `year` (one fixed window if none)."""
    tz = ZoneInfo(zone)

    def noon(day: date) -> datetime:
        return datetime.combine(day, time(12), tzinfo=tz)

    windows, day = [], date(year, 1, 2)
    while day.year == year:
        if noon(day).utcoffset() != noon(day - timedelta(days=1)).utcoffset():
            windows.append(
                (noon(day - timedelta(days=2)).astimezone(UTC), noon(day + timedelta(days=1)).astimezone(UTC))
            )
        day += timedelta(days=1)
    return windows or [(z(f"{year}-01-01T00:00"), z(f"{year}-01-04T00:00"))]


@pytest.mark.parametrize(
    "zone", [NY, BERLIN, "Australia/Sydney", "Australia/Lord_Howe", "America/Santiago", "UTC"]
)
@pytest.mark.parametrize(
    "expr", ["30 1 * * *", "0 2 * * *", "*/20 * * * *", "0 */2 * * *", "*/15 1-3 * * *", "0 */5 * * * *"]
)
def test_it_steps_with_next_after_exactly_as_ticks_lists_it_around_transitions(expr: str, zone: str) -> None:
    schedule = cron.parse(expr, zone)
    for begin, end in _windows_around_transitions(zone, 2026):
        listed = schedule.ticks(begin, end, limit=100_000)

        stepped, cursor = [], begin
        while (cursor := schedule.next_after(cursor)) <= end:
            stepped.append(cursor)
        assert listed == stepped
        assert listed
        assert all(a < b for a, b in itertools.pairwise(listed))


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("expr", "zone", "message"),
    [
        ("* * * *", "UTC", r"must have 5 fields .* or 6 .*got 4"),
        ("* * * * * * *", "UTC", r"must have 5 fields .* or 6 .*got 7"),
        ("0 0 1 1 * 2026 x", "UTC", r"got 7"),
        ("", "UTC", r"got 0"),
        ("61 * * * *", "UTC", r"minute field '61': 61 is out of range 0-59"),
        ("0 24 * * *", "UTC", r"hour field '24': 24 is out of range 0-23"),
        ("0 0 0 * *", "UTC", r"day-of-month field '0': 0 is out of range 1-31"),
        ("0 0 * 13 *", "UTC", r"month field '13'"),
        ("0 0 * * 8", "UTC", r"day-of-week field '8'"),
        ("60 * * * * *", "UTC", r"second field '60'"),
        ("hello world foo bar baz", "UTC", r"minute field 'hello'.*not a number"),
        ("0 0 * foo *", "UTC", r"month field 'foo'.*not a number or a three-letter name"),
        ("*/0 * * * *", "UTC", r"step 0"),
        ("1-2-3 * * * *", "UTC", r"'1-2-3' is not"),
        ("0 0 * * 5-2", "UTC", r"range 5-2 runs backwards"),
        ("0 0 L * *", "UTC", r"day-of-month field 'L'"),
        ("0 0 * * 5#2", "UTC", r"day-of-week field '5#2'"),
        ("0 0 ? * *", "UTC", r"day-of-month field '\?'"),
        ("H * * * *", "UTC", r"minute field 'H'"),
        ("R * * * *", "UTC", r"minute field 'R'"),
        ("@reboot", "UTC", r"@reboot"),
        ("@every 5m", "UTC", r"unknown macro"),
        ("@daily 5", "UTC", r"unknown macro"),
        ("0 0 30 2 *", "UTC", r"never fires"),
        ("0 0 31 4,6,9,11 *", "UTC", r"never fires"),
        ("0 0 * * *", "Mars/Olympus_Mons", r"'Mars/Olympus_Mons' is not an IANA timezone"),
        ("0 0 * * *", "", r"'' is not an IANA timezone"),
        ("0 0 * * *", "../../etc/passwd", r"is not an IANA timezone"),
    ],
)
def test_it_rejects_unusable_input_naming_the_problem(expr: str, zone: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        cron.parse(expr, zone)


@pytest.mark.parametrize(
    ("expr", "zone", "field"),
    [
        ("61 * * * *", "UTC", "cron_expr"),
        ("* * * *", "UTC", "cron_expr"),
        ("@every 5m", "UTC", "cron_expr"),
        ("0 0 30 2 *", "UTC", "cron_expr"),
        ("0 0 * * *", "Mars/Olympus_Mons", "timezone"),
    ],
)
def test_it_names_the_input_at_fault_as_a_field_and_not_again_in_the_message(
    expr: str, zone: str, field: str
) -> None:
    # Given an expression or a timezone that cannot be used
    # When it is parsed
    with pytest.raises(CronError) as raised:
        cron.parse(expr, zone)
    # Then the error names the input at fault once, as its field, so "<field>: <message>" reads once
    assert raised.value.field == field
    assert not str(raised.value).startswith(field)


def test_it_raises_cron_error_as_a_value_error() -> None:
    with pytest.raises(ValueError):
        cron.parse("not a cron")


def test_it_accepts_expressions_that_fire_rarely() -> None:
    # 31st only in 31-day months, or the 30th/31st in February OR on Mondays.
    assert cron.parse("0 0 31 1-12 *").next_after(z("2026-04-01T00:00")) == z("2026-05-31T00:00")
    assert cron.parse("0 0 30 2 1").next_after(z("2026-02-01T00:00")) == z("2026-02-02T00:00")


# ---------------------------------------------------------------------------------------------
# Minimum interval


@pytest.mark.parametrize(
    ("expr", "seconds"),
    [
        ("*/10 * * * * *", 10),
        ("0 * * * *", 3600),
        ("0 2 * * *", 86400),
        ("*/15 * * * *", 900),
        ("0 9,17 * * 1-5", 8 * 3600),
        ("0 0,23 * * *", 3600),  # 23:00 -> 00:00 next day
        ("0 0 1 * *", 28 * 86400),
        ("0 0 29 2 *", 4 * 365 * 86400 + 86400),
        ("@weekly", 7 * 86400),
    ],
)
def test_it_reports_the_smallest_interval_between_fires(expr: str, seconds: int) -> None:
    assert cron.parse(expr, NY).min_interval_seconds() == seconds
