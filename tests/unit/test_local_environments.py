"""The local stack's execution environments: one module per busy invocation, as Lambda's sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobsched.local import lambdas

# A handler that keeps its invocation's state at module scope, as powertools' batch processor does.
HANDLER = """
batch = []

def lambda_handler(event, context):
    batch[:] = event["Records"]
    return {"records": list(batch)}
"""


@pytest.fixture
def functions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "handler.py").write_text(HANDLER)
    monkeypatch.setenv(lambdas.FUNCTIONS_DIR_ENV, str(tmp_path))
    return tmp_path


def test_two_invocations_at_once_get_environments_of_their_own(functions: Path) -> None:
    # Given a warm environment of a function
    warm = lambdas.load("probe")
    environments = lambdas.Environments("probe", first=warm)
    # When two invocations are in flight at the same time
    first, second = environments.acquire(), environments.acquire()
    first.lambda_handler({"Records": ["a"]}, None)
    second.lambda_handler({"Records": ["b"]}, None)
    # Then the second ran in a cold-started module of its own: neither sees the other's batch
    assert first is warm and second is not warm
    assert first.batch == ["a"] and second.batch == ["b"]
    assert environments.loaded == 2


def test_an_invocation_reuses_the_environment_the_last_one_released(functions: Path) -> None:
    # Given two environments, the cold one released last
    environments = lambdas.Environments("probe", first=lambdas.load("probe"))
    first, second = environments.acquire(), environments.acquire()
    environments.release(first)
    environments.release(second)
    # When the next invocation comes, and one more while it runs
    third, fourth = environments.acquire(), environments.acquire()
    # Then they reuse the warm environments, most recently released first, and load none
    assert third is second and fourth is first
    assert environments.loaded == 2
