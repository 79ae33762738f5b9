"""The receiver's check in docs/deploy.md verifies what an http target really sends, and nothing else."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from jobsched.adapters.memory import MemorySigningSecrets
from jobsched.adapters.targets import AddressPolicy, HttpCaller
from jobsched.domain.targets import HttpTarget
from jobsched.handlers import RunContext
from jobsched.local import loopback
from jobsched.ports import FakeClock

DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def doc_verify() -> Any:
    """The `verify` function of the doc's Python snippet, as a receiver would paste it."""
    (snippet,) = [
        block
        for block in re.findall(r"```python\n(.*?)```", DEPLOY_DOC.read_text(), re.S)
        if "def verify" in block
    ]
    namespace: dict[str, Any] = {}
    exec(compile(snippet, str(DEPLOY_DOC), "exec"), namespace)
    return namespace["verify"]


@pytest.fixture
def received() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """A receiver on a free loopback port recording each request's signature header and raw body."""
    seen: list[tuple[str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append((self.headers.get("X-Jobsched-Signature", ""), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with loopback.serve(Handler) as server:
        yield f"{server.url}/hook", seen


def test_the_documented_check_accepts_a_real_signature_and_refuses_a_tampered_stale_or_foreign_one(
    received: tuple[str, list[tuple[str, bytes]]],
) -> None:
    # Given tenant t1's secret from the store, and an http target that signs with it
    url, seen = received
    clock = FakeClock(T0)
    secrets = MemorySigningSecrets(clock=clock)
    target = HttpCaller(
        HttpTarget(url=url), signing_secret=secrets.current, policy=AddressPolicy.local(), clock=clock
    )
    envelope = {
        "job_id": "job-1",
        "run_id": "job-1-1",
        "tenant": "t1",
        "scheduled_for": T0.isoformat(),
        "attempt": 1,
        "effect_key": "job-1-1",
        "payload": {"text": "héllo"},
    }
    ctx = RunContext("job-1", "job-1-1", "t1", T0, 1, "job-1-1")

    # When the target calls the receiver
    target.invoke(envelope, ctx)

    # Then the doc's verify accepts what arrived, and only that
    ((header, body),) = seen
    verify = doc_verify()
    now = T0.timestamp()
    secret = secrets.current("t1")
    assert verify(secret, header, body, now=now)
    assert not verify(secret, header, body.replace(b"job-1", b"job-2"), now=now)  # tampered
    assert not verify(secret, header, body, now=now + 301)  # a replayed capture, too old
    assert not verify(secrets.current("t2"), header, body, now=now)  # another tenant's secret
    assert not verify(secrets.rotate("t1").secret, header, body, now=now)  # a rotated-away signature
    assert not verify(secret, "garbage", body, now=now)
