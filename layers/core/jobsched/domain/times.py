"""Time formats and the due-index key rules, shared by every writer and reader of the index."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

# Every stored timestamp is UTC in this fixed-width form, so string order is time order and
# the GSI sort key range-reads chronologically.
_STORED = "%Y-%m-%dT%H:%M:%S.%fZ"
_BUCKET = "%Y-%m-%dT%H:%M"


def to_utc(moment: datetime) -> datetime:
    """The same instant in UTC; a naive datetime is a programming error."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("naive datetime: a timestamp must carry its UTC offset")
    return moment.astimezone(UTC)


def stored(moment: datetime) -> str:
    """Fixed-width UTC text with millisecond precision (lexicographic order is time order)."""
    text = to_utc(moment).strftime(_STORED)
    return text[:-4] + "Z"  # microseconds -> milliseconds


def parse_stored(text: str) -> datetime:
    """Inverse of stored()."""
    return datetime.strptime(text[:-1] + "000Z", _STORED).replace(tzinfo=UTC)


def iso(moment: datetime) -> str:
    """ISO-8601 with an explicit UTC offset, as the public API shows every timestamp."""
    return to_utc(moment).isoformat(timespec="milliseconds")


def truncate_ms(moment: datetime) -> datetime:
    """The instant rounded down to the millisecond, the precision of every stored time."""
    moment = to_utc(moment)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def bucket(moment: datetime) -> str:
    """The minute bucket of an instant."""
    return to_utc(moment).strftime(_BUCKET)


def bucket_start(name: str) -> datetime:
    """The first instant of a minute bucket."""
    return datetime.strptime(name, _BUCKET).replace(tzinfo=UTC)


def buckets_between(first: str, last: str, *, limit: int) -> list[str]:
    """Minute buckets from `first` to `last` inclusive, oldest first, at most `limit`."""
    out: list[str] = []
    cursor, end = bucket_start(first), bucket_start(last)
    while cursor <= end and len(out) < limit:
        out.append(bucket(cursor))
        cursor += timedelta(minutes=1)
    return out


def shard_of(job_id: str, shard_count: int) -> int:
    """A stable shard for a job (not Python's salted hash: every process must agree)."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


def due_key(moment: datetime, shard: int) -> str:
    """The due-index partition key: minute bucket and shard."""
    return f"{bucket(moment)}#{shard}"
