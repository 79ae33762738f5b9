"""Long jobs end to end on `jobsched local` (issue 11 item 5): a checkpointing handler (demo.checkpoint)
reports its progress on the run, its worker is killed mid-run (kill -9 of the whole local stack, the
restart harness of test_restart.py), and the attempt that takes it over resumes from its checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TENANT = {"X-Tenant": "long-jobs-e2e"}
STEPS = 12


@pytest.fixture
def aws() -> Iterator[EmbeddedAws]:
    """An AWS endpoint that outlives the scheduler processes that use it."""
    server = EmbeddedAws("127.0.0.1", free_port()).start()
    yield server
    server.stop()


def _run(stack: Stack, job_id: str) -> dict[str, Any] | None:
    """The job's run as GET /api/runs/{id} answers it, once the job lists it."""
    executions = stack.get(f"/api/jobs/{job_id}", **TENANT).json()["recent_executions"]
    if not executions:
        return None
    answer = stack.get(f"/api/runs/{executions[0]['run_id']}", **TENANT)
    return answer.json() if answer.status_code == 200 else None


def _done(run: dict[str, Any] | None) -> int:
    progress = (run or {}).get("progress") or {}
    return int(progress.get("done", 0))


def test_a_checkpointing_run_whose_worker_is_killed_resumes_from_its_checkpoint(aws: EmbeddedAws) -> None:
    env = {"AWS_ENDPOINT_URL": aws.endpoint_url, "JOBSCHED_TICK_SECONDS": "5", "JOBSCHED_LEASE_SECONDS": "9"}
    first = start_stack(**env)
    try:
        # Given a run of 12 one-second steps that checkpoints after each and reports its progress
        run_at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0).isoformat()
        body = {"type": "one_off", "handler": "demo.checkpoint", "run_at": run_at,
                "payload": {"steps": STEPS, "step_seconds": 1}}  # fmt: skip
        created = first.post("/api/jobs", body, **TENANT)
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        # When its progress on the run shows three steps done (and so checkpointed)
        seen = poll_until(lambda: (r := _run(first, job_id)) and _done(r) >= 3 and r, "3 steps", timeout=60)
        assert seen["status"] == "RUNNING" and seen["checkpoint"]["done"] >= 3, seen
        # and the scheduler, its worker with it, is killed mid-run
        first.process.kill()
        first.process.wait()
    except BaseException:
        stop_stack(first)
        raise
    killed_at = _done(seen)
    # Then a fresh scheduler on the same endpoint takes the run over when its lease lapses, and the
    # taking attempt resumes from the last checkpoint: it does not start from step 0
    second = start_stack(**env)
    try:
        run = poll_until(
            lambda: (r := _run(second, job_id)) and r["status"] == "SUCCEEDED" and r, "SUCCEEDED", timeout=120
        )
        assert run["attempt"] == 2, run
        result = run["result"]
        assert result["done"] == STEPS and result["attempt"] == 2, result
        assert killed_at <= result["resumed_from"] < STEPS, (killed_at, result)
        assert run["checkpoint"] == {"done": STEPS} and run["progress"] == {"done": STEPS, "of": STEPS}
    finally:
        stop_stack(second)
