"""End to end over HTTP against `jobsched local`: the same handlers, an embedded AWS, real time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def test_a_one_off_5_seconds_ahead_runs_on_its_second(stack: Stack) -> None:
    # Given the local stack ticking once a minute, when a demo.echo one-off is posted 5 s ahead
    run_at = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
    created = stack.post(
        "/api/jobs",
        {
            "type": "one_off",
            "run_at": run_at.isoformat(),
            "handler": "demo.echo",
            "payload": {"hello": "e2e"},
        },
        **{"Idempotency-Key": "e2e-one-off"},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    # Then it reaches SUCCEEDED, its run recorded once with the payload echoed, and the job is
    # COMPLETED (a write after the run's: a read in between sees the run done, the job not yet)
    job = stack.wait_for(
        job_id,
        lambda j: (
            j["recent_executions"]
            and j["recent_executions"][0]["status"] == "SUCCEEDED"
            and j["status"] == "COMPLETED"
        ),
    )
    [run] = job["recent_executions"]
    assert parse(run["scheduled_for"]) == run_at
    assert parse(run["started_at"]) >= run_at  # never early; lateness is measured by `make bench`
    assert run["result"] == {"hello": "e2e"} and run["attempt"] == 1
    assert job["status"] == "COMPLETED"


def test_a_10_second_cron_fires_three_consecutive_ticks_without_drift(stack: Stack) -> None:
    created = stack.post(
        "/api/jobs",
        {"type": "recurring", "cron_expr": "*/10 * * * * *", "handler": "demo.echo"},
        **{"X-Tenant": "cron"},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    first = parse(created.json()["next_run_at"])
    # When three ticks have come due
    job = stack.wait_for(
        job_id,
        lambda j: sum(r["status"] == "SUCCEEDED" for r in j["recent_executions"]) >= 3,
        timeout=45,
        **{"X-Tenant": "cron"},
    )
    # Then they ran on three consecutive grid ticks (no drift), each recorded once
    done = sorted(
        (r for r in job["recent_executions"] if r["status"] == "SUCCEEDED"), key=lambda r: r["scheduled_for"]
    )
    ticks = [parse(r["scheduled_for"]) for r in done[:3]]
    assert ticks == [first, first + timedelta(seconds=10), first + timedelta(seconds=20)]
    assert len({r["run_id"] for r in job["recent_executions"]}) == len(job["recent_executions"])
    assert all(parse(r["started_at"]) >= parse(r["scheduled_for"]) for r in done)


def test_ctrl_c_stops_the_stack_cleanly() -> None:
    own = start_stack(JOBSCHED_TICK_SECONDS="60")
    assert own.get("/api/health").status_code == 200
    assert stop_stack(own) == 0
    output = own.process.stdout.read() if own.process.stdout else ""
    assert "API http://127.0.0.1:" in output and "stopping" in output


def test_a_failing_job_is_dead_lettered_and_replayed_over_http(stack: Stack) -> None:
    # Given a job that always fails, with quick retries
    run_at = datetime.now(UTC).replace(microsecond=0)
    body = {
        "type": "one_off",
        "run_at": run_at.isoformat(),
        "handler": "demo.fail",
        "max_attempts": 2,
        "backoff": {"initial_seconds": 1, "multiplier": 1, "max_seconds": 1, "jitter": False},
    }
    job_id = stack.post("/api/jobs", body, **{"X-Tenant": "fail"}).json()["job_id"]
    # Then the failure workflow (Step Functions on the embedded AWS) retries once and dead-letters it
    job = stack.wait_for(
        job_id,
        lambda j: j["recent_executions"] and j["recent_executions"][0]["status"] == "DEAD_LETTER",
        timeout=30,
        **{"X-Tenant": "fail"},
    )
    run = job["recent_executions"][0]
    assert run["attempt"] == 2 and [a["outcome"] for a in run["attempts"]] == ["FAILED", "FAILED"]
    page = stack.get("/api/dead-letter?limit=10", **{"X-Tenant": "fail"}).json()
    assert [i["run_id"] for i in page["items"]] == [run["run_id"]]
    # When an operator replays it, it runs a fresh attempt series (and fails again: the cause remains)
    replay = stack.post(
        f"/api/dead-letter/{run['run_id']}/replay", None, **{"X-Tenant": "fail", "Idempotency-Key": "k"}
    )
    assert replay.status_code == 202, replay.text
    stack.wait_for(
        job_id,
        lambda j: (
            j["recent_executions"][0]["status"] == "DEAD_LETTER"
            and len(j["recent_executions"][0]["attempts"]) == 4
        ),
        timeout=30,
        **{"X-Tenant": "fail"},
    )


def test_overlapping_ticks_are_skipped_visibly_and_a_job_pauses_and_resumes(stack: Stack) -> None:
    headers = {"X-Tenant": "recurring"}
    body = {
        "type": "recurring",
        "cron_expr": "*/5 * * * * *",
        "handler": "demo.sleep",
        "payload": {"seconds": 8},
        "overlap_policy": "skip",
    }
    job_id = stack.post("/api/jobs", body, **headers).json()["job_id"]

    def history() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = stack.get(f"/api/jobs/{job_id}/runs?limit=50", **headers).json()[
            "items"
        ]
        return items

    def one_done_and_one_skipped() -> list[dict[str, Any]]:
        runs = history()
        done = any(r["status"] == "SUCCEEDED" for r in runs)
        return runs if done and any(r.get("reason") == "overlap" for r in runs) else []

    poll_until(one_done_and_one_skipped, "a run done and a tick skipped for overlap", timeout=40, every=0.5)
    runs = history()
    done = [r for r in runs if r["status"] == "SUCCEEDED"]
    skipped = [r for r in runs if r["status"] == "SKIPPED"]
    assert done and skipped and {r["reason"] for r in skipped} == {"overlap"}
    assert all(r["lateness_ms"] is not None and r["lateness_ms"] >= 0 for r in done)
    assert stack.post(f"/api/jobs/{job_id}/pause", None, **headers).json()["status"] == "PAUSED"
    assert stack.post(f"/api/jobs/{job_id}/resume", None, **headers).json()["status"] == "SCHEDULED"
    assert stack.get(f"/api/jobs/{job_id}", **headers).json()["status"] == "SCHEDULED"


def test_a_dag_runs_in_order_over_http_and_the_cli_prints_its_graph(stack: Stack) -> None:
    import subprocess
    import sys

    headers = {"X-Tenant": "dag"}
    run_at = datetime.now(UTC).isoformat()
    a = stack.post(
        "/api/jobs",
        {"type": "one_off", "run_at": run_at, "handler": "demo.echo", "name": "extract"},
        **headers,
    )
    b = stack.post(
        "/api/jobs",
        {"type": "dependent", "depends_on": [a.json()["job_id"]], "handler": "demo.echo", "name": "load"},
        **headers,
    )
    assert a.status_code == 201 and b.status_code == 201, (a.text, b.text)
    job = stack.wait_for(
        b.json()["job_id"],
        lambda j: (
            j["recent_executions"]
            and j["recent_executions"][0]["status"] == "SUCCEEDED"
            and j["status"] == "COMPLETED"
        ),  # written just after the run's success
        timeout=30,
        **headers,
    )
    assert job["status"] == "COMPLETED" and job["depends_on"] == [a.json()["job_id"]]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobsched.cli",
            "graph",
            a.json()["job_id"],
            "--api-url",
            stack.url,
            "--tenant",
            "dag",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and "extract -> load" in out.stdout and "SUCCEEDED" in out.stdout
