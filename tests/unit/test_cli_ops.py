"""The operator's commands against a fake API the test serves on loopback: logs --follow, runs
--watch, and SigV4's region (no AWS: the signature is computed, not sent)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from jobsched import cli

Route = Callable[[str, dict[str, str]], tuple[int, Any]]


@pytest.fixture
def fake_api() -> Iterator[tuple[list[str], Callable[[Route], str]]]:
    """Serve `route(path, query)` on a free loopback port; the requests seen, in order."""
    seen: list[str] = []
    servers: list[HTTPServer] = []
    threads: list[threading.Thread] = []

    def serve(route: Route) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                url = urllib.parse.urlsplit(self.path)
                status, body = route(url.path, dict(urllib.parse.parse_qsl(url.query)))
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append(server)
        threads.append(thread)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield seen, serve
    for server in servers:
        server.shutdown()
        server.server_close()
    for thread in threads:
        thread.join(timeout=10)


def line(n: int) -> dict[str, str]:
    return {"at": f"2026-12-02T01:00:0{n}.000+00:00", "message": f"[step] line {n}"}


def test_logs_follow_reads_each_page_once_by_its_cursor_until_the_run_has_finished(
    fake_api: tuple[list[str], Callable[[Route], str]], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a run that writes two lines, then one, then finishes with one last line written
    # between the follower's empty page and its status check
    seen, serve = fake_api
    pages = {
        None: ([line(1), line(2)], "c1"),
        "c1": ([line(3)], "c2"),
        "c2": ([], "c2"),
    }
    statuses = iter(["RUNNING", "SUCCEEDED"])
    state = {"finished": False}

    def route(path: str, query: dict[str, str]) -> tuple[int, Any]:
        if path == "/api/runs/run_1":
            status = next(statuses)
            if status == "SUCCEEDED":
                state["finished"] = True
                pages["c2"] = ([line(4)], "c3")
                pages["c3"] = ([], "c3")
            return 200, {"run_id": "run_1", "status": status}
        lines, cursor = pages[query.get("cursor")]
        return 200, {"lines": lines, "next_cursor": cursor, "console_url": None}

    url = serve(route)
    # When `jobsched logs --follow` runs (no pause between polls)
    code = cli.main(["logs", "run_1", "--follow", "--interval", "0", "--api-url", url, "--output", "json"])
    # Then it printed every line once, in order, one JSON object a line, and stopped
    assert code == 0
    printed = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert [p["message"] for p in printed] == [f"[step] line {n}" for n in (1, 2, 3, 4)]
    # by following next_cursor, and asking the run's status only after pages with no new line
    logs = [p for p in seen if "/logs" in p]
    assert logs == [
        "/api/runs/run_1/logs",
        "/api/runs/run_1/logs?cursor=c1",
        "/api/runs/run_1/logs?cursor=c2",
        "/api/runs/run_1/logs?cursor=c2",
        "/api/runs/run_1/logs?cursor=c2",
        "/api/runs/run_1/logs?cursor=c3",
    ]
    assert seen.count("/api/runs/run_1") == 2


def test_logs_without_follow_print_the_page_as_text_with_markup_shown_as_is(
    fake_api: tuple[list[str], Callable[[Route], str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a run with one line that looks like rich markup
    _, serve = fake_api
    monkeypatch.setenv("COLUMNS", "160")
    url = serve(
        lambda path, query: (200, {"lines": [line(1)], "next_cursor": "x", "console_url": "https://c"})
    )
    # When its logs are shown as text
    assert cli.main(["logs", "run_1", "--api-url", url, "--output", "table"]) == 0
    # Then the line is there as written, with its time, and the console link
    out = capsys.readouterr().out
    assert "2026-12-02 01:00:01Z  [step] line 1" in out and "console: https://c" in out


def test_runs_watch_refreshes_the_live_table_each_poll_and_stops_after_its_iterations(
    fake_api: tuple[list[str], Callable[[Route], str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a job whose newest run moves from RUNNING to SUCCEEDED between two polls
    seen, serve = fake_api
    monkeypatch.setenv("COLUMNS", "200")
    statuses = iter(["RUNNING", "SUCCEEDED", "SUCCEEDED"])

    def route(path: str, query: dict[str, str]) -> tuple[int, Any]:
        run = {
            "run_id": "run_9", "scheduled_for": "2026-12-02T01:00:00.000+00:00", "kind": "scheduled",
            "status": next(statuses), "attempts": 1, "started_at": None, "finished_at": None,
            "lateness_ms": 12, "duration_ms": None,
        }  # fmt: skip
        return 200, {"items": [run], "next_cursor": None}

    url = serve(route)
    # When `jobsched runs --watch` refreshes twice (as JSON: one page a line)
    argv = ["runs", "job_1", "--watch", "--iterations", "2", "--interval", "0", "--api-url", url]
    assert cli.main([*argv, "--output", "json"]) == 0
    pages = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    # Then it polled twice and showed each poll's runs
    assert [p["items"][0]["status"] for p in pages] == ["RUNNING", "SUCCEEDED"]
    # and as a live table, the last frame shows the run as it is now
    assert cli.main([*argv[:4], "1", *argv[5:], "--output", "table"]) == 0
    out = capsys.readouterr().out
    assert "runs of job_1" in out and "run_9" in out and "SUCCEEDED" in out
    assert len(seen) == 3


@pytest.mark.parametrize(
    ("url", "session_region", "signed_for"),
    [
        ("https://abc123.execute-api.eu-west-1.amazonaws.com/v1/api/jobs", "us-east-1", "eu-west-1"),
        (
            "https://abc-vpce-0a1.execute-api.ap-southeast-2.vpce.amazonaws.com/v1/api/jobs",
            None,
            "ap-southeast-2",
        ),
        ("https://jobs.example.com/api/jobs", "eu-central-1", "eu-central-1"),
        ("https://jobs.example.com/api/jobs", None, "us-east-1"),
    ],
)
def test_sigv4_signs_for_the_execute_api_hosts_region_else_the_sessions_else_us_east_1(
    monkeypatch: pytest.MonkeyPatch, url: str, session_region: str | None, signed_for: str
) -> None:
    # Given credentials and a session in `session_region` (or none)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    if session_region:
        monkeypatch.setenv("AWS_DEFAULT_REGION", session_region)
    # When a request to `url` is signed
    headers = cli.signed_headers("GET", url, None, {"Content-Type": "application/json"})
    # Then the signature's credential scope names the API's region
    scope = headers["Authorization"].split("Credential=")[1].split(",")[0]
    assert scope.split("/")[2:] == [signed_for, "execute-api", "aws4_request"]
