"""The Lambda layer: what the functions import, none of the tooling, built before the app synthesizes."""

from __future__ import annotations

import json
import modulefinder
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from bench.coldstart import lambda_env

from jobsched_infra.layer import LAYER_EXCLUDES, build_layer, layer_requirements
from jobsched_infra.project import CORE_PACKAGE_DIR, FUNCTIONS_DIR, REPO_ROOT

pytestmark = pytest.mark.infra

# The tools a developer runs, which no Lambda needs: paths under the layer's python/ folder.
TOOLING = ("jobsched/planning", "jobsched/local", "jobsched/cli")
# The in-memory fakes of the ports, which the tests and the contract suite run on; no Lambda wires them.
FAKES = ("jobsched/adapters/memory",)
TOOLING_MODULES = tuple(path.removesuffix(".py").replace("/", ".") for path in (*TOOLING, *FAKES))
TOOLING_MODULES_DOT = tuple(module + "." for module in TOOLING_MODULES)
FUNCTIONS = sorted(p.parent.name for p in FUNCTIONS_DIR.glob("*/handler.py"))
# A cold start in the function's folder (where the runtime puts handler.py): the jobsched package the
# interpreter loaded, and every jobsched module loaded by then.
PROBE = (
    "import json, sys; import handler, jobsched; "
    "print(json.dumps({'package': jobsched.__file__, "
    "'modules': sorted(m for m in sys.modules if m.split('.')[0] == 'jobsched')}))"
)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes)


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer as `make synth` builds it, without the pip dependencies (JOBSCHED_LAYER_NO_DEPS=1)."""
    return build_layer(tmp_path_factory.mktemp("layer") / "layer", with_dependencies=False)


def test_the_layer_leaves_out_the_planning_tools_the_local_stack_and_the_cli(layer: Path) -> None:
    # Given the layer's file list
    shipped = sorted(p.relative_to(layer / "python").as_posix() for p in layer.rglob("*") if p.is_file())

    # Then none of it is tooling, and the library the functions run on is there
    assert [path for path in shipped if _under(path, TOOLING)] == []
    assert {"jobsched/wiring.py", "jobsched/services/run.py", "jobsched/api/routes.py"} <= set(shipped)
    # and the one list the build leaves out names every tool
    assert set(TOOLING) <= set(LAYER_EXCLUDES)


def test_the_layer_leaves_out_the_in_memory_fakes_but_ships_the_aws_adapters(layer: Path) -> None:
    # Given the layer's file list
    shipped = sorted(p.relative_to(layer / "python").as_posix() for p in layer.rglob("*") if p.is_file())

    # Then no fake of a port is in it, and the adapters the functions wire are
    assert [path for path in shipped if _under(path, FAKES)] == []
    assert {"jobsched/adapters/sqs.py", "jobsched/adapters/stepfunctions.py"} <= set(shipped)
    assert any(_under(path, ("jobsched/adapters/dynamodb",)) for path in shipped)
    # and the build's one list of what it leaves out names them
    assert set(FAKES) <= set(LAYER_EXCLUDES)


def test_the_layer_ships_the_console_files_as_they_are(layer: Path) -> None:
    # Given the console's served files in the package (plain files, no build step)
    from jobsched import console

    # Then the layer holds each of them, byte for byte
    for name in console.page_weight():
        shipped = layer / "python" / "jobsched" / "console" / name
        assert shipped.read_bytes() == (console.ROOT / name).read_bytes(), name


def test_the_clis_table_library_is_an_extra_the_layer_does_not_install(layer: Path) -> None:
    # Given the project's extras and the requirements the layer build installs
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # Then rich is the cli extra's (and make install's, through dev), and not the layer's
    assert any(dep.startswith("rich") for dep in extras["cli"])
    assert any(dep.startswith("rich") for dep in extras["dev"])
    assert [dep for dep in layer_requirements() if dep.startswith("rich")] == []
    # and no module the layer ships imports it
    shipped = [p for p in (layer / "python" / "jobsched").rglob("*.py")]
    assert [p.name for p in shipped if "import rich" in p.read_text() or "from rich" in p.read_text()] == []


@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_lambda_function_imports_a_module_the_layer_leaves_out(name: str) -> None:
    # Given every jobsched module functions/<name>/handler.py imports, transitively, at module scope
    # or inside a function (modulefinder reads the bytecode; it runs nothing)
    finder = modulefinder.ModuleFinder(path=[str(FUNCTIONS_DIR / name), str(CORE_PACKAGE_DIR.parent)])
    finder.run_script(str(FUNCTIONS_DIR / name / "handler.py"))
    imported = {
        module: Path(found.__file__).relative_to(CORE_PACKAGE_DIR.parent).as_posix()
        for module, found in finder.modules.items()
        if module.split(".")[0] == "jobsched" and found.__file__
    }
    assert "jobsched.wiring" in imported or "jobsched.api" in imported  # the walk reached the library

    # Then none of them is one the layer leaves out
    assert {m: path for m, path in imported.items() if _under(path, LAYER_EXCLUDES)} == {}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_lambda_function_cold_starts_on_the_built_layer(name: str, layer: Path) -> None:
    # Given a deployed function's environment, with the layer's python/ first on the path (/opt/python)
    env = {**lambda_env(name), "PYTHONPATH": str(layer / "python"), "PYTHONDONTWRITEBYTECODE": "1"}

    # When handler.py is imported in a fresh interpreter
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=FUNCTIONS_DIR / name, env=env, capture_output=True, text=True
    )

    # Then it starts (a module the layer leaves out would be a ModuleNotFoundError), on the layer's
    # copy of jobsched, and loaded none of the tooling
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(loaded["package"]).is_relative_to(layer / "python" / "jobsched")
    assert [m for m in loaded["modules"] if m in TOOLING_MODULES or m.startswith(TOOLING_MODULES_DOT)] == []


def test_the_app_synthesizes_the_layer_it_is_given_and_builds_none(tmp_path: Path, layer: Path) -> None:
    # Given a layer built beforehand (as `make synth` does), marked so its asset can be recognised
    given = tmp_path / "given"
    build_layer(given, with_dependencies=False)
    (given / "BUILT_BEFORE_SYNTH").write_text("make synth\n")

    # When infra/app.py runs with that directory as its `layer_dir` context (as the cdk CLI passes -c)
    env = {
        **os.environ,
        "CDK_OUTDIR": str(tmp_path / "cdk.out"),
        "CDK_CONTEXT_JSON": json.dumps({"layer_dir": str(given)}),
        "JOBSCHED_LAYER_NO_DEPS": "1",  # offline, even for an app that still builds a layer itself
    }
    done = subprocess.run(
        [sys.executable, "infra/app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )

    # Then the layer asset is that directory, left as it was
    assert done.returncode == 0, done.stderr[-3000:]
    assert (given / "BUILT_BEFORE_SYNTH").is_file()
    assert list((tmp_path / "cdk.out").glob("asset.*/BUILT_BEFORE_SYNTH"))
