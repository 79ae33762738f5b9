"""No payload reaches a trace: the entry points where payloads, results and errors flow tell the
tracer to capture neither their responses nor their exceptions (a security review's finding)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools import Tracer

from jobsched.local import lambdas
from jobsched.settings import Settings


@pytest.fixture
def recorded(aws: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, dict[str, Any]]]:
    """What each entry point asked capture_lambda_handler for, by the tracer's service."""
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    seen: dict[str, dict[str, Any]] = {}
    original = Tracer.capture_lambda_handler

    def spy(self: Tracer, lambda_handler: Any = None, **options: Any) -> Any:
        seen[str(self.service)] = {"capture_response": True, "capture_error": True, **options}
        return original(self, lambda_handler, **options)

    monkeypatch.setattr(Tracer, "capture_lambda_handler", spy)
    yield seen


@pytest.mark.parametrize("function", ["api", "worker", "reconciler"])
def test_an_entry_point_that_carries_payloads_traces_neither_its_response_nor_its_errors(
    recorded: dict[str, dict[str, Any]], function: str
) -> None:
    # Given the entry point, cold-started
    lambdas.load(function)
    # Then its handler's response (a job view, a batch's results) and its exceptions (which quote
    # payloads and results) stay out of the trace's metadata
    assert recorded[f"jobsched-{function}"] == {"capture_response": False, "capture_error": False}
