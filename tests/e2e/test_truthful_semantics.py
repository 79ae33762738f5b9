"""The new user's reports, replayed over HTTP against `jobsched local` in real time (issue 18)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.e2e.conftest import Stack

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_a_cancel_3_5_s_into_a_30_s_sleep_is_a_409_and_the_run_is_recorded_as_it_ran(stack: Stack) -> None:
    # Given a demo.sleep one-off (6 s here: long enough to be cancelled mid-run) due in 2 s
    run_at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    created = stack.post(
        "/api/jobs",
        {"type": "one_off", "run_at": run_at.isoformat(), "handler": "demo.sleep", "payload": {"seconds": 6}},
        **{"X-Tenant": "cancel-e2e"},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    # When it is cancelled 3.5 s into its run (before its first heartbeat, at lease/3 = 10 s)
    time.sleep(max(0.0, (run_at + timedelta(seconds=3.5) - datetime.now(UTC)).total_seconds()))
    answer = requests.delete(f"{stack.url}/api/jobs/{job_id}", headers={"X-Tenant": "cancel-e2e"}, timeout=10)
    # Then the cancel is a 409, and the run ends SUCCEEDED on attempt 1 with its real times
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["code"] == "conflict"
    job = stack.wait_for(
        job_id, lambda j: j["status"] == "COMPLETED", timeout=40, **{"X-Tenant": "cancel-e2e"}
    )
    [run] = job["recent_executions"]
    assert run["status"] == "SUCCEEDED" and run["attempt"] == 1
    started = datetime.fromisoformat(run["started_at"])
    assert started >= run_at and datetime.fromisoformat(run["finished_at"]) >= started + timedelta(seconds=6)
