"""bench/costs.py's target kinds: the AWS calls a healthy run of each target kind makes, counted by the bench.

Deterministic counts only (no timing): the bench's own account (moto, metered, fake clock) and its
loopback peers, the way `make bench`'s cost table counts them.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from bench import costs

JOBS = 2
MINUTES = 3


def healthy_minutes(kind: str) -> tuple[dict[str, Any], costs.Account]:
    """JOBS every-minute jobs of `kind`'s target, MINUTES measured minutes: the bench's per-run figures."""
    facts = costs.infra_facts()
    environment = {**facts.environment, **{k: v for k, v in os.environ.items() if k.startswith("JOBSCHED_")}}
    with costs.account(1, environment) as acct:
        fixed = costs.idle_passes(acct, 1, costs.T0 - 5 * costs.MINUTE)
        costs._use_target(acct, costs._TARGETS[kind](acct))
        for i in range(JOBS):
            acct.post(
                {"type": "recurring", "cron_expr": "* * * * *", "handler": "demo.echo", "name": f"r{i}"}
            )
        for k in range(2):  # unmeasured: the request's hand-over and the first pass (the role assumed)
            acct.minute(costs.T0 + k * costs.MINUTE)
        passes = [0]
        before = acct.outcomes["succeeded"]
        with costs.window(acct, passes) as measured:
            for k in range(2, 2 + MINUTES):
                acct.minute(costs.T0 + k * costs.MINUTE)
                passes[0] += 1
        runs = acct.outcomes["succeeded"] - before
        return costs.per_run(measured[0], fixed, runs, facts), acct


@pytest.mark.parametrize(
    ("kind", "own_calls"),
    [
        ("target_http", {}),
        ("target_sqs", {"SQS.SendMessage": 1.0}),
        ("target_lambda", {"Lambda.Invoke": 1.0}),
    ],
)
def test_a_healthy_target_run_makes_the_targets_own_call_once_and_nothing_else_of_its_own(
    kind: str, own_calls: dict[str, float]
) -> None:
    # Given JOBS every-minute jobs of one target kind on the bench's account
    # When MINUTES minutes of healthy runs are measured
    result, _ = healthy_minutes(kind)

    # Then every tick ran once, and the target's own AWS calls (as the tenant's role) are exactly one per run
    assert result["runs"] == JOBS * MINUTES
    assert result["target_calls"] == own_calls
    # and the role assumed in the warm-up minutes is cached: no AssumeRole in the window
    assert result["calls"].get("STS.AssumeRole", 0.0) == 0.0
    # and only a lambda target leaves a request on the user's own bill
    assert result["user_bill_usd_per_million"] == pytest.approx(0.20 if kind == "target_lambda" else 0.0)


def test_an_http_targets_signing_secret_is_decrypted_once_a_minute_not_once_a_run() -> None:
    # Given JOBS every-minute jobs of one tenant with http targets, the webhook answering at once
    # When MINUTES minutes of healthy runs are measured
    result, acct = healthy_minutes("target_http")

    # Then each minute costs one KMS Decrypt (the cached secret) shared by the minute's JOBS runs
    assert result["calls"]["KMS.Decrypt"] == pytest.approx(1 / JOBS)
    assert result["kms_requests"] == pytest.approx(1 / JOBS)
    # and the webhook received each of the window's ticks' envelopes once
    window = {costs.T0.replace(second=0) + timedelta(minutes=k) for k in range(2, 2 + MINUTES)}
    hooked = [
        a.body["job_id"]
        for a in acct.peers["webhook"].arrivals
        if datetime.fromisoformat(a.body["scheduled_for"]) in window
    ]
    assert len(set(hooked)) == JOBS and all(n == MINUTES for n in Counter(hooked).values())
    # and the worker's duration includes the call's wall time (the worker waits on the peer)
    assert result["seconds_per_run"]["target_call_wall"] > 0.0
