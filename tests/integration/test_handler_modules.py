"""JOBSCHED_HANDLER_MODULES: a user's handler modules, imported at cold start."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jobsched import constants as c
from jobsched.local import events, lambdas
from jobsched.settings import Settings

MODULE = """
from jobsched.handlers import registry

@registry.handler("cwdpkg.hello")
def hello(payload, ctx):
    return {"hello": payload.get("who", "world")}
"""


def test_handler_modules_are_imported_from_the_working_directory_without_pythonpath(
    aws: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given mypkg/jobs.py in the directory the stack starts from, and a sys.path without it
    # (a console script's: .venv/bin first, no PYTHONPATH)
    (tmp_path / "cwdpkg").mkdir()
    (tmp_path / "cwdpkg" / "__init__.py").write_text("")
    (tmp_path / "cwdpkg" / "jobs.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    for key, value in aws.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(c.TENANT_SOURCE_ENV, "header")
    monkeypatch.setenv(c.HANDLER_MODULES_ENV, "cwdpkg.jobs")
    try:
        # When the API cold-starts with JOBSCHED_HANDLER_MODULES=cwdpkg.jobs
        api = lambdas.load("api")
        body = b'{"type": "recurring", "cron_expr": "0 2 * * *", "handler": "cwdpkg.hello"}'
        event = events.api_gateway_event("POST", "/api/jobs", {"Content-Type": "application/json"}, body)
        out = api.lambda_handler(event, lambdas.LambdaContext("api"))
        # Then the module was imported and its handler is registered: the job is accepted
        assert out["statusCode"] == 201, out["body"]
        assert sys.modules["cwdpkg.jobs"].__file__ == str(tmp_path / "cwdpkg" / "jobs.py")
    finally:
        for name in ("cwdpkg", "cwdpkg.jobs"):
            sys.modules.pop(name, None)
