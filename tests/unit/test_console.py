"""The console's files and `jobsched console --api URL`, the SigV4-signing proxy for a deployed API.

Given a loopback peer standing in for API Gateway, when the browser's calls go through the console
server, then each one reaches the peer SigV4-signed for execute-api with its body intact, and the
browser's own headers (X-Tenant, a cookie) stay behind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import requests

from jobsched import console
from jobsched.cli import console as console_cli
from jobsched.cli.app import parser
from jobsched.local import loopback

# -- the files --------------------------------------------------------------------------------------


def test_index_and_each_module_are_served_with_their_content_type() -> None:
    assert console.asset("/console")[:2] == (200, "text/html; charset=utf-8")
    assert console.asset("/console/?x=1")[:2] == (200, "text/html; charset=utf-8")
    for module in ("app.js", "api.js", "dom.js", "cron.js"):
        assert console.asset(f"/console/{module}")[:2] == (200, "text/javascript; charset=utf-8")
    assert console.asset("/console/app.css")[1] == "text/css; charset=utf-8"


@pytest.mark.parametrize(
    "path",
    [
        "/console/../stack.py",
        "/console/..%2F__init__.py",
        "/console/__init__.py",
        "/console/a/app.js",
        "/console/%2e%2e/cli/app.py",
        "/consolex/app.js",
        "/console/.",
        "/console/..",
    ],
)
def test_nothing_but_the_console_files_is_served(path: str) -> None:
    assert console.asset(path)[0] == 404


def test_the_page_weight_counts_every_served_file() -> None:
    weight = console.page_weight()
    assert {"index.html", "app.js", "app.css"} <= weight.keys()
    assert "__init__.py" not in weight
    assert sum(weight.values()) < 100_000  # a first visit stays small: no framework, no bundle


def test_the_docs_state_the_page_weight_the_files_have() -> None:
    # Given the served files' bytes, when docs/console.md's table and the README's summary are read,
    # then they state those bytes (a change to a file that leaves the docs stale fails here)
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    weight = console.page_weight()
    table = (root / "docs" / "console.md").read_text()
    for name, size in weight.items():
        assert re.search(rf"`{re.escape(name)}`[^\n]*\b{size:,}\b", table), f"{name}: {size:,} B"
    total = sum(weight.values())
    assert f"**{total:,}**" in table
    assert f"{round(total / 1000)} kB" in (root / "README.md").read_text()


def test_the_wheel_ships_every_served_file_as_package_data() -> None:
    import fnmatch
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["jobsched.console"]
    assert all(any(fnmatch.fnmatch(name, p) for p in patterns) for name in console.page_weight())


def test_without_chromium_the_browser_tests_fail_under_ci_and_skip_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.browser import chromium

    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        chromium.chromium_path()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        chromium.chromium_path()


# -- the signing proxy -----------------------------------------------------------------------------
class Peer(BaseHTTPRequestHandler):
    """API Gateway's stand-in: records every request and answers 201 with what it was sent."""

    seen: list[dict[str, Any]] = []

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        Peer.seen.append(
            {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
        )
        loopback.answer(self, 201 if self.command == "POST" else 200, {"echo": body.decode()})

    do_GET = do_POST = do_DELETE = _record

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDCONSOLETEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    Peer.seen = []
    with loopback.serve(Peer) as peer:
        api = peer.url + "/prod"
        server = console_cli.serve(api, console_cli.Signer.from_default_session(api))
        try:
            yield server.url
        finally:
            server.stop()


def test_each_api_call_reaches_the_api_sigv4_signed_with_its_body(proxy: str) -> None:
    body = {"type": "one_off", "handler": "demo.echo", "run_at": "2030-01-01T00:00:00+00:00"}
    answer = requests.post(
        proxy + "/api/jobs",
        data=json.dumps(body),
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": "k1",
            "X-Tenant": "mallory",
            "Cookie": "session=abc",
        },
        timeout=10,
    )
    assert answer.status_code == 201
    assert json.loads(answer.json()["echo"]) == body

    (call,) = Peer.seen
    assert (call["method"], call["path"]) == ("POST", "/prod/api/jobs")
    assert json.loads(call["body"]) == body
    authorization = call["headers"]["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDCONSOLETEST/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "SignedHeaders=" in authorization and "Signature=" in authorization
    assert "X-Amz-Date" in call["headers"]
    assert call["headers"]["Idempotency-Key"] == "k1"
    assert "X-Tenant" not in call["headers"] and "Cookie" not in call["headers"]


def test_a_get_with_a_query_is_forwarded_and_signed(proxy: str) -> None:
    answer = requests.get(proxy + "/api/jobs?status=PAUSED&limit=20", timeout=10)
    assert answer.status_code == 200
    (call,) = Peer.seen
    assert call["path"] == "/prod/api/jobs?status=PAUSED&limit=20"
    assert call["headers"]["Authorization"].startswith("AWS4-HMAC-SHA256 ")


def test_the_console_server_serves_the_same_files_and_nothing_else(proxy: str) -> None:
    index = requests.get(proxy + "/console/", timeout=10)
    assert index.status_code == 200 and index.headers["Content-Type"].startswith("text/html")
    assert (
        requests.get(proxy + "/console/app.js", timeout=10)
        .headers["Content-Type"]
        .startswith("text/javascript")
    )
    assert requests.get(proxy + "/etc/passwd", timeout=10).status_code == 404
    assert requests.get(proxy + "/", allow_redirects=False, timeout=10).headers["Location"] == "/console/"
    assert Peer.seen == []  # serving the console calls no API


def test_an_api_that_does_not_answer_is_a_502_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDCONSOLETEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    from jobsched.local.stack import free_port

    api = f"http://127.0.0.1:{free_port()}"
    server = console_cli.serve(api, console_cli.Signer.from_default_session(api))
    try:
        answer = requests.get(server.url + "/api/health", timeout=10)
    finally:
        server.stop()
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "unavailable"


def test_the_command_line_names_the_console_command() -> None:
    args = parser().parse_args(["console", "--api", "https://abc.execute-api.eu-west-1.amazonaws.com/prod"])
    assert args.func is console_cli.cmd_console
    assert args.port == 8181
