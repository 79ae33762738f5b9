"""rate_slots (domain/limits.py): the second each of a tenant's runs may start at, max_runs_per_second."""

from __future__ import annotations

from collections import Counter

import pytest

from jobsched.domain.limits import rate_slots


def test_it_spreads_a_burst_over_as_many_seconds_as_the_rate_needs() -> None:
    # Given 20 runs due on second 100 and a rate of 5 per second
    # Then 5 start on each of seconds 100..103
    assert Counter(rate_slots([100] * 20, rate=5)) == {100: 5, 101: 5, 102: 5, 103: 5}


def test_it_delays_nothing_under_the_rate() -> None:
    assert rate_slots([100, 100, 101, 105], rate=2) == [100, 100, 101, 105]


def test_it_never_starts_a_run_before_its_own_second() -> None:
    # Given a burst on 100 spilling into 101 and 102, and a run due on 104 after it
    slots = rate_slots([100, 100, 100, 100, 100, 104], rate=2)
    # Then the burst takes 100, 100, 101, 101, 102 and the late run keeps its own second
    assert slots == [100, 100, 101, 101, 102, 104]


def test_it_answers_in_the_given_order_and_serves_the_runs_due_first() -> None:
    # Given runs handed over out of due order (a high run of a later second leads its slice)
    slots = rate_slots([101, 100, 100, 100], rate=2)
    # Then the two due on 100 keep it, and the rest queue behind in due order
    assert slots == [101, 100, 100, 101]


@pytest.mark.parametrize(("rate", "shards"), [(5, 2), (5, 3), (2, 4), (50, 8), (1, 1)])
def test_its_shards_side_by_side_never_start_more_than_the_rate_in_a_second(rate: int, shards: int) -> None:
    # Given 30 runs of one tenant due on second 100 in each shard
    per_second: Counter[int] = Counter()
    for shard in range(shards):
        per_second.update(rate_slots([100] * 30, rate=rate, shard=shard, shards=shards))
    # Then no second holds more than `rate` starts, and they fill every second they use but the last
    assert max(per_second.values()) <= rate
    seconds = sorted(per_second)
    assert seconds == list(range(100, 100 + len(seconds)))
    assert all(per_second[s] == rate for s in seconds[:-1])
