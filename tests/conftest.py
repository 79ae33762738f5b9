"""Shared fixtures: moto in-process for integration tests, a fake clock, service wiring."""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.session
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

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

# Two costs the tests paid again and again: each boto3 Session builds a botocore loader that reads
# the service models' JSON from disk anew (a Lambda does it once per cold start; a test cold-starts
# its functions and builds several sessions), and moto parses a state machine's ASL with its ANTLR
# parser (about 0.18 s) at every CreateStateMachine and again at every StartExecution. Both are pure
# functions of their input (a data path; a definition's text), so the test process keeps one loader
# per data path and one parse tree per definition. Each execution still gets evaluation components of
# its own (moto's Preprocessor over the tree, about 0.02 s): they carry an execution's state.
# Production code and the local stack's processes are unchanged.
botocore.session.create_loader = functools.cache(botocore.session.create_loader)  # type: ignore[attr-defined]
_parse_asl = AmazonStateLanguageParser.parse


@functools.cache
def _asl_tree(definition: str) -> Any:
    return _parse_asl(definition)[1]  # a definition that does not parse raises, and is not cached


AmazonStateLanguageParser.parse = staticmethod(  # type: ignore[method-assign]
    lambda definition: (Preprocessor().visit(_asl_tree(definition)), _asl_tree(definition))
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
