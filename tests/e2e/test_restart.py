"""A whole-scheduler restart: kill -9 `jobsched local` mid-flight; a fresh one on the same endpoint
adopts the tables, queues and state machines it left and carries on (issue 17, item 6)."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from tests.e2e.conftest import start_stack, stop_stack

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TENANT = {"X-Tenant": "restart-e2e"}

# A handler whose effect is exactly once per run: it records every call, and commits its effect by
# creating a file named after the run's effect key (O_EXCL: a second commit of one run would fail).
EFFECTS = textwrap.dedent(
    """
    import os, time

    from jobsched.handlers import registry

    @registry.handler("restart.effect")
    def effect(payload, ctx):
        folder = os.environ["RESTART_EFFECTS_DIR"]
        with open(os.path.join(folder, "calls.log"), "a") as calls:
            calls.write(ctx.effect_key + "\\n")
        time.sleep(payload.get("seconds", 0))
        try:
            fd = os.open(os.path.join(folder, ctx.effect_key), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
        except FileExistsError:
            pass  # a redelivered run: its effect is already committed
        return {"done": ctx.effect_key}
    """
)


@pytest.fixture
def aws() -> Iterator[EmbeddedAws]:
    """An AWS endpoint that outlives the scheduler processes that use it."""
    server = EmbeddedAws("127.0.0.1", free_port()).start()
    yield server
    server.stop()


def test_a_scheduler_killed_mid_flight_restarts_on_its_resources_and_every_run_succeeds_once(
    aws: EmbeddedAws, tmp_path: Path
) -> None:
    (tmp_path / "restart_effects.py").write_text(EFFECTS)
    effects = tmp_path / "effects"
    effects.mkdir()
    env = {
        "AWS_ENDPOINT_URL": aws.endpoint_url,
        "JOBSCHED_HANDLER_MODULES": "restart_effects",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "RESTART_EFFECTS_DIR": str(effects),
        "JOBSCHED_TICK_SECONDS": "5",
        "JOBSCHED_LEASE_SECONDS": "9",
    }
    first = start_stack(**env)
    jobs: list[str] = []
    try:
        # Given one-offs due over the next seconds, each a 3 s handler, some due after the crash
        now = datetime.now(UTC).replace(microsecond=0)
        for i in range(12):
            run_at = now + timedelta(seconds=2 + i)
            body = {"type": "one_off", "run_at": run_at.isoformat(), "handler": "restart.effect",
                    "payload": {"seconds": 3}}  # fmt: skip
            created = first.post("/api/jobs", body, **TENANT)
            assert created.status_code == 201, created.text
            jobs.append(created.json()["job_id"])
        # When the whole scheduler is killed while runs are in flight and others are still pending
        _wait_until(lambda: len(_calls(effects)) >= 2, timeout=30)
        first.process.kill()
        first.process.wait()
        before = set(_calls(effects))
        assert len(before) < len(jobs), "the crash came after every run had started: no run was pending"
    except BaseException:
        stop_stack(first)
        raise
    # Then a fresh scheduler on the same endpoint starts (it refused with QueueAlreadyExists before)
    second = start_stack(**env)
    try:
        for job_id in jobs:
            job = second.wait_for(job_id, lambda j: j["status"] == "COMPLETED", timeout=90, **TENANT)
            # and every run succeeded exactly once: one run row, SUCCEEDED, one committed effect
            [run] = job["recent_executions"]
            assert run["status"] == "SUCCEEDED", run
        committed = sorted(p.name for p in effects.iterdir() if p.name != "calls.log")
        assert len(committed) == len(jobs) == len(set(_calls(effects)))
    finally:
        stop_stack(second)


def _calls(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return log.read_text().split() if log.exists() else []


def _wait_until(predicate: object, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)
