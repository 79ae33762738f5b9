"""The simulator in CI: determinism, the regression seeds, and a subset of seeds (make sim runs 10,000)."""

from __future__ import annotations

import pytest

from tests.sim.regressions import REGRESSION_SEEDS
from tests.sim.workload import simulate

CI_SEEDS = range(1, 41)


def test_a_seed_replays_exactly_and_another_seed_plays_another_schedule() -> None:
    # Given one seed run twice, and the next seed
    first, again, other = (
        simulate(3, minutes=5, scale=10),
        simulate(3, minutes=5, scale=10),
        simulate(4, minutes=5, scale=10),
    )
    # Then the two runs of the seed leave the same trace (every process event, in order), and the
    # other seed another one
    assert (
        first.digest == again.digest and first.faults == again.faults and first.violations == again.violations
    )
    assert other.digest != first.digest
    assert first.handler_calls > 0 and sum(first.faults.values()) > 0


@pytest.mark.parametrize(("seed", "minutes", "jobs", "violation", "bug"), REGRESSION_SEEDS)
def test_a_regression_seed_no_longer_shows_the_bug_it_found(
    seed: int, minutes: float, jobs: int, violation: str, bug: str
) -> None:
    result = simulate(seed, minutes=minutes, scale=jobs)
    assert not [v for v in result.violations if violation in v], bug


@pytest.mark.xfail(
    strict=True,
    reason="open findings of the simulator, reported with their seeds (issue 19): a fast-path record "
    "lost to a 500 leaves a run that executed to be SKIPPED/CANCELLED, runs stuck LEASED/RUNNING/FAILED, "
    "missing ticks and overlaps not yet classified as bugs or sim modelling errors",
)
def test_every_invariant_holds_on_the_ci_subset_of_seeds() -> None:
    failing = {s: r.violations for s in CI_SEEDS if (r := simulate(s, minutes=5, scale=10)).violations}
    assert not failing, {s: v[:3] for s, v in failing.items()}
