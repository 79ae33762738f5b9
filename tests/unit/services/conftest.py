"""Service unit tests: the real services on the in-memory fakes, the network blocked, time faked."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from jobsched.adapters.memory import (
    MemoryAlertPublisher,
    MemoryAlertStore,
    MemoryJobStore,
    MemoryPackStore,
    MemoryRunQueue,
    MemoryRunStore,
    MemoryStateMachines,
)
from jobsched.handlers import HandlerRegistry, RunContext, registry
from jobsched.ports import FakeClock
from jobsched.services.run import Delivery, InFlightElsewhere, Outcome
from jobsched.settings import Settings
from jobsched.wiring import Services, compose

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


class NetworkBlocked(AssertionError):
    """A unit test tried to open a connection."""


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every socket connect and name lookup fails: a unit test that reaches AWS (or moto) fails."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NetworkBlocked(f"network access in a unit test: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@dataclass
class World:
    """The services wired to the fakes, and the fakes themselves."""

    svc: Services
    clock: FakeClock
    jobs: MemoryJobStore
    runs: MemoryRunStore
    queue: MemoryRunQueue
    machines: MemoryStateMachines
    handlers: HandlerRegistry

    def deliver(self) -> list[Outcome | str]:
        """Play the SQS event source once: every visible message to the worker, acknowledged unless
        the worker leaves it queued (then "left")."""
        outcomes: list[Outcome | str] = []
        for m in self.queue.receive():
            try:
                outcomes.append(self.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body)))
            except InFlightElsewhere:
                outcomes.append("left")
                continue
            self.queue.delete(m.receipt_handle)
        return outcomes

    def handler(self, name: str, fn: Callable[[dict[str, Any], RunContext], Any]) -> None:
        self.handlers.register(name, fn)


@pytest.fixture
def world() -> Iterator[World]:
    clock = FakeClock(T0)
    settings = Settings(
        jobs_table="jobs",
        runs_table="runs",
        execution_queue_url="memory://execution",
        failure_workflow_arn="arn:failure",
        dag_workflow_arn="arn:dag",
        shard_count=2,
        lease_seconds=300,
    )
    handlers = registry.copy()
    jobs, runs = MemoryJobStore(shard_count=settings.shard_count), MemoryRunStore()
    queue, machines = MemoryRunQueue(clock=clock, visibility_seconds=300), MemoryStateMachines("arn:failure")
    svc = compose(
        settings,
        jobs=jobs,
        runs=runs,
        queue=queue,
        state_machines=machines,
        clock=clock,
        handlers=handlers,
        alert_store=MemoryAlertStore(),
        alert_publisher=MemoryAlertPublisher(),
        packs=MemoryPackStore(jobs, runs),
    )
    svc.worker.sleep = lambda seconds: clock.advance(seconds)  # type: ignore[assignment]
    svc.dispatcher.sleep = lambda seconds: None
    yield World(svc, clock, jobs, runs, queue, machines, handlers)
