"""The jobsched command line, offline parts: cron previews, argument parsing, the README's examples, SigV4."""

from __future__ import annotations

import argparse
import shlex
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from jobsched import cli, cron
from jobsched.domain.commands import BackfillRequest, CreateJobRequest, PatchJobRequest
from jobsched.services.schedule import MAX_BACKFILL_TICKS


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
        "2026-03-07T02:30:00.000-05:00",
        "2026-03-08T03:00:00.000-04:00",
        "2026-03-09T02:30:00.000-04:00",
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


def test_cron_next_prints_milliseconds_in_the_schedules_zone_as_in_utc(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given one schedule previewed in its own zone and in UTC
    after = ["--after", "2026-01-01T00:00:00+00:00", "-n", "1"]
    assert cli.main(["cron-next", "30 2 * * *", "--tz", "Europe/Berlin", *after]) == 0
    local = capsys.readouterr().out.strip()
    assert cli.main(["cron-next", "30 2 * * *", "--tz", "Europe/Berlin", *after, "--utc"]) == 0
    utc = capsys.readouterr().out.strip()
    # Then both print the same instant in the same format: ISO-8601, milliseconds, offset
    assert (local, utc) == ("2026-01-01T02:30:00.000+01:00", "2026-01-01T01:30:00.000+00:00")
    assert datetime.fromisoformat(local) == datetime.fromisoformat(utc)


def parse(*argv: str) -> argparse.Namespace:
    return cli.parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "expected_type"),
    [
        (["--run-at", "2027-01-01T00:00:00+00:00"], "one_off"),
        (["--cron", "0 * * * *"], "recurring"),
        (["--depends-on", "job_a,job_b"], "dependent"),
        (["--type", "one_off", "--json", '{"run_at": "2027-01-01T00:00:00+00:00"}'], "one_off"),
        (["--json", '{"type": "recurring", "cron_expr": "0 * * * *"}'], "recurring"),
        (["--json", '{"type": "one_off"}', "--cron", "0 * * * *"], "recurring"),  # flags override --json
    ],
)
def test_submit_takes_the_type_from_type_or_from_the_flag_that_says_when_it_runs(
    argv: list[str], expected_type: str
) -> None:
    # Given a submit command line with --type, or with the flag that implies it
    # When its body is built
    body = cli.submit_body(parse("submit", "--handler", "demo.echo", *argv))
    # Then the body carries the type, so the API never answers "type: is required"
    assert body["type"] == expected_type and body["handler"] == "demo.echo"


def test_submit_without_a_time_or_with_two_kinds_of_time_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a submit that says nothing about when the job runs, and one that says two things
    # When it is run
    # Then it exits 2 before any request, naming the flags that would say it
    assert cli.main(["submit", "--handler", "demo.echo", "--api-url", "http://127.0.0.1:9"]) == 2
    assert "--run-at (one_off), --cron (recurring), --depends-on (dependent), or --type" in (
        capsys.readouterr().err
    )
    two = ["--run-at", "2027-01-01T00:00:00+00:00", "--cron", "0 * * * *"]
    assert cli.main(["submit", "--handler", "demo.echo", *two, "--api-url", "http://127.0.0.1:9"]) == 2
    assert "--run-at and --cron imply different job types" in capsys.readouterr().err


def test_submit_and_edit_take_every_policy_flag_the_api_has() -> None:
    # Given the retry and schedule policy flags, on submit and on edit
    flags = [
        "--handler", "demo.flaky",
        "--name", "nightly",
        "--payload", '{"fail_times": 1}',
        "--timezone", "Europe/Berlin",
        "--max-attempts", "5",
        "--backoff", '{"initial_seconds": 5, "multiplier": 3, "max_seconds": 600, "jitter": false}',
        "--timeout", "60",
        "--overlap", "buffer_one",
        "--catchup", "all",
        "--max-catchup", "3",
        "--jitter", "7",
    ]  # fmt: skip
    expected = {
        "handler": "demo.flaky",
        "name": "nightly",
        "payload": {"fail_times": 1},
        "timezone": "Europe/Berlin",
        "max_attempts": 5,
        "backoff": {"initial_seconds": 5, "multiplier": 3, "max_seconds": 600, "jitter": False},
        "timeout_seconds": 60,
        "overlap_policy": "buffer_one",
        "catchup": "all",
        "max_catchup": 3,
        "jitter_seconds": 7,
    }
    # When the bodies are built
    submitted = cli.submit_body(parse("submit", "--cron", "0 2 * * *", *flags))
    edited = cli.edit_body(parse("edit", "job_x", *flags))
    # Then each flag is the API field of the same meaning, and the bodies are valid requests
    assert submitted == {**expected, "type": "recurring", "cron_expr": "0 2 * * *"}
    assert edited == expected
    CreateJobRequest.model_validate(submitted)
    PatchJobRequest.model_validate(edited)


def test_a_json_flag_that_is_not_a_json_object_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["submit", "--payload", "[1]"], ["edit", "job_x", "--backoff", "{oops"]):
        with pytest.raises(SystemExit) as exited:
            parse(*argv)
        assert exited.value.code == 2
    assert "must be a JSON object" in capsys.readouterr().err


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_cli_examples() -> list[list[str]]:
    """Every `.venv/bin/jobsched ...` command in the README's shell blocks, as argv, in order."""
    commands: list[list[str]] = []
    in_shell = False
    text = README.read_text(encoding="utf-8").replace("\\\n", " ")  # continued lines
    for line in text.splitlines():
        if line.startswith("```"):
            in_shell = line.strip() == "```bash"
            continue
        if not in_shell or ".venv/bin/jobsched " not in line:
            continue
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in [*words, ";"]:
            if word != ";":
                command.append(word)
            elif command:
                assert command[0] == ".venv/bin/jobsched", line
                commands.append(command[1:])
                command = []
    return commands


def test_every_cli_example_in_the_readme_parses_and_makes_a_request_the_api_accepts() -> None:
    # Given the README's CLI examples, in the order a reader runs them
    examples = readme_cli_examples()
    assert len(examples) >= 10 and {e[0] for e in examples} >= {"submit", "edit", "backfill", "cron-next"}
    cron_expr = None
    for argv in examples:
        # When each is parsed
        args = parse(*argv)
        # Then it parses; a submit names its type and an edit makes a valid PATCH
        if args.command == "submit":
            body = cli.submit_body(args)
            assert body["type"] in ("one_off", "recurring", "dependent")
            cron_expr = body.get("cron_expr", cron_expr)
        elif args.command == "edit":
            PatchJobRequest.model_validate(cli.edit_body(args))
            cron_expr = args.cron or cron_expr
        elif args.command == "backfill":
            # and a backfill of the job as the examples before it left it is within the limit
            assert cron_expr is not None
            request = BackfillRequest.model_validate({"from": args.start, "to": args.end})
            ticks = cron.parse(cron_expr, "UTC").ticks(
                request.from_ - timedelta(milliseconds=1), request.to, limit=MAX_BACKFILL_TICKS + 1
            )
            ticks = [tick for tick in ticks if tick < request.to]
            assert 0 < len(ticks) <= MAX_BACKFILL_TICKS, (cron_expr, argv, len(ticks))


def test_submit_and_edit_take_a_target_as_json() -> None:
    # Given a target on the command line, when submit and edit build their bodies, then it is sent as given
    target = '{"type": "http", "url": "https://hooks.example.com/run"}'
    body = cli.submit_body(parse("submit", "--target", target, "--run-at", "2030-01-01T00:00:00+00:00"))
    assert body["target"] == {"type": "http", "url": "https://hooks.example.com/run"}
    assert "handler" not in body
    assert cli.edit_body(parse("edit", "job_x", "--target", target))["target"]["type"] == "http"
