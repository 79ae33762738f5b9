"""Fixtures for the integration tests: the API Lambda, cold-started against moto."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from jobsched import constants as c
from jobsched.local import events, lambdas
from jobsched.settings import Settings

Call = Callable[..., tuple[int, dict[str, Any]]]


@pytest.fixture
def api(aws: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A cold start of functions/api/handler.py wired to the moto resources."""
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(c.TENANT_SOURCE_ENV, "header")
    yield lambdas.load("api")


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
