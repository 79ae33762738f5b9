"""The chaos harness's fixed-seed subset: seed 8 (see test_chaos.py), in a file of its own so that it
runs beside seed 3 under `make test`'s processes."""

from __future__ import annotations

import pytest

from tests.chaos.conftest import assert_schedule_holds

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_no_invariant_breaks_under_crashes_faults_and_races(endpoint: str) -> None:
    assert_schedule_holds(endpoint, 8)
