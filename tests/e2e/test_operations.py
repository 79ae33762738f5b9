"""Long work outside the request, end to end against `jobsched local`: a 250-tick backfill answers
202 at once, its operation shows progress, and the local worker carries it to the end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_a_long_backfill_answers_202_shows_progress_and_is_done_by_the_local_worker(stack: Stack) -> None:
    a, b = {"X-Tenant": "op-e2e-a"}, {"X-Tenant": "op-e2e-b"}
    # Given a minutely job
    created = stack.post(
        "/api/jobs", {"type": "recurring", "cron_expr": "* * * * *", "handler": "demo.echo"}, **a
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    window = {"from": (end - timedelta(minutes=250)).isoformat(), "to": end.isoformat()}
    # When 250 ticks are backfilled
    accepted = stack.post(f"/api/jobs/{job_id}/backfill", window, **a)
    # Then the API answers 202 with an operation still running
    assert accepted.status_code == 202, accepted.text
    body = accepted.json()
    assert (body["status"], body["ticks"]) == ("RUNNING", 250)
    path = f"/api/operations/{body['operation_id']}"
    # and the operation shows the first chunk done before the second (held back by the rate limit)
    seen: list[int] = []

    def finished() -> dict[str, Any] | None:
        shown: dict[str, Any] = stack.get(path, **a).json()
        seen.append(shown["done"])
        return shown if shown["status"] != "RUNNING" else None

    done = poll_until(finished, "the backfill operation to finish", timeout=120, every=1)
    assert (done["status"], done["done"], done["created"], done["existing"]) == ("SUCCEEDED", 250, 250, 0)
    assert 200 in seen  # progress between chunks was visible
    # and every tick has its one run; tenant b sees no operation
    assert stack.get(path, **b).status_code == 404
    history = stack.get(f"/api/jobs/{job_id}/runs?kind=backfill&limit=100", **a).json()
    assert len(history["items"]) == 100 and history["next_cursor"]
