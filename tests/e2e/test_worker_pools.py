"""External worker pools end to end: the local stack and three real `jobsched worker` processes of
different capacities (2, 4 and 8 vCPUs): best fit, no oversubscription in a burst, a failed attempt
retried through the failure workflow, a kill -9 mid-run re-queued and finished elsewhere exactly
once, a duplicate `finished` that changes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Stack, start_stack, stop_stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
TENANT = {"X-Tenant": "pools-e2e"}
CAPACITIES = (2048, 4096, 8192)


@dataclass
class Pool:
    stack: Stack
    processes: dict[int, subprocess.Popen[str]]  # cpu -> its worker process
    ids: dict[int, str]  # cpu -> worker id

    def submit(
        self, *, cpu: int, seconds: float, later_seconds: float = 0, handler: str = "pool.work"
    ) -> str:
        body = {
            "type": "one_off",
            "run_at": (datetime.now(UTC) + timedelta(seconds=1)).isoformat(),
            "target": {"type": "worker", "pool": "e2e", "handler": handler},
            "resources": {"cpu": cpu, "memory_mib": 512},
            "payload": {"seconds": seconds, "later_seconds": later_seconds},
        }
        created = self.stack.post("/api/jobs", body, **TENANT)
        assert created.status_code == 201, created.text
        return str(created.json()["job_id"])

    def run_of(self, job_id: str, *, until: Any, timeout: float = 60) -> dict[str, Any]:
        job = self.stack.wait_for(
            job_id,
            lambda j: bool(j["recent_executions"]) and until(j["recent_executions"][0]),
            timeout,
            **TENANT,
        )
        run_id = job["recent_executions"][0]["run_id"]
        got = self.stack.get(f"/api/runs/{run_id}", **TENANT)
        assert got.status_code == 200, got.text
        return dict(got.json())

    def workers(self) -> list[dict[str, Any]]:
        return list(self.stack.get("/api/workers?pool=e2e", **TENANT).json()["items"])


def _start_worker(stack: Stack, cpu: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobsched.cli",
            "worker",
            "--pool",
            "e2e",
            "--handlers",
            "tests.e2e.poolhandlers",
            "--cpu",
            str(cpu),
            "--memory-mib",
            "8192",
            "--api",
            stack.url,
            "--tenant",
            TENANT["X-Tenant"],
            "--wait",
            "1",
        ],
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    stack = start_stack(JOBSCHED_TICK_SECONDS="60")
    processes = {cpu: _start_worker(stack, cpu) for cpu in CAPACITIES}
    try:
        deadline = time.monotonic() + 60
        ids: dict[int, str] = {}
        while len(ids) < len(CAPACITIES):
            assert time.monotonic() < deadline, "the workers did not register"
            ids = {w["capacity"]["cpu"]: w["worker_id"] for w in Pool(stack, processes, {}).workers()}
            time.sleep(0.2)
        yield Pool(stack, processes, ids)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        stop_stack(stack)


def test_a_run_goes_to_the_worker_it_fits_most_tightly(pool: Pool) -> None:
    # Given workers of 2, 4 and 8 vCPUs; When a run that needs 3 vCPUs is due
    job_id = pool.submit(cpu=3072, seconds=0)
    run = pool.run_of(job_id, until=lambda r: r["status"] == "SUCCEEDED")
    # Then the 4-vCPU worker ran it, starting it no earlier than its tick
    assert [a["worker"] for a in run["attempts"]] == [pool.ids[4096]], run
    assert run["result"]["pid"] == pool.processes[4096].pid
    assert run["lateness_ms"] >= 0, run


def test_a_burst_never_oversubscribes_a_worker_and_a_duplicate_finished_changes_nothing(pool: Pool) -> None:
    # Given a burst of nine 2-vCPU runs of 3 s over 7 slots of 2 vCPUs
    jobs = [pool.submit(cpu=2048, seconds=3) for _ in range(9)]
    # When they run, sampling what each worker holds meanwhile
    capacity = {w["worker_id"]: w["capacity"]["cpu"] for w in pool.workers()}
    deadline = time.monotonic() + 90
    done: dict[str, dict[str, Any]] = {}
    while len(done) < len(jobs):
        assert time.monotonic() < deadline, f"only {len(done)} of {len(jobs)} finished"
        for worker in pool.workers():
            # Then no worker ever holds more than its capacity
            assert worker["used"]["cpu"] <= capacity[worker["worker_id"]], worker
        for job_id in jobs:
            if job_id not in done:
                job = pool.stack.get(f"/api/jobs/{job_id}", **TENANT).json()
                runs = job["recent_executions"]
                if runs and runs[0]["status"] == "SUCCEEDED":
                    done[job_id] = runs[0]
        time.sleep(0.3)
    # And every run succeeded once, on its first attempt
    assert {r["attempt"] for r in done.values()} == {1}
    # And a duplicate finished (a worker retrying its report) changes nothing
    run_id = next(iter(done.values()))["run_id"]
    row = pool.stack.get(f"/api/runs/{run_id}", **TENANT).json()
    for worker_id in pool.ids.values():
        again = pool.stack.post(
            f"/api/runs/{run_id}/finished", {"worker_id": worker_id, "error": {"type": "Late"}}, **TENANT
        )
        assert again.status_code == 200 and again.json()["applied"] is False
        assert again.json()["status"] == "SUCCEEDED"
    assert pool.stack.get(f"/api/runs/{run_id}", **TENANT).json() == row


def test_a_failed_attempt_is_retried_by_the_failure_workflow_and_the_one_off_completes(pool: Pool) -> None:
    # Given a worker-pool one-off whose first attempt fails
    job_id = pool.submit(cpu=2048, seconds=0, handler="pool.flaky")
    # When it runs
    run = pool.run_of(job_id, until=lambda r: r["status"] == "SUCCEEDED", timeout=90)
    # Then the failure workflow retried it (placed again, attempt 2), and the job is COMPLETED
    assert [(a["attempt"], a["outcome"]) for a in run["attempts"]] == [(1, "FAILED"), (2, "SUCCEEDED")], run
    assert run["attempts"][0]["error"]["type"] == "RuntimeError", run
    # (the run is recorded SUCCEEDED before `finished` settles it: the job completes just after)
    poll_until(
        lambda: pool.stack.get(f"/api/jobs/{job_id}", **TENANT).json()["status"] == "COMPLETED",
        "the one-off's job COMPLETED",
        timeout=10,
    )


def test_a_worker_killed_mid_run_has_its_run_requeued_and_finished_elsewhere_once(pool: Pool) -> None:
    # Given a 2-vCPU run of 120 s on its first attempt, running on some worker
    job_id = pool.submit(cpu=2048, seconds=120, later_seconds=0)
    running = pool.run_of(job_id, until=lambda r: r["status"] == "RUNNING")
    # (the worker that acknowledged it: a reservation another worker let lapse unacknowledged is
    # listed on that one too until a sweep releases it, and the run is not running there)
    [holder] = [w for w in pool.workers() if w["runs"].get(running["run_id"]) == "confirmed"]
    cpu = holder["capacity"]["cpu"]
    victim = pool.processes[cpu]
    # When that worker is killed -9 mid-run
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # Then after three missed heartbeats it is DEAD, and the run finishes on another worker, once
    run = pool.run_of(job_id, until=lambda r: r["status"] == "SUCCEEDED", timeout=120)
    assert run["attempt"] == 2, run
    assert run["result"]["pid"] != victim.pid
    # (the last attempt, the one that succeeded, is the new worker's)
    last = run["attempts"][-1]
    assert last["worker"] not in (None, holder["worker_id"]) and last["outcome"] == "SUCCEEDED", run
    assert [a["outcome"] for a in run["attempts"]].count("SUCCEEDED") == 1, run
    assert [w["status"] for w in pool.workers() if w["worker_id"] == holder["worker_id"]] == ["DEAD"]
