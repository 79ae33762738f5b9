"""The `jobsched` client commands over HTTP, against the API Lambda (moto behind it)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobsched import cli
from jobsched.domain import times
from jobsched.settings import Settings
from jobsched.wiring import build
from tests.integration.conftest import ApiOverLoopback


@pytest.fixture
def api_url(api_over_loopback: ApiOverLoopback) -> str:
    """The API Lambda served over HTTP on a free loopback port, as the local stack serves it."""
    return api_over_loopback.url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_submit_sends_every_policy_flag_and_edit_changes_the_handler(
    api_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a recurring job submitted with the policy flags and no --type
    code, out = run(
        capsys,
        "submit", "--api-url", api_url, "--handler", "demo.echo", "--cron", "0 2 * * *",
        "--overlap", "buffer_one", "--catchup", "all", "--max-catchup", "3", "--timeout", "60",
        "--backoff", '{"initial_seconds": 5, "max_seconds": 600}', "--max-attempts", "4",
    )  # fmt: skip
    assert code == 0, out
    job_id = json.loads(out)["job_id"]
    # When its handler is changed with edit --handler
    code, out = run(capsys, "edit", "--api-url", api_url, job_id, "--handler", "demo.fail")
    # Then the API took every flag, and the edit
    assert code == 0, out
    job = json.loads(out)
    assert job["handler"] == "demo.fail" and job["type"] == "recurring"
    assert (job["overlap_policy"], job["catchup"], job["max_catchup"]) == ("buffer_one", "all", 3)
    assert (job["timeout_seconds"], job["max_attempts"]) == (60, 4)
    assert (job["backoff"]["initial_seconds"], job["backoff"]["max_seconds"]) == (5, 600)


def test_non_ascii_text_is_sent_and_printed_as_itself(
    api_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a job whose name and payload are not ASCII
    code, out = run(
        capsys, "submit", "--api-url", api_url, "--handler", "demo.echo", "--cron", "0 2 * * *",
        "--name", "café nightly", "--payload", '{"greeting": "grüß dich, 東京"}',
    )  # fmt: skip
    assert code == 0, out
    # When it is shown
    code, out = run(capsys, "get", "--api-url", api_url, json.loads(out)["job_id"])
    # Then the text prints as itself, not as \\u escapes
    assert code == 0
    assert '"name": "café nightly"' in out and '"greeting": "grüß dich, 東京"' in out
    assert "\\u" not in out


def test_submit_file_creates_each_line_a_batch_at_a_time_and_a_second_run_creates_nothing_twice(
    api_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Any, aws: Any
) -> None:
    # Given a JSONL file of 150 one-offs (two batches), one of them with an unknown handler
    lines = [
        {"type": "one_off", "run_at": "2030-01-01T09:00:00+00:00", "handler": "demo.echo", "name": f"j{i}"}
        for i in range(150)
    ]
    lines[120]["handler"] = "no.such"
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    # When it is submitted, and then submitted again
    code, out = run(capsys, "submit", "--api-url", api_url, "--file", str(path))
    again, out_again = run(capsys, "submit", "--api-url", api_url, "--file", str(path))
    # Then 149 were created and line 121 failed naming its field; the rerun answered the same jobs
    summary = json.loads(out)
    assert (code, summary["created"], summary["failed"]) == (1, 149, 1)
    [failure] = summary["errors"]
    assert failure["line"] == 121 and failure["error"]["message"].startswith("jobs[20].handler: ")
    assert (again, json.loads(out_again)) == (1, summary)
    # and the one-offs were packed, a batch to an item: two packs (definitions and cursor each), no
    # item per job; the listing shows the 149
    import boto3

    items = boto3.client("dynamodb").scan(TableName=aws.jobs_table)["Items"]
    assert (
        sorted((i["PK"]["S"][:5], i["SK"]["S"]) for i in items)
        == [("PACK#", "DEFS"), ("PACK#", "DEFS")] + [("PACK#", "META")] * 2
    )
    code, out = run(capsys, "list", "--api-url", api_url, "--limit", "100", "--all", "--output", "json")
    assert code == 0, out
    assert len(json.loads(out)["items"]) == 149


def test_graph_with_a_period_prints_each_nodes_status_in_that_period_and_a_bad_one_is_refused(
    api_url: str, aws: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an hourly job named "extract" with a run two days ago, and its dependant "load" without one
    code, out = run(
        capsys, "submit", "--api-url", api_url, "--handler", "demo.echo", "--cron", "0 * * * *",
        "--name", "extract", "--output", "json",
    )  # fmt: skip
    assert code == 0, out
    root = json.loads(out)["job_id"]
    code, out = run(
        capsys, "submit", "--api-url", api_url, "--type", "dependent", "--handler", "demo.echo",
        "--depends-on", root, "--name", "load", "--output", "json",
    )  # fmt: skip
    assert code == 0, out
    old = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    build(aws).runs.put_pending(job_id=root, tenant="default", scheduled_for=old, now=old)
    # When its graph is shown for that period
    code, out = run(
        capsys, "graph", "--api-url", api_url, root, "--period", old.isoformat(), "--output", "table"
    )
    # Then it prints that one period and the root's run in it (the dependant has none)
    assert code == 0, out
    assert out.splitlines() == [
        "extract -> load",
        "",
        f"period {times.iso(old)}",
        f"  {'extract':<30} PENDING",
    ]
    # And a period that is no instant is refused, naming period
    code = cli.main(["graph", "--api-url", api_url, root, "--period", "last week"])
    answer = json.loads(capsys.readouterr().out)
    assert code != 0 and answer["error"]["message"].startswith("period:")
