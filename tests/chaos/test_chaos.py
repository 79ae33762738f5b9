"""The chaos harness's fixed-seed subset (make chaos runs more seeds and longer schedules)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from tests.chaos.harness import run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    aws = EmbeddedAws("127.0.0.1", free_port()).start()
    yield aws.endpoint_url
    aws.stop()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_invariant_breaks_under_crashes_faults_and_races(endpoint: str, seed: int) -> None:
    result = run(seed, endpoint=endpoint, load_seconds=180)
    assert result.violations == [], (
        f"seed {seed}: replay with python -m tests.chaos.harness --first-seed {seed} --seeds 1"
    )
    assert sum(result.crashes.values()) > 0 and sum(result.faults.values()) > 0  # the schedule did inject
    assert result.statuses["SUCCEEDED"] > 20
