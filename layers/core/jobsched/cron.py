"""Cron schedules evaluated in an IANA timezone, with fixed, documented DST rules (the one croniter user).

Syntax
------
* 5 fields ``minute hour day-of-month month day-of-week`` or 6 fields with a leading ``second``.
* Each field is a comma list of ``*``, ``N``, ``A-B`` (A <= B), each optionally ``/STEP``; ``N/STEP``
  means ``N-max/STEP``. Months and weekdays also take three-letter English names (``jan``, ``mon``);
  day-of-week 7 is Sunday.
* Macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly`` stand for their usual
  5-field forms. ``@reboot`` and the non-portable extensions (``L W # ? H R``, a year field,
  wrap-around ranges such as ``5-2``) are rejected rather than given a croniter-specific meaning.
* Day-of-month and day-of-week: when both are restricted (neither covers its whole range) a day
  matches if EITHER matches, as in classic cron; otherwise the restricted one alone decides.
* An expression that can never fire (``0 0 30 2 *``) is rejected.

DST rules
---------
Fields are matched against the local wall clock of the schedule's zone. Results are aware UTC
datetimes, strictly increasing; two wall times that resolve to the same instant fire once.
A schedule is "every hour" when its hour field covers 0-23 (``*``, ``*/1``, ``0-23``), else
"hour pinned".

+--------------------+--------------------------------------+--------------------------------------+
| schedule           | spring-forward gap                   | fall-back overlap                    |
|                    | (local wall time skipped)            | (local wall time repeated)           |
+====================+======================================+======================================+
| hour pinned        | fires ONCE, at the first instant     | fires ONCE, at the first occurrence  |
| ``30 2 * * *``     | after the gap; several skipped wall  | (fold=0). ``30 1 * * *`` New_York    |
| ``*/15 1 * * *``   | times collapse into that one fire.   | 2026-11-01 -> 01:30 EDT = 05:30Z     |
| ``0 2,3 * * *``    | ``30 2 * * *`` New_York 2026-03-08   | only (not 06:30Z).                   |
|                    | -> 03:00 EDT = 07:00Z.               |                                      |
+--------------------+--------------------------------------+--------------------------------------+
| every hour         | skipped wall times do not fire; the  | fires at BOTH occurrences, keeping   |
| ``0 * * * *``      | schedule keeps its real-time rhythm. | elapsed real time like UTC.          |
| ``*/15 * * * *``   | ``30 * * * *`` New_York 2026-03-08   | ``0 * * * *`` New_York 2026-11-01 -> |
| ``*/10 * * * * *`` | -> 06:30Z, 07:30Z (no 07:00Z).       | 05:00Z (01:00 EDT), 06:00Z (EST).    |
+--------------------+--------------------------------------+--------------------------------------+

Put differently: an hour-pinned schedule fires when the local clock first reaches each matching wall
time; an every-hour schedule fires at each instant whose local wall time matches.

croniter 7.0.0 on its own (aware start) already collapses a skipped wall time onto the end of the gap,
but it fires an hour-pinned time in the repeated hour twice (``30 1 * * *`` -> 05:30Z and 06:30Z), so
it is only used here to enumerate wall times (DST-free), which this module resolves with zoneinfo.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

__all__ = ["CronError", "CronSchedule", "parse", "seconds_field"]


class CronError(ValueError):
    """A cron expression or timezone that cannot be used.

    `field` names the input at fault ("cron_expr" or "timezone"); the message states the problem
    and quotes the value, without the field's name, so a caller that prefixes it says it once.
    """

    def __init__(self, message: str, *, field: str = "cron_expr") -> None:
        super().__init__(message)
        self.field = field


_MACROS: Final[dict[str, str]] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES: Final[dict[str, int]] = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
    )
}
_DOW_NAMES: Final[dict[str, int]] = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: dict[str, int]


_SECOND = _FieldSpec("second", 0, 59, {})
_FIVE_FIELDS: Final = (
    _FieldSpec("minute", 0, 59, {}),
    _FieldSpec("hour", 0, 23, {}),
    _FieldSpec("day-of-month", 1, 31, {}),
    _FieldSpec("month", 1, 12, _MONTH_NAMES),
    # 7 is accepted as a second spelling of Sunday and folded onto 0 after expansion.
    _FieldSpec("day-of-week", 0, 7, _DOW_NAMES),
)
_SIX_FIELDS: Final = (_SECOND, *_FIVE_FIELDS)

_ITEM = re.compile(r"(?:(?P<star>\*)|(?P<lo>[0-9A-Za-z]+)(?:-(?P<hi>[0-9A-Za-z]+))?)(?:/(?P<step>[0-9]+))?")
# February counts 29: a leap year always comes, so "29 2" fires; only 30/31 Feb never do.
_DAYS_IN_MONTH: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ALL_HOURS: Final = frozenset(range(24))
_ALL_WEEKDAYS: Final = frozenset(range(7))

# Fixed so min_interval_seconds() is deterministic; a common year, whose 28-day February is the
# shortest monthly gap.
_SAMPLE_ANCHOR: Final = datetime(2025, 1, 1, tzinfo=UTC)
_SAMPLE_TICKS: Final = 64
_SAMPLE_HORIZON: Final = timedelta(days=366)
_DAY: Final = timedelta(days=1)
_ONE_SECOND: Final = timedelta(seconds=1)


def _fail(expr: str, message: str) -> CronError:
    return CronError(f"'{expr}': {message}")


def _value(token: str, spec: _FieldSpec, expr: str, text: str) -> int:
    if token.isdigit():
        number = int(token)
    elif token.lower() in spec.names:
        number = spec.names[token.lower()]
    else:
        kind = "a number or a three-letter name" if spec.names else "a number"
        raise _fail(expr, f"{spec.name} field '{text}': '{token}' is not {kind}")
    if not spec.low <= number <= spec.high:
        raise _fail(expr, f"{spec.name} field '{text}': {number} is out of range {spec.low}-{spec.high}")
    return number


def _expand(text: str, spec: _FieldSpec, expr: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            raise _fail(
                expr,
                f"{spec.name} field '{text}': '{item}' is not *, N, A-B or one of them with /STEP",
            )
        step = int(match["step"]) if match["step"] is not None else 1
        if step == 0:
            raise _fail(expr, f"{spec.name} field '{text}': step 0 never advances")
        if match["star"]:
            low, high = spec.low, spec.high
        else:
            low = _value(match["lo"], spec, expr, text)
            if match["hi"] is not None:
                high = _value(match["hi"], spec, expr, text)
            else:
                high = spec.high if match["step"] is not None else low
            if low > high:
                raise _fail(
                    expr,
                    f"{spec.name} field '{text}': range {item} runs backwards; split it into a list",
                )
        values.update(range(low, high + 1, step))
    if spec.name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


def _canonical(values: frozenset[int], spec: _FieldSpec) -> str:
    # croniter's own notion of "unrestricted" depends on spelling (1-7 is, 0-6 is not); handing it
    # explicit lists, with * only for a full range, pins the day-of-month/day-of-week rule to ours.
    full = _ALL_WEEKDAYS if spec.name == "day-of-week" else frozenset(range(spec.low, spec.high + 1))
    return "*" if values == full else ",".join(str(v) for v in sorted(values))


def _check_fires(expr: str, fields: dict[str, frozenset[int]]) -> None:
    dom, dow = fields["day-of-month"], fields["day-of-week"]
    if dom == frozenset(range(1, 32)) or dow != _ALL_WEEKDAYS:
        return
    if min(dom) > max(_DAYS_IN_MONTH[m - 1] for m in fields["month"]):
        months = ",".join(str(m) for m in sorted(fields["month"]))
        raise _fail(expr, f"never fires: no month in {months} has a day {min(dom)} or later")


def _load_zone(timezone: str) -> ZoneInfo:
    if not isinstance(timezone, str) or not timezone:
        raise CronError(f"'{timezone}' is not an IANA timezone", field="timezone")
    try:
        return ZoneInfo(timezone)
    # ValueError covers names zoneinfo refuses outright (absolute paths, '..').
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise CronError(f"'{timezone}' is not an IANA timezone", field="timezone") from exc


def _aware_utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {moment.isoformat()}")
    return moment.astimezone(UTC)


def _offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    return moment.astimezone(zone).utcoffset() or timedelta(0)


def _gap_end(zone: ZoneInfo, wall: datetime, below: datetime, above: datetime) -> datetime:
    """The first instant whose local wall time is at or after `wall`, a wall time inside a gap."""
    # local(below) < wall <= local(above); tz transitions fall on whole seconds, so bisect on them.
    lo, hi = int(below.timestamp()), int(above.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A validated cron expression bound to an IANA timezone; constructing one validates it."""

    expr: str
    timezone: str
    _cron: str = field(init=False, repr=False, compare=False)
    _with_seconds: bool = field(init=False, repr=False, compare=False)
    _every_hour: bool = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.expr, str):
            raise CronError(f"must be a string, got {type(self.expr).__name__}")
        expr = " ".join(self.expr.split())
        text = _MACROS.get(expr.lower(), expr)
        if text.startswith("@"):
            if expr.lower() == "@reboot":
                raise _fail(expr, "@reboot has no meaning for a scheduler; use a 5- or 6-field expression")
            known = " ".join(sorted(_MACROS))
            raise _fail(expr, f"unknown macro (a macro stands alone; supported: {known})")
        parts = text.split()
        if len(parts) not in (5, 6):
            raise CronError(
                "must have 5 fields (minute hour day-of-month month day-of-week) "
                "or 6 (second minute hour day-of-month month day-of-week); "
                f"got {len(parts)} in '{expr}'"
            )
        specs = _SIX_FIELDS if len(parts) == 6 else _FIVE_FIELDS
        fields = {spec.name: _expand(part, spec, expr) for spec, part in zip(specs, parts, strict=True)}
        _check_fires(expr, fields)
        cron = " ".join(_canonical(fields[spec.name], spec) for spec in specs)
        with_seconds = len(parts) == 6
        try:
            # Defensive: our grammar is a subset of croniter's, but croniter has the final word.
            _croniter(cron, with_seconds, _SAMPLE_ANCHOR).get_next(datetime)
        except CroniterBadDateError as exc:
            raise _fail(expr, "never fires") from exc
        except CroniterError as exc:
            raise _fail(expr, str(exc)) from exc
        zone = _load_zone(self.timezone)
        object.__setattr__(self, "expr", expr)
        object.__setattr__(self, "_cron", cron)
        object.__setattr__(self, "_with_seconds", with_seconds)
        object.__setattr__(self, "_every_hour", fields["hour"] == _ALL_HOURS)
        object.__setattr__(self, "_zone", zone)

    def next_after(self, after: datetime) -> datetime:
        """First fire time strictly after `after` (aware), as an aware UTC datetime."""
        return next(self._fires(_aware_utc(after, "after")))

    def fires_at(self, moment: datetime) -> bool:
        """Whether `moment` (aware, whole milliseconds as stored) is one of the schedule's fire times."""
        at = _aware_utc(moment, "moment")
        return self.next_after(at - timedelta(milliseconds=1)) == at

    def ticks(self, after: datetime, until: datetime, *, limit: int) -> list[datetime]:
        """Fire times t with after < t <= until, oldest first, at most `limit` (UTC, aware)."""
        start, end = _aware_utc(after, "after"), _aware_utc(until, "until")
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        out: list[datetime] = []
        if limit == 0 or end <= start:
            return out
        for moment in self._fires(start):
            if moment > end:
                break
            out.append(moment)
            if len(out) == limit:
                break
        return out

    def min_interval_seconds(self) -> int:
        """Smallest gap in seconds between consecutive fires, sampled on the DST-free wall clock."""
        # Approximation for jitter checks: the first 64 fires (at most ~366 days) from a fixed
        # anchor; a DST transition can shorten one real gap by up to the size of the shift.
        return _min_interval(self._cron, self._with_seconds)

    def _resolve(self, wall: datetime) -> tuple[datetime, list[datetime]]:
        """(first instant the local clock reads `wall` or later, the instants `wall` fires at)."""
        earlier = wall.replace(tzinfo=self._zone).astimezone(UTC)
        later = wall.replace(tzinfo=self._zone, fold=1).astimezone(UTC)
        if earlier == later:
            return earlier, [earlier]
        if earlier < later:
            # PEP 495: fold=0 is the first occurrence of a repeated wall time.
            return earlier, [earlier, later] if self._every_hour else [earlier]
        # In a gap fold=0 applies the pre-transition offset, which lands after the transition.
        first = _gap_end(self._zone, wall, later, earlier)
        return first, [] if self._every_hour else [first]

    def _fires(self, after: datetime) -> Iterator[datetime]:
        """Fire instants strictly after `after` (UTC), increasing, lazily."""
        here = _offset(self._zone, after)
        offset = min(here, _offset(self._zone, after + _DAY))
        if offset < here:
            # A fall-back lies within a day. Only if it is closer than its own size can a wall time
            # earlier than local(after) still fire after `after` (the repeated hour's second pass),
            # so only then start that much earlier; croniter's start is exclusive.
            offset = min(here, _offset(self._zone, after + (here - offset)))
        start = (after + offset).replace(microsecond=0)
        walls = _croniter(self._cron, self._with_seconds, start)
        # Fires of a repeated hour's second pass come after later wall times' first pass, so hold
        # candidates in a heap until no later wall time can resolve to an earlier instant.
        pending: list[datetime] = []
        last = after
        while True:
            wall = walls.get_next(datetime).replace(tzinfo=None)
            floor, candidates = self._resolve(wall)
            for moment in candidates:
                heapq.heappush(pending, moment)
            while pending and pending[0] <= floor:
                moment = heapq.heappop(pending)
                if moment > last:
                    last = moment
                    yield moment


def _croniter(cron: str, with_seconds: bool, start: datetime) -> croniter:
    # Wall times ride on UTC datetimes so croniter never applies DST rules of its own.
    return croniter(cron, start.replace(tzinfo=UTC), second_at_beginning=with_seconds)


@functools.lru_cache(maxsize=4096)
def _min_interval(cron: str, with_seconds: bool) -> int:
    walls = _croniter(cron, with_seconds, _SAMPLE_ANCHOR - _ONE_SECOND)
    previous: datetime = walls.get_next(datetime)
    smallest: timedelta | None = None
    for _ in range(_SAMPLE_TICKS - 1):
        current: datetime = walls.get_next(datetime)
        gap = current - previous
        smallest = gap if smallest is None else min(smallest, gap)
        previous = current
        if current - _SAMPLE_ANCHOR > _SAMPLE_HORIZON:
            break
    assert smallest is not None  # the loop runs at least once
    return int(smallest.total_seconds())


def seconds_field(expr: str) -> bool:
    """Whether `expr` (already valid) is the 6-field form whose first field is seconds."""
    return len(expr.split()) == 6


@functools.lru_cache(maxsize=4096)
def parse(expr: str, timezone: str = "UTC") -> CronSchedule:
    """Validate and build; raises CronError naming the problem (field count, bad field, unknown timezone)."""
    return CronSchedule(expr, timezone)
