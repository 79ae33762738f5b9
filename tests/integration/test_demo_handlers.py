"""The demo.* handlers on a deployed function: left out unless JOBSCHED_DEMO_HANDLERS=true (fail-closed)."""

from __future__ import annotations

import json

import pytest

from jobsched import constants as c
from jobsched.handlers import DEMO_HANDLERS, registry
from jobsched.local import events, lambdas
from jobsched.settings import Settings


def _create(handler: str) -> dict[str, object]:
    api = lambdas.load("api")
    body = json.dumps({"type": "recurring", "cron_expr": "0 2 * * *", "handler": handler}).encode()
    event = events.api_gateway_event("POST", "/api/jobs", {"Content-Type": "application/json"}, body)
    out: dict[str, object] = api.lambda_handler(event, lambdas.LambdaContext("api"))
    return out


@pytest.fixture
def deployed(aws: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A function's environment as CDK sets it, less JOBSCHED_DEMO_HANDLERS."""
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(c.TENANT_SOURCE_ENV, "header")
    monkeypatch.delenv(c.DEMO_HANDLERS_ENV, raising=False)


def test_settings_from_an_environment_without_the_flag_leave_the_demo_handlers_out() -> None:
    env = {c.JOBS_TABLE_ENV: "j", c.RUNS_TABLE_ENV: "r", c.EXECUTION_QUEUE_URL_ENV: "q"}

    assert Settings.from_env(env).demo_handlers is False
    assert Settings.from_env({**env, c.DEMO_HANDLERS_ENV: "yes"}).demo_handlers is False
    assert Settings.from_env({**env, c.DEMO_HANDLERS_ENV: "true"}).demo_handlers is True


@pytest.mark.parametrize("handler", DEMO_HANDLERS)
def test_a_deployed_api_refuses_a_demo_handler_unless_asked(deployed: None, handler: str) -> None:
    # Given the api cold-started without JOBSCHED_DEMO_HANDLERS
    # When a job names a demo handler
    out = _create(handler)

    # Then it is a 400 naming the handler, and the process-wide registry still has it (the local stack's)
    assert out["statusCode"] == 400, out["body"]
    assert "handler" in str(out["body"])
    assert handler in registry


def test_a_deployed_api_accepts_demo_handlers_with_the_flag(
    deployed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(c.DEMO_HANDLERS_ENV, "true")

    out = _create("demo.echo")

    assert out["statusCode"] == 201, out["body"]


def test_leaving_the_demos_out_keeps_every_user_handler(
    deployed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry._handlers, "mine.nightly", lambda payload, ctx: None)

    out = _create("mine.nightly")

    assert out["statusCode"] == 201, out["body"]
