"""Start the local stack (`jobsched local`, what `make run` runs) in a subprocess on a free port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from jobsched.local.stack import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Stack:
    """A running local stack and a tiny client for it."""

    url: str
    process: subprocess.Popen[str]

    def post(self, path: str, body: Any, **headers: str) -> requests.Response:
        return requests.post(self.url + path, json=body, headers=headers, timeout=10)

    def get(self, path: str, **headers: str) -> requests.Response:
        return requests.get(self.url + path, headers=headers, timeout=10)

    def wait_for(self, job_id: str, predicate: Any, timeout: float = 30, **headers: str) -> dict[str, Any]:
        """Poll GET /api/jobs/{id} until predicate(job) holds."""
        deadline = time.monotonic() + timeout
        while True:
            job: dict[str, Any] = self.get(f"/api/jobs/{job_id}", **headers).json()
            if predicate(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting; job is {job}")
            time.sleep(0.25)


def start_stack(**env: str) -> Stack:
    port = free_port()
    # The stack starts its own embedded AWS unless the caller hands it an endpoint (AWS_ENDPOINT_URL).
    environment = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    environment.update({"JOBSCHED_API_PORT": str(port), **env})
    process = subprocess.Popen(
        [sys.executable, "-m", "jobsched.cli", "local"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"local stack exited: {process.stdout.read() if process.stdout else ''}")
        try:
            if requests.get(url + "/api/health", timeout=1).status_code == 200:
                return Stack(url, process)
        except requests.RequestException:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("local stack did not serve within 60 s")


def stop_stack(stack: Stack) -> int:
    """Ctrl-C, as a user would; returns the exit code (killed after 20 s)."""
    stack.process.send_signal(signal.SIGINT)
    try:
        return stack.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        stack.process.kill()
        stack.process.wait()
        return -9


@pytest.fixture(scope="package")
def stack() -> Iterator[Stack]:
    """One local stack for the e2e package, with the real once-a-minute tick."""
    running = start_stack(JOBSCHED_TICK_SECONDS="60")
    try:
        yield running
    finally:
        stop_stack(running)
