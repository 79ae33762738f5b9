"""The DAG fan-out cap against moto_server (thread-safe): creates racing for an upstream's last
places never give it more dependants than the cap, because the cap is checked in the write that adds
each edge, not only in the service's read before it (issue 17)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.errors import FanOutFull
from jobsched.ports import FakeClock
from jobsched.wiring import Services
from tests.support import services_on

T0 = times.parse_stored("2026-11-30T12:00:00.000Z")
CAP = 3
RACERS = 6


@pytest.fixture
def served(endpoint: str, request: pytest.FixtureRequest) -> Iterator[Services]:
    yield services_on(endpoint, f"fo{abs(hash(request.node.name)) % 10**8}", clock=FakeClock(T0))


def submit(svc: Services, **fields: Any) -> str:
    return svc.job_service.submit(CreateJobRequest(**fields), tenant="t", idempotency_key=None).job_id


def test_racing_creates_never_give_an_upstream_more_dependants_than_the_cap(
    served: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = served
    # Given a cap of 3 (the service's read and the store's write), and an upstream with 1 dependant
    monkeypatch.setattr("jobsched.services.dag.MAX_FAN_OUT", CAP)
    store = svc.job_service.jobs
    monkeypatch.setattr(store, "max_fan_out", CAP)
    up = submit(svc, type="one_off", handler="demo.echo", run_at=T0 + timedelta(hours=1))
    submit(svc, type="dependent", handler="demo.echo", depends_on=[up])
    # And 6 creates of a dependant that all pass the service's check (1 < 3) before any of them writes
    everyone_read = threading.Barrier(RACERS, timeout=60)
    write = store.create_with_idempotency

    def write_after_everyone_read(*args: Any, **kwargs: Any) -> Any:
        everyone_read.wait()
        return write(*args, **kwargs)

    monkeypatch.setattr(store, "create_with_idempotency", write_after_everyone_read)
    created: list[str] = []
    refused: list[FanOutFull] = []
    lock = threading.Lock()

    def create() -> None:
        try:
            job_id = submit(svc, type="dependent", handler="demo.echo", depends_on=[up])
        except FanOutFull as exc:
            with lock:
                refused.append(exc)
        else:
            with lock:
                created.append(job_id)

    # When they write at once
    threads = [threading.Thread(target=create) for _ in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # Then exactly the 2 places left are taken; the other 4 are refused naming the upstream
    assert len(created) == CAP - 1 and len(refused) == RACERS - (CAP - 1)
    assert all(f"job '{up}' has {CAP} dependants" in str(exc) for exc in refused)
    upstream = store.get_job(up)
    assert upstream is not None and len(upstream.dependants) == CAP
    assert set(created) <= set(upstream.dependants)
