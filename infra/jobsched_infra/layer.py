"""Builds the Lambda layer directory: the core `jobsched` package and, optionally, its dependencies.

`make synth` runs this module first (`python infra/build_layer.py`), into project.LAYER_DIR, then the
app, which only reads the directory. JOBSCHED_LAYER_NO_DEPS=1 builds the layer without its pip
dependencies: fast and offline, but not deployable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path

from jobsched_infra.project import CORE_PACKAGE_DIR, LAYER_DIR, REPO_ROOT

NO_DEPS_ENV = "JOBSCHED_LAYER_NO_DEPS"

# What the layer leaves out, as paths under its python/ folder: the tools a developer runs (the
# capacity planner and its simulation, the local stack, the CLI) and the in-memory fakes of the
# ports (the tests' adapters), which no Lambda imports (tests/infra/test_layer.py walks the
# functions' imports to prove it). resources.py and asl.py stay: they are the one definition of
# the tables, queues and ASL, read by CDK and the local stack, and kept beside the library that
# runs against them.
LAYER_EXCLUDES = ("jobsched/planning", "jobsched/local", "jobsched/cli", "jobsched/adapters/memory")

# The Lambda runtime brings these. A second copy in the layer would shadow the runtime's, so the
# runtime's boto3 would run against whichever botocore the layer happened to resolve.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")

# Binary wheels for Lambda's arm64 Python 3.12 (constructs.functions.RUNTIME/ARCHITECTURE), whatever
# machine builds the layer; no bytecode, which would be compiled for this interpreter, not Lambda's.
LAMBDA_WHEELS = (
    "--platform=manylinux2014_aarch64",
    "--only-binary=:all:",
    "--python-version=3.12",
    "--implementation=cp",
    "--no-compile",
)

_BYTECODE = shutil.ignore_patterns("__pycache__", "*.pyc")


def layer_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """The project's runtime dependencies (pyproject.toml) minus what the Lambda runtime provides."""
    dependencies: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [dep for dep in dependencies if _distribution(dep) not in RUNTIME_PROVIDED]


def build_layer(out_dir: Path, *, with_dependencies: bool) -> Path:
    """Write a fresh layer tree into `out_dir`: `python/jobsched/`, plus arm64 cp312 wheels; return it."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    site = out_dir / "python"
    shutil.copytree(CORE_PACKAGE_DIR, site / "jobsched", ignore=_left_out)
    if with_dependencies:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, f"--target={site}", *LAMBDA_WHEELS, *layer_requirements()], check=True)
        _remove_distributions(site, RUNTIME_PROVIDED)
        shutil.rmtree(site / "bin", ignore_errors=True)
    return out_dir


def main() -> None:
    """Build the layer `make synth` ships into LAYER_DIR (without its dependencies if NO_DEPS_ENV=1)."""
    with_dependencies = os.environ.get(NO_DEPS_ENV) != "1"
    out = build_layer(LAYER_DIR, with_dependencies=with_dependencies)
    how = "with its dependencies" if with_dependencies else f"jobsched alone ({NO_DEPS_ENV}=1)"
    print(f"layer: {out.relative_to(REPO_ROOT)}, {how}")


def _left_out(directory: str, names: list[str]) -> set[str]:
    """copytree's ignore: bytecode, and the LAYER_EXCLUDES paths under the package."""
    under = Path(directory).relative_to(CORE_PACKAGE_DIR.parent).as_posix()
    return set(_BYTECODE(directory, names)) | {name for name in names if f"{under}/{name}" in LAYER_EXCLUDES}


def _distribution(requirement: str) -> str:
    """The normalised distribution name of a requirement string ("aws-lambda-powertools[tracer]>=3")."""
    name = re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _remove_distributions(site: Path, names: tuple[str, ...]) -> None:
    for entry in site.iterdir():
        stem = entry.name.split("-", 1)[0] if entry.name.endswith(".dist-info") else entry.name
        if _distribution(stem) not in names:
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def stage_handlers(handler_dir: Path, modules: Sequence[str], out_dir: Path | None = None) -> Path:
    """A layer tree of the user's handler code: `python/` holding what `modules` import; return it.

    A `handler_dir` with an __init__.py is a package and is shipped under its own name
    (`-c handler_dir=./myjobs -c handler_modules=myjobs.tasks`); any other directory is a source
    root whose contents go onto the path as they are. Each module's top-level package or module must
    be there: a typo fails the synth, not the first cold start on AWS.
    """
    handler_dir = Path(handler_dir).resolve()
    if not handler_dir.is_dir():
        raise ValueError(f"handler_dir {handler_dir} is not a directory")
    if not modules:
        raise ValueError(f"handler_dir {handler_dir} without handler_modules: nothing would import it")
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="jobsched-handlers-"))
    site = out_dir / "python"
    if site.exists():
        shutil.rmtree(site)
    target = site / handler_dir.name if (handler_dir / "__init__.py").is_file() else site
    shutil.copytree(handler_dir, target, ignore=_BYTECODE)
    for module in modules:
        top = module.split(".", 1)[0]
        if not ((site / top).is_dir() or (site / f"{top}.py").is_file()):
            raise ValueError(f"handler module {module!r}: no {top}/ or {top}.py in handler_dir {handler_dir}")
    return out_dir
