"""The CLI's concurrency flag and the admin quota group's parsing (no API, no AWS)."""

from __future__ import annotations

import pytest

from jobsched.cli.app import parser, submit_body


def test_submit_concurrency_key_colon_limit_becomes_the_bodys_concurrency() -> None:
    args = parser().parse_args(
        ["submit", "--handler", "demo.echo", "--cron", "* * * * *", "--concurrency", "db:2"]
    )
    assert submit_body(args)["concurrency"] == {"key": "db", "limit": 2}


@pytest.mark.parametrize("bad", ["db", "db:", "db:two", ":"])
def test_a_concurrency_without_a_numeric_limit_is_a_usage_error(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["submit", "--handler", "demo.echo", "--cron", "* * * * *", "--concurrency", bad])
    assert exit_.value.code == 2
    assert "KEY:LIMIT" in capsys.readouterr().err


def test_admin_quota_set_takes_each_quota_flag_and_requires_a_tenant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parser().parse_args(
        [
            "admin",
            "quota",
            "set",
            "--tenant",
            "t",
            "--max-jobs",
            "5",
            "--min-cron-interval",
            "60",
            "--table",
            "q",
        ]
    )
    assert (args.max_jobs, args.min_cron_interval_seconds, args.max_concurrent_runs) == (5, 60, None)
    with pytest.raises(SystemExit):
        parser().parse_args(["admin", "quota", "set", "--max-jobs", "5"])
    capsys.readouterr()
