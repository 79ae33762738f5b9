"""Shared fixtures: moto in-process for integration tests, a fake clock, service wiring."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from jobsched.ports import FakeClock
from jobsched.settings import Settings
from jobsched.wiring import Services, build
from tests.support import Pump, provision, use_clocked_queue

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "jobsched")
os.environ.pop("AWS_ENDPOINT_URL", None)

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """Under pytest-xdist (make test), refuse to run tests that share a node id: xdist schedules by
    node id and silently drops all but one of them (schemathesis gives every operation's case of a
    test one id: tests/e2e/test_fuzz.py runs in a pytest of its own, see the Makefile)."""
    shared = sorted(nodeid for nodeid, n in Counter(ids).items() if n > 1)
    if shared:
        raise pytest.UsageError(f"tests that share a node id cannot run under -n (run them apart): {shared}")


@pytest.fixture
def aws() -> Iterator[Settings]:
    """A fresh moto account with every table and queue the stack defines."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield provision("test", shard_count=4, lookahead_seconds=90, tick_seconds=60, lease_seconds=30)


@pytest.fixture
def clock() -> FakeClock:
    """Simulated time starting at T0."""
    return FakeClock(T0)


@pytest.fixture
def svc(aws: Settings, clock: FakeClock) -> Services:
    """Services wired to moto and the fake clock; workers never sleep."""
    services = build(
        aws,
        dynamodb=boto3.client("dynamodb"),
        sqs=boto3.client("sqs"),
        stepfunctions=boto3.client("stepfunctions"),
        clock=clock,
    )
    services.worker.sleep = lambda seconds: clock.advance(seconds)
    # moto in-process is not thread-safe (a query iterating a table while another thread writes
    # fails inside moto); the embedded server of the local stack serializes requests instead.
    services.dispatcher.max_workers = services.dispatcher.io_workers = 1
    return services


@pytest.fixture
def pump(svc: Services, clock: FakeClock) -> Pump:
    """The SQS event-source mapping, played by the fake clock."""
    use_clocked_queue(svc)
    return Pump(svc, clock)
