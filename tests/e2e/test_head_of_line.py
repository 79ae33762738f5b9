"""End to end: slow handlers on the local stack delay only their own runs, as on AWS (issue 18, item 5)."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import start_stack, stop_stack

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SLOW_SECONDS = 20
# More slow batches than the 4 pollers the local stack used to hold with them, each due on a second
# of its own so it surfaces as a batch of its own.
SLOW_BATCHES = 6
ECHO_EVERY = 10


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def test_an_echo_tick_is_not_held_behind_slow_handlers_of_other_batches() -> None:
    # Given the local stack, a demo.echo job every 10 s, and six demo.sleep 20 s one-offs due on six
    # consecutive seconds from T, a multiple of 10 s, so echo ticks fall on T and T + 10 s
    stack = start_stack(JOBSCHED_TICK_SECONDS="60")
    try:
        now = datetime.now(UTC).timestamp() + 8  # room for the creates
        t = datetime.fromtimestamp(math.ceil(now / ECHO_EVERY) * ECHO_EVERY, UTC)
        for i in range(SLOW_BATCHES):
            created = stack.post(
                "/api/jobs",
                {
                    "type": "one_off",
                    "run_at": (t + timedelta(seconds=i)).isoformat(),
                    "handler": "demo.sleep",
                    "payload": {"seconds": SLOW_SECONDS},
                },
                **{"Idempotency-Key": f"slow-{i}-{uuid.uuid4()}"},
            )
            assert created.status_code == 201, created.text
        echo = stack.post(
            "/api/jobs",
            {"type": "recurring", "cron_expr": f"*/{ECHO_EVERY} * * * * *", "handler": "demo.echo"},
        )
        assert echo.status_code == 201, echo.text
        assert parse(echo.json()["next_run_at"]) <= t
        # When the echo ticks at T and T + 10 s come due while the slow handlers run
        ticks = {t, t + timedelta(seconds=ECHO_EVERY)}

        def started(job: dict[str, Any]) -> dict[datetime, datetime]:
            return {
                parse(r["scheduled_for"]): parse(r["started_at"])
                for r in job["recent_executions"]
                if r["started_at"] and parse(r["scheduled_for"]) in ticks
            }

        deadline = (t + timedelta(seconds=ECHO_EVERY + 3 * SLOW_SECONDS) - datetime.now(UTC)).total_seconds()
        job = stack.wait_for(echo.json()["job_id"], lambda j: len(started(j)) == len(ticks), timeout=deadline)
    finally:
        stop_stack(stack)
    # Then each started well within the time a slow handler takes: a slow batch holds its own
    # invocation, not a poller. (Four pollers each held by a slow batch left no poller free before
    # T + 20 s, at least 10 s after the second tick, and they ran a batch's runs one after another.)
    bound = SLOW_SECONDS / 4
    lateness = {tick: (start - tick).total_seconds() for tick, start in started(job).items()}
    assert all(0 <= late < bound for late in lateness.values()), lateness
