"""The jobsched command line, offline parts: cron previews and SigV4 signing."""

from __future__ import annotations

import pytest

from jobsched import cli


def test_it_prints_the_next_fire_times_as_the_dispatcher_computes_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(
        [
            "cron-next",
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2026-03-07T00:00:00+00:00",
            "-n",
            "3",
        ]
    )
    assert code == 0
    # 2026-03-08 02:30 does not exist in New York: it fires once at 03:00 EDT, the first instant after the gap
    assert capsys.readouterr().out.splitlines() == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]


def test_it_prints_utc_on_request_and_refuses_a_naive_after(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(["cron-next", "*/10 * * * * *", "--after", "2026-01-01T00:00:00+00:00", "-n", "2", "--utc"])
        == 0
    )
    assert capsys.readouterr().out.splitlines() == [
        "2026-01-01T00:00:10.000+00:00",
        "2026-01-01T00:00:20.000+00:00",
    ]
    assert cli.main(["cron-next", "* * * * *", "--after", "2026-01-01T00:00:00"]) == 2
    assert cli.main(["cron-next", "61 * * * *"]) == 2


def test_it_signs_requests_for_an_iam_authorized_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    headers = cli._signed_headers(
        "POST",
        "https://abc.execute-api.eu-west-1.amazonaws.com/v1/api/jobs",
        b"{}",
        {"Content-Type": "application/json"},
    )
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in headers["Authorization"]
    assert "X-Amz-Date" in headers
