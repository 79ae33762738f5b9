"""Services depend on ports and the domain only: never an adapter, boto3, botocore or the environment.

Each module of jobsched.services is read as source (its AST, nothing imported), so a service that
learns the storage engine or reads its own configuration fails here by name.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import jobsched.services

FORBIDDEN_IMPORTS = ("jobsched.adapters", "boto3", "botocore", "mypy_boto3")
SERVICES = sorted(
    (info.name, Path(jobsched.services.__path__[0]) / f"{info.name}.py")
    for info in pkgutil.iter_modules(jobsched.services.__path__)
)


def violations(source: str) -> list[str]:
    """Every forbidden import and every read of os.environ / os.getenv in `source`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            if node.module == "os" and any(a.name in ("environ", "getenv") for a in node.names):
                found.append(f"line {node.lineno}: from os import environ/getenv")
        bad = [n for n in names if any(n == f or n.startswith(f"{f}.") for f in FORBIDDEN_IMPORTS)]
        if bad:
            found.append(f"line {node.lineno}: import {bad[0]}")
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("environ", "getenv")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append(f"line {node.lineno}: os.{node.attr}")
    return found


def test_the_layering_check_sees_each_kind_of_violation() -> None:
    # Given a module that imports an adapter, boto3 and botocore and reads the environment
    source = (
        "import os\nimport boto3\nfrom botocore.exceptions import ClientError\n"
        "from jobsched.adapters.dynamodb import JobStore\nfrom os import environ\nx = os.environ['A']\n"
    )
    # Then the check names every one of them
    assert len(violations(source)) == 5


def test_there_are_services_to_check() -> None:
    assert {"run", "dispatch", "jobs", "schedule", "dag", "failures"} <= {name for name, _ in SERVICES}


@pytest.mark.parametrize(("name", "path"), SERVICES, ids=[name for name, _ in SERVICES])
def test_a_service_imports_no_adapter_boto3_or_botocore_and_reads_no_environment(
    name: str, path: Path
) -> None:
    # Given a module of jobsched.services, when its imports are read, then none is forbidden
    assert violations(path.read_text()) == [], f"jobsched.services.{name} reaches past the ports"
