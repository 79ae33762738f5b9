"""The chaos schedules' shared pieces: the embedded AWS of a file's schedules, and the check of one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from tests.chaos.harness import run


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    aws = EmbeddedAws("127.0.0.1", free_port()).start()
    yield aws.endpoint_url
    aws.stop()


def assert_schedule_holds(endpoint: str, seed: int) -> None:
    """Seed's schedule (180 s of load) breaks no invariant, and did inject what it is there for."""
    result = run(seed, endpoint=endpoint, load_seconds=180)
    assert result.violations == [], (
        f"seed {seed}: replay with python -m tests.chaos.harness --first-seed {seed} --seeds 1"
    )
    assert sum(result.crashes.values()) > 0 and sum(result.faults.values()) > 0  # the schedule did inject
    assert result.statuses["SUCCEEDED"] > 20
    # every overlap policy met a handler longer than its interval (the buffer_one loss hid where none did)
    assert {f"{p}/long" for p in ("skip", "buffer_one", "allow")} <= set(result.recurring)
