"""Request models and the retry policy value object."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import Backoff, RetryPolicy


def test_it_requires_run_at_for_one_off_and_cron_for_recurring() -> None:
    CreateJobRequest(type="one_off", handler="demo.echo", run_at=datetime(2027, 1, 1, tzinfo=UTC))
    CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="0 2 * * *")
    with pytest.raises(ValidationError, match="run_at is required"):
        CreateJobRequest(type="one_off", handler="demo.echo")
    with pytest.raises(ValidationError, match="cron_expr is required"):
        CreateJobRequest(type="recurring", handler="demo.echo")


def test_it_defaults_the_retry_policy_and_validates_it() -> None:
    policy = CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="* * * * *").retry_policy()
    assert policy == RetryPolicy(max_attempts=3, backoff=Backoff(), timeout_seconds=None)
    with pytest.raises(ValidationError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValidationError, match="max_seconds"):
        Backoff(initial_seconds=10, max_seconds=5)


def test_it_computes_capped_exponential_backoff() -> None:
    backoff = Backoff(initial_seconds=1, multiplier=2, max_seconds=5)
    assert [backoff.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_it_is_frozen() -> None:
    policy = RetryPolicy()
    with pytest.raises(ValidationError):
        policy.max_attempts = 5  # type: ignore[misc]
