"""Shared fixtures: moto in-process for integration tests, a fake clock, service wiring."""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import boto3
import botocore.session
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.models import StepFunctionsParserBackend

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

# Two costs every test with a fresh moto account paid again, about a second of its setup: each boto3
# Session builds a botocore loader that reads the service models' JSON from disk anew (a Lambda does
# it once per cold start; a test cold-starts its functions and builds several sessions), and moto
# parses each state machine's ASL with its ANTLR parser only to validate it. Both are pure functions
# of their input (a data path; a definition's text), so the tests share one loader per data path and
# one validation per definition. Production code is unchanged: these are the test process's only.
botocore.session.create_loader = functools.cache(botocore.session.create_loader)  # type: ignore[attr-defined]
StepFunctionsParserBackend._validate_definition = staticmethod(  # type: ignore[method-assign]
    functools.cache(StepFunctionsParserBackend._validate_definition)
)


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
