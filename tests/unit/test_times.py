"""Stored time format, minute buckets and shards of the due index."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobsched.domain import times


def test_it_stores_fixed_width_utc_whose_order_is_time_order() -> None:
    paris = timezone(timedelta(hours=1))
    moments = [datetime(2026, 1, 1, 0, 0, 0, 1000 * i, tzinfo=paris) for i in range(0, 999, 37)]
    texts = [times.stored(m) for m in moments]
    assert texts == sorted(texts) and len({len(t) for t in texts}) == 1
    assert texts[0] == "2025-12-31T23:00:00.000Z"
    assert [times.parse_stored(t) for t in texts] == moments


def test_it_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="naive"):
        times.stored(datetime(2026, 1, 1))


def test_it_shows_iso_8601_with_an_explicit_offset() -> None:
    assert times.iso(datetime(2026, 7, 12, 2, 0, tzinfo=UTC)) == "2026-07-12T02:00:00.000+00:00"


def test_it_buckets_by_minute_and_lists_buckets_inclusively() -> None:
    t = datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)
    assert times.bucket(t) == "2026-11-30T23:59"
    assert times.buckets_between("2026-11-30T23:58", "2026-12-01T00:01", limit=10) == [
        "2026-11-30T23:58", "2026-11-30T23:59", "2026-12-01T00:00", "2026-12-01T00:01",
    ]  # fmt: skip
    assert len(times.buckets_between("2026-11-30T00:00", "2026-11-30T23:59", limit=5)) == 5


def test_it_spreads_jobs_over_shards_stably_and_evenly() -> None:
    ids = [f"job_{i:05d}" for i in range(8000)]
    shards = [times.shard_of(i, 8) for i in ids]
    assert shards == [times.shard_of(i, 8) for i in ids]  # stable across calls (and processes: no salt)
    counts = [shards.count(n) for n in range(8)]
    assert min(counts) > 900 and max(counts) < 1100
    assert times.due_key(datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC), 3) == "2026-01-01T00:00#3"
