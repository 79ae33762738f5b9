"""Services depend on ports and the domain only: never an adapter, boto3, botocore or the environment.

Each module of jobsched.services is read as source (its AST, nothing imported), so a service that
learns the storage engine or reads its own configuration fails here by name.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import jobsched.domain
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


DOMAIN = sorted(
    (info.name, Path(jobsched.domain.__path__[0]) / f"{info.name}.py")
    for info in pkgutil.iter_modules(jobsched.domain.__path__)
)
API_IMPORT = ("jobsched.api",)


def imports_of(source: str, prefixes: tuple[str, ...]) -> list[str]:
    """Every import in `source` of a module under one of `prefixes`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "jobsched":
                names += [f"jobsched.{alias.name}" for alias in node.names]
        found += [
            f"line {node.lineno}: import {n}"
            for n in names
            if any(n == p or n.startswith(f"{p}.") for p in prefixes)
        ]
    return found


def test_the_api_import_check_sees_every_spelling() -> None:
    # Given a module importing the API package three ways
    source = "import jobsched.api\nfrom jobsched.api.models import JobView\nfrom jobsched import api\n"
    # Then the check names each of them, and not a module that merely starts with the same letters
    assert len(imports_of(source, API_IMPORT)) == 3
    assert imports_of("import jobsched.apis_elsewhere\n", API_IMPORT) == []


@pytest.mark.parametrize(
    ("name", "path"),
    [(f"domain.{n}", p) for n, p in DOMAIN] + [(f"services.{n}", p) for n, p in SERVICES],
    ids=[f"domain.{n}" for n, _ in DOMAIN] + [f"services.{n}" for n, _ in SERVICES],
)
def test_the_domain_and_the_services_import_nothing_from_the_api(name: str, path: Path) -> None:
    # Given a module of jobsched.domain or jobsched.services, when its imports are read, then none is
    # of jobsched.api: the services answer domain records, and only the API renders them as views
    assert imports_of(path.read_text(), API_IMPORT) == [], f"jobsched.{name} depends on the API's wire format"
