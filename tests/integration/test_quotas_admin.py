"""An operator's quota, set with `jobsched admin quota` straight to the quotas table (moto), holds the
API Lambda to it: a create over max_jobs is a 429 naming the quota; the tenant API has no way to
change it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from jobsched.cli import main
from jobsched.settings import Settings
from tests.integration.conftest import Call

RUN_AT = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
ONE_OFF = {"type": "one_off", "handler": "demo.echo", "run_at": RUN_AT}
A = {"X-Tenant": "team-a"}


def admin(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["admin", "quota", *argv]) == 0
    answer: dict[str, object] = json.loads(capsys.readouterr().out)
    return answer


def test_an_operators_quota_set_with_the_cli_makes_the_api_answer_429_past_it(
    aws: Settings, call: Call, capsys: pytest.CaptureFixture[str]
) -> None:
    table = ["--table", aws.quotas_table]
    # Given no quota: the defaults
    got = admin(capsys, "get", "--tenant", "team-a", *table)
    assert got["source"] == "default" and got["max_jobs"] == 10_000
    # When an operator sets team-a's max_jobs to 2 (the other fields keep their values)
    admin(capsys, "set", "--tenant", "team-a", "--max-jobs", "2", *table)
    admin(capsys, "set", "--tenant", "team-a", "--min-cron-interval", "60", *table)
    got = admin(capsys, "get", "--tenant", "team-a", *table)
    assert got["source"] == "set" and got["max_jobs"] == 2 and got["min_cron_interval_seconds"] == 60
    listed = admin(capsys, "list", *table)
    assert [item["tenant"] for item in listed["items"]] == ["team-a"]  # type: ignore[attr-defined]
    # Then the API (a cold start, after the quota was set) holds team-a to 2 jobs
    assert call("POST", "/api/jobs", ONE_OFF, headers=A)[0] == 201
    assert call("POST", "/api/jobs", ONE_OFF, headers=A)[0] == 201
    status, answer = call("POST", "/api/jobs", ONE_OFF, headers=A)
    assert status == 429, answer
    assert answer["quota"] == "max_jobs" and answer["limit"] == 2
    # And every-second schedules are refused for team-a
    status, answer = call(
        "POST",
        "/api/jobs",
        {"type": "recurring", "handler": "demo.echo", "cron_expr": "* * * * * *"},
        headers=A,
    )
    assert status == 429 and answer["quota"] == "min_cron_interval_seconds", answer


def test_a_bad_quota_value_is_refused_by_the_cli_and_nothing_is_written(
    aws: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "admin",
                "quota",
                "set",
                "--tenant",
                "team-a",
                "--max-runs-per-second",
                "0",
                "--table",
                aws.quotas_table,
            ]
        )
        == 2
    )
    capsys.readouterr()
    assert admin(capsys, "get", "--tenant", "team-a", "--table", aws.quotas_table)["source"] == "default"


def test_an_operator_caps_a_tenants_fargate_cpu_with_the_cli(
    aws: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    table = ["--table", aws.quotas_table]
    # Given no cap: the tenant's ECS-placed runs share the account's quota only
    assert admin(capsys, "get", "--tenant", "team-a", *table)["max_fargate_cpu"] is None
    # When an operator caps team-a at 2 vCPU (2048 CPU units), then the quota says so
    admin(capsys, "set", "--tenant", "team-a", "--max-fargate-cpu", "2048", *table)
    got = admin(capsys, "get", "--tenant", "team-a", *table)
    assert got["source"] == "set" and got["max_fargate_cpu"] == 2048
