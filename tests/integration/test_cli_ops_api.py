"""The operator's commands over HTTP against the API Lambda (moto behind it): list, stats, and the
progress of a long backfill and bulk action, whose chunks the test's worker does between polls."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from jobsched import cli
from jobsched.domain.operations import OperationMessage
from jobsched.services.operations import OperationService
from jobsched.settings import Settings
from jobsched.wiring import build
from tests.integration.conftest import ApiOverLoopback


@pytest.fixture
def served(api_over_loopback: ApiOverLoopback) -> ApiOverLoopback:
    """The API Lambda over loopback; a test sets its before_get to play a worker between polls."""
    return api_over_loopback


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def submit(served: ApiOverLoopback, capsys: pytest.CaptureFixture[str], tenant: str, *flags: str) -> str:
    code, out, _ = run(
        capsys, "submit", "--api-url", served.url, "--tenant", tenant, "--handler", "demo.echo", *flags
    )
    assert code == 0, out
    return str(json.loads(out)["job_id"])


def a_worker_between_polls(served: ApiOverLoopback, settings: Settings) -> None:
    """Each GET of an operation first has the worker do its next chunk (as the queue would)."""
    worker = OperationService(schedule=build(settings).schedule)

    def advance(path: str) -> None:
        if path.startswith("/api/operations/"):
            operation = worker.jobs.get_operation(path.rsplit("/", 1)[-1])
            if operation and operation.status == "RUNNING":
                worker.advance(OperationMessage(operation_id=operation.operation_id, chunk=operation.chunk))

    served.before_get = advance


def test_list_shows_the_callers_jobs_as_a_table_and_as_json(
    served: ApiOverLoopback, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two jobs of tenant a (one tagged) and one of tenant b
    monkeypatch.setenv("COLUMNS", "220")
    nightly = submit(served, capsys, "a", "--cron", "0 2 * * *", "--name", "nightly")
    once = submit(served, capsys, "a", "--run-at", "2030-01-01T00:00:00+00:00", "--name", "once")
    theirs = submit(served, capsys, "b", "--cron", "0 3 * * *")
    # When a lists its jobs as a table
    code, out, _ = run(capsys, "list", "--api-url", served.url, "--tenant", "a", "--output", "table")
    # Then both are there, with their schedule, and b's is not
    assert code == 0 and nightly in out and once in out and theirs not in out
    assert "0 2 * * * (UTC)" in out and "2 job(s)" in out
    # and as JSON, filtered by type, only the recurring one
    code, out, _ = run(
        capsys, "list", "--api-url", served.url, "--tenant", "a", "--type", "recurring", "--output", "json"
    )
    assert code == 0 and [i["job_id"] for i in json.loads(out)["items"]] == [nightly]


def test_stats_shows_runs_by_status_and_percentiles(
    served: ApiOverLoopback, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a minutely job with three backfilled runs
    monkeypatch.setenv("COLUMNS", "200")
    job_id = submit(served, capsys, "a", "--cron", "* * * * *")
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    window = ["--from", (end - timedelta(minutes=3)).isoformat(), "--to", end.isoformat()]
    assert run(capsys, "backfill", job_id, "--api-url", served.url, "--tenant", "a", *window)[0] == 0
    # When its stats are shown
    code, out, _ = run(capsys, "stats", job_id, "--api-url", served.url, "--tenant", "a", "--output", "table")
    # Then the table counts the three runs by status and has the lateness and duration rows
    assert code == 0 and "PENDING" in out and "lateness" in out and "duration" in out and "p99" in out
    code, out, _ = run(capsys, "stats", job_id, "--api-url", served.url, "--tenant", "a", "--output", "json")
    assert json.loads(out)["runs"] == 3
    # and another tenant's ask is the API's 404, exit status 1
    code, out, _ = run(capsys, "stats", job_id, "--api-url", served.url, "--tenant", "b")
    assert code == 1 and json.loads(out)["error"]["code"] == "not_found"


def test_backfill_of_250_ticks_follows_its_operation_with_a_progress_bar_until_done(
    served: ApiOverLoopback, aws: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a minutely job, and a worker that does one chunk between two polls of the operation
    job_id = submit(served, capsys, "a", "--cron", "* * * * *")
    a_worker_between_polls(served, aws)
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    window = ["--from", (end - timedelta(minutes=250)).isoformat(), "--to", end.isoformat()]
    # When it is backfilled from the command line
    code, out, err = run(
        capsys, "backfill", job_id, "--api-url", served.url, "--tenant", "a", *window, "--interval", "0",
        "--output", "json",
    )  # fmt: skip
    # Then the command followed the operation to its end, drawing progress on stderr
    assert code == 0, out
    done = json.loads(out)
    assert (done["status"], done["done"], done["created"], done["kind"]) == (
        "SUCCEEDED",
        250,
        250,
        "backfill",
    )
    assert "250/250" in err
    # and with --no-wait it answers once accepted
    code, out, _ = run(
        capsys, "backfill", job_id, "--api-url", served.url, "--tenant", "a", *window, "--no-wait"
    )
    assert code == 0 and json.loads(out)["status"] == "RUNNING"


def test_actions_on_25_jobs_follow_the_operation_and_show_one_result_per_job(
    served: ApiOverLoopback,
    aws: Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given 25 jobs of tenant a, and a worker that does one chunk between two polls
    monkeypatch.setenv("COLUMNS", "200")
    ids = [submit(served, capsys, "a", "--cron", "0 2 * * *") for _ in range(25)]
    a_worker_between_polls(served, aws)
    # When they are paused from the command line, shown as tables
    code, out, err = run(
        capsys, "actions", "pause", *ids, "--api-url", served.url, "--tenant", "a", "--interval", "0",
        "--output", "table",
    )  # fmt: skip
    # Then each is paused, with its result in the per-job table, and the progress reached 25 of 25
    assert code == 0, out
    assert "per job" in out and all(job_id in out for job_id in ids) and out.count("PAUSED") == 25
    assert "25/25" in err
    code, out, _ = run(
        capsys, "list", "--api-url", served.url, "--tenant", "a", "--status", "PAUSED", "--limit", "100"
    )
    assert len(json.loads(out)["items"]) == 25
