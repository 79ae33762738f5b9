"""jobsched.domain.fairness: the hand-over order (priority with aging, tenants round-robin) and the
fair-queue delivery order, as examples and as properties over random slices."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from jobsched.domain.fairness import MAX_AGING_SECONDS, RANK, fair_order, fair_queue_order

T0 = datetime(2026, 12, 2, 4, 0, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Run:
    n: int
    tenant: str
    priority: str
    due: datetime


def order(runs: list[Run]) -> list[Run]:
    return fair_order(runs, tenant=lambda r: r.tenant, priority=lambda r: r.priority, due=lambda r: r.due)


def burst(noisy: int, quiet: int, *, priority: str = "normal") -> list[Run]:
    """A noisy tenant's runs listed first, then a quiet tenant's, all due on one second."""
    runs = [Run(i, "noisy", priority, T0) for i in range(noisy)]
    return runs + [Run(noisy + i, "quiet", priority, T0) for i in range(quiet)]


runs_strategy = st.lists(
    st.builds(
        lambda i, tenant, priority, second, ms: Run(
            i, tenant, priority, T0 + timedelta(seconds=second, milliseconds=ms)
        ),
        st.integers(0, 10**6),
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["high", "normal", "low"]),
        st.integers(0, 8),
        st.integers(0, 999),
    ),
    max_size=80,
).map(lambda runs: [Run(i, r.tenant, r.priority, r.due) for i, r in enumerate(runs)])


def test_a_quiet_tenants_runs_leave_among_the_first_beside_a_noisy_tenants_burst() -> None:
    # Given a noisy tenant's 1,000 runs and a quiet tenant's 3, due on one second, the quiet ones last
    runs = burst(1000, 3)
    # When they are put in hand-over order
    out = order(runs)
    # Then the tenants alternate while both have runs: the quiet runs are 2nd, 4th and 6th
    assert [i for i, r in enumerate(out) if r.tenant == "quiet"] == [1, 3, 5]


def test_high_runs_leave_before_normal_before_low_among_runs_due_together() -> None:
    # Given low, normal and high runs of one tenant due on one second, listed low first
    runs = [Run(i, "t", p, T0) for i, p in enumerate(["low"] * 5 + ["normal"] * 5 + ["high"] * 2)]
    # When ordered, then every high run leaves first, then the normal ones, then the low ones
    assert [r.priority for r in order(runs)] == ["high"] * 2 + ["normal"] * 5 + ["low"] * 5


def test_a_low_run_leaves_before_high_runs_due_more_than_the_aging_bound_after_it() -> None:
    # Given a low run due at t, and high runs due every second after it
    low = Run(0, "t", "low", T0)
    highs = [Run(i, "t", "high", T0 + timedelta(seconds=i)) for i in range(1, 10)]
    # When ordered, then it waits behind the high runs due within the aging bound only
    out = order([*highs, low])
    assert out.index(low) == MAX_AGING_SECONDS


@settings(max_examples=300, deadline=None)
@given(runs_strategy)
def test_the_hand_over_order_is_a_permutation_that_keeps_each_tenants_order_within_a_priority(
    runs: list[Run],
) -> None:
    out = order(runs)
    assert sorted(r.n for r in out) == sorted(r.n for r in runs)
    for tenant in {r.tenant for r in runs}:
        for p in RANK:
            # a tenant's runs of one priority and one lane second keep their given order
            for second in {r.due.replace(microsecond=0) for r in runs}:
                mine = [
                    r.n
                    for r in out
                    if (r.tenant, r.priority, r.due.replace(microsecond=0)) == (tenant, p, second)
                ]
                given_order = [
                    r.n
                    for r in runs
                    if (r.tenant, r.priority, r.due.replace(microsecond=0)) == (tenant, p, second)
                ]
                assert mine == given_order


@settings(max_examples=300, deadline=None)
@given(runs_strategy)
def test_priority_holds_on_a_second_and_no_low_run_waits_past_the_aging_bound(runs: list[Run]) -> None:
    out = order(runs)
    pos = {r.n: i for i, r in enumerate(out)}
    for a in runs:
        for b in runs:
            same_second = int(a.due.timestamp()) == int(b.due.timestamp())
            if same_second and RANK[a.priority] < RANK[b.priority]:
                assert pos[a.n] < pos[b.n]  # high before normal before low on one second
            if int(b.due.timestamp()) > int(a.due.timestamp()) + MAX_AGING_SECONDS:
                assert pos[a.n] < pos[b.n]  # aging: never starved by later runs, whatever they are


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 400), st.integers(1, 20), st.sampled_from(["high", "normal", "low"]))
def test_a_quiet_tenant_of_q_runs_is_done_within_the_first_2q_places(noisy: int, quiet: int, p: str) -> None:
    out = order(burst(noisy, quiet, priority=p))
    last_quiet = max(i for i, r in enumerate(out) if r.tenant == "quiet")
    assert last_quiet < 2 * quiet


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c", None]), max_size=60),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 20)),
)
def test_the_fair_queue_order_serves_each_group_in_queue_order_and_the_least_busy_first(
    groups: list[str | None], in_flight: dict[str | None, int]
) -> None:
    visible = list(enumerate(groups))
    out = fair_queue_order(visible, group=lambda m: m[1], in_flight=in_flight)
    assert sorted(out) == visible
    for g in set(groups):
        assert [m for m in out if m[1] == g] == [m for m in visible if m[1] == g]
    # Round-robin by load: a message's turn (its group's load + its place in its group) never
    # comes after a message with a later turn.
    turns = []
    seen: Counter[str | None] = Counter()
    for m in out:
        turns.append(in_flight.get(m[1], 0) + seen[m[1]])
        seen[m[1]] += 1
    assert turns == sorted(turns)


def test_a_fair_queue_delivers_a_quiet_groups_messages_ahead_of_a_busy_groups_backlog() -> None:
    # Given 50 visible messages of a noisy group (10 of its messages in flight) then 3 of a quiet one
    visible = [("noisy", i) for i in range(50)] + [("quiet", i) for i in range(3)]
    # When a receive of 10 takes the first of the fair-queue order
    first = fair_queue_order(visible, group=lambda m: m[0], in_flight={"noisy": 10})[:10]
    # Then all 3 quiet messages are in it
    assert [m for m in first if m[0] == "quiet"] == [("quiet", 0), ("quiet", 1), ("quiet", 2)]
