"""Fixtures for the integration tests: the API Lambda, cold-started against moto."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from jobsched import constants as c
from jobsched.handlers import registry
from jobsched.local import events, lambdas, loopback
from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from jobsched.settings import Settings
from jobsched.wiring import Services, build
from tests.support import provision

Call = Callable[..., tuple[int, dict[str, Any]]]


@pytest.fixture
def api(aws: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A cold start of functions/api/handler.py wired to the moto resources."""
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(c.TENANT_SOURCE_ENV, "header")
    yield lambdas.load("api")


class ApiOverLoopback:
    """The API Lambda served over HTTP on a free loopback port (jobsched.local.loopback), as the local
    stack serves it; `before_get(path)` runs on the serving thread before each GET is answered."""

    def __init__(self, api: ModuleType) -> None:
        self.before_get: Callable[[str], None] = lambda path: None
        served = self

        class Handler(loopback.QuietHandler):
            def _serve(self) -> None:
                if self.command == "GET":
                    served.before_get(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                event = events.api_gateway_event(self.command, self.path, dict(self.headers.items()), body)
                out = api.lambda_handler(event, lambdas.LambdaContext("api"))
                payload = (out.get("body") or "").encode()
                self.send_response(out["statusCode"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

        self.server = loopback.serve(Handler, name="api-over-loopback")
        self.url = self.server.url


@pytest.fixture
def api_over_loopback(api: ModuleType) -> Iterator[ApiOverLoopback]:
    """The API Lambda over HTTP on a free loopback port, stopped (socket closed, thread joined) after."""
    running = ApiOverLoopback(api)
    try:
        yield running
    finally:
        running.server.stop()


@pytest.fixture
def call(api: ModuleType) -> Call:
    def _call(
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        data = raw.encode() if raw is not None else (json.dumps(body).encode() if body is not None else None)
        event = events.api_gateway_event(
            method, path, {"Content-Type": "application/json", **(headers or {})}, data
        )
        out = api.lambda_handler(event, lambdas.LambdaContext("api"))
        return out["statusCode"], json.loads(out["body"]) if out.get("body") else {}

    return _call


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    aws = EmbeddedAws("127.0.0.1", free_port()).start()
    yield aws.endpoint_url
    aws.stop()


@pytest.fixture
def served(endpoint: str, request: pytest.FixtureRequest) -> Services:
    """Services against the embedded moto server (thread-safe), Step Functions executing, real time."""
    prefix = f"f{abs(hash(request.node.name)) % 10**8}"
    kw = {"endpoint_url": endpoint}
    settings = provision(prefix, endpoint_url=endpoint, shard_count=2, lease_seconds=30)
    handlers = registry.copy()
    services = build(
        settings,
        dynamodb=boto3.client("dynamodb", **kw),
        sqs=boto3.client("sqs", **kw),
        stepfunctions=boto3.client("stepfunctions", **kw),
        handlers=handlers,
        sns=boto3.client("sns", **kw),
    )
    services.sns = boto3.client("sns", **kw)  # type: ignore[attr-defined]
    return services
