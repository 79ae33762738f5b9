"""Fair hand-over order: runs due together leave by priority (with aging), tenants round-robin.

Pure: no I/O, no clock. The dispatcher orders each due slice with `fair_order` before it sends it,
and the local stack's embedded SQS delivers a fair queue's visible messages in the same order
(jobsched.local.aws), so what the dispatcher decides is what the workers see.

The order, for items keyed (tenant, priority, due):

    1. by lane time: the due second plus the priority's AGING_SECONDS (high 0, normal 1, low 2).
       So among runs due on the same second high leaves before normal before low, and a low run
       due at t leaves before every run due after t + MAX_AGING_SECONDS, whatever its priority:
       an endless stream of high runs delays a low run by at most two seconds of them (aging),
       never for ever.
    2. within a lane time, by priority rank (a high run due at t+1 and a low one due at t-1 share
       lane time t+1: the high one first).
    3. within (lane time, rank), round-robin over tenants: each tenant's first run, then each one's
       second, ...; tenants in the order their first run appears, each tenant's runs in their
       given order. A tenant with 10,000 runs on a second and one with 3 get alternate slots, so
       the quiet one's runs are among the first 6 to leave, not behind the whole burst.

A slice is one shard's, and shards hand over side by side: so that high runs come first across
shards too, a high run's message surfaces LEAD_SECONDS early (its delay is one second shorter).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Literal, TypeVar, get_args

Priority = Literal["high", "normal", "low"]
PRIORITIES: tuple[Priority, ...] = get_args(Priority)
RANK: dict[str, int] = {p: i for i, p in enumerate(PRIORITIES)}
"""0 for high, 1 for normal, 2 for low: lower leaves first."""
AGING_SECONDS: dict[str, int] = {"high": 0, "normal": 1, "low": 2}
"""How much later than its due second a run's lane time is: the most a lower priority yields."""
MAX_AGING_SECONDS = max(AGING_SECONDS.values())
LEAD_SECONDS: dict[str, int] = {"high": 1}
"""How much earlier than its second a run's message surfaces: a high run's is received ahead of the
normal and low runs due with it, from whichever shard or pass it came, and the worker waits out the
rest (services/run.py, MAX_EARLY_WAIT_SECONDS: SQS's whole-second delays already round down)."""

T = TypeVar("T")


def lane_time(due: datetime, priority: str) -> int:
    """The whole Unix second a run competes at: its due second plus its priority's aging."""
    return int(due.timestamp() // 1) + AGING_SECONDS.get(priority, AGING_SECONDS["normal"])


def fair_order(
    items: Sequence[T],
    *,
    tenant: Callable[[T], str],
    priority: Callable[[T], str],
    due: Callable[[T], datetime],
) -> list[T]:
    """`items` in fair hand-over order (the module docstring's three rules); a permutation of them."""
    rounds: dict[tuple[int, int, str], int] = {}  # (lane time, rank, tenant) -> that tenant's next round
    first_seen: dict[str, int] = {}
    keyed: list[tuple[int, int, int, int, int, T]] = []
    for index, item in enumerate(items):
        who, level = tenant(item), priority(item)
        lane = (lane_time(due(item), level), RANK.get(level, RANK["normal"]), who)
        turn = rounds.get(lane, 0)
        rounds[lane] = turn + 1
        seen = first_seen.setdefault(who, len(first_seen))
        keyed.append((lane[0], lane[1], turn, seen, index, item))
    keyed.sort(key=lambda k: k[:5])
    return [k[5] for k in keyed]


def fair_queue_order(
    visible: Sequence[T], *, group: Callable[[T], str | None], in_flight: Mapping[str | None, int]
) -> list[T]:
    """The order a fair queue delivers its visible messages in (`visible`: the queue's own order).

    What SQS fair queues promise, played where no AWS plays it (the local stack's SQS, the
    in-memory queue): a group (tenant) with fewer messages in flight is served first, so a quiet
    tenant's messages are not held behind a noisy tenant's backlog; groups round-robin, a group's
    messages in queue order. Messages without a group (None) form one group of their own, so a
    queue of ungrouped messages is delivered in plain queue order.
    """
    by_group: dict[str | None, list[T]] = {}
    for item in visible:
        by_group.setdefault(group(item), []).append(item)
    firsts = {g: i for i, g in enumerate(by_group)}
    keyed: list[tuple[int, int, int, T]] = []
    for g, items in by_group.items():
        busy = in_flight.get(g, 0)
        # A group's k-th message competes as if its group had k more in flight: round-robin, with a
        # busy group's turns starting later (it has had its share already).
        keyed += [(busy + k, firsts[g], k, item) for k, item in enumerate(items)]
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


__all__ = [
    "AGING_SECONDS",
    "MAX_AGING_SECONDS",
    "PRIORITIES",
    "RANK",
    "Priority",
    "fair_order",
    "fair_queue_order",
    "lane_time",
]
