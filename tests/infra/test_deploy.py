"""Deploying: the signing secrets' key and grants, the user's handler code, the demo flag, the reusable
construct and the example app that uses it (all synthesized offline, with a no-deps layer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobsched import constants as c
from jobsched import resources
from jobsched_infra.layer import NO_DEPS_ENV, stage_handlers
from tests.infra.synth import Synth, synthesize

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ("api", "dispatcher", "worker", "reconciler", "task_events")
TASKS = """
from jobsched.handlers import registry

@registry.handler("myjobs.hello")
def hello(payload, ctx):
    return {"hello": payload}
"""


def _handler_package(root: Path) -> Path:
    package = root / "myjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(TASKS)
    return package


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """`cdk deploy` with no context: no handler_dir, no demo_handlers."""
    return synthesize(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def with_handlers(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """`cdk deploy -c handler_dir=./myjobs -c handler_modules=myjobs.tasks -c demo_handlers=true`."""
    tmp = tmp_path_factory.mktemp("handlers")
    return synthesize(
        tmp, handler_dir=_handler_package(tmp), handler_modules=["myjobs.tasks"], demo_handlers=True
    )


def _env(synth: Synth, name: str) -> dict[str, Any]:
    variables: dict[str, Any] = synth.resource(synth.logical_id(synth.function(name)))["Properties"][
        "Environment"
    ]["Variables"]
    return variables


def _kms_statements(synth: Synth, name: str) -> list[dict[str, Any]]:
    return [
        s
        for s in synth.policy_statements(name)
        if resources.SIGNING_KEY.logical_id in json.dumps(s["Resource"])
    ]


def _asset_dir(assembly: Path, layer: dict[str, Any]) -> Path:
    """The directory cdk.out staged a layer's asset in (asset.<hash>, the hash its S3 key names)."""
    key = layer["Properties"]["Content"]["S3Key"]
    return assembly / f"asset.{key.removesuffix('.zip')}"


# --- signing secrets -------------------------------------------------------------------------------


def test_the_signing_key_is_its_own_rotated_retained_key(plain: Synth) -> None:
    key = plain.resource(resources.SIGNING_KEY.logical_id)

    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"
    table = plain.resource(resources.SIGNING_SECRETS_TABLE.logical_id)
    assert table["Type"] == "AWS::DynamoDB::Table" and table["DeletionPolicy"] == "Retain"


def test_the_api_encrypts_and_decrypts_and_the_worker_only_decrypts_always_with_a_tenant_context(
    plain: Synth,
) -> None:
    api, worker = _kms_statements(plain, "api"), _kms_statements(plain, "worker")

    assert {a for s in api for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} == {
        "kms:Encrypt",
        "kms:Decrypt",
    }
    assert [s["Action"] for s in worker] == ["kms:Decrypt"]
    for statement in api + worker:
        assert statement["Condition"] == {"Null": {"kms:EncryptionContext:tenant": "false"}}


def test_the_api_reads_and_writes_secrets_the_worker_reads_them_and_no_other_function_may(
    plain: Synth,
) -> None:
    table = resources.SIGNING_SECRETS_TABLE.logical_id

    assert plain.actions_on("api", table) == {"dynamodb:GetItem", "dynamodb:PutItem"}
    assert plain.actions_on("worker", table) == {"dynamodb:GetItem"}
    for name in ("dispatcher", "reconciler"):
        assert plain.actions_on(name, table) == set()
        assert _kms_statements(plain, name) == []
        assert c.SIGNING_KEY_ARN_ENV not in _env(plain, name)
    for name in ("api", "worker"):
        assert _env(plain, name)[c.SIGNING_SECRETS_TABLE_ENV] == {"Ref": table}
        assert _env(plain, name)[c.SIGNING_KEY_ARN_ENV] == {
            "Fn::GetAtt": [resources.SIGNING_KEY.logical_id, "Arn"]
        }


# --- handlers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FUNCTIONS)
def test_without_context_no_function_registers_the_demo_handlers_or_imports_user_modules(
    plain: Synth, name: str
) -> None:
    env = _env(plain, name)

    assert env[c.DEMO_HANDLERS_ENV] == "false"
    assert c.HANDLER_MODULES_ENV not in env
    assert len(plain.resource(plain.logical_id(plain.function(name)))["Properties"]["Layers"]) == 1


@pytest.mark.parametrize("name", FUNCTIONS)
def test_handler_dir_ships_as_a_layer_on_every_function_that_imports_the_modules(
    with_handlers: Synth, name: str
) -> None:
    env = _env(with_handlers, name)
    layer_id = with_handlers.logical_id(with_handlers.stack.handlers_layer)

    assert env[c.HANDLER_MODULES_ENV] == "myjobs.tasks"
    assert env[c.DEMO_HANDLERS_ENV] == "true"
    layers = with_handlers.resource(with_handlers.logical_id(with_handlers.function(name)))["Properties"][
        "Layers"
    ]
    assert {"Ref": layer_id} in layers


def test_the_handler_layers_asset_holds_the_package_on_the_python_path(with_handlers: Synth) -> None:
    layer_id = with_handlers.logical_id(with_handlers.stack.handlers_layer)
    asset = _asset_dir(with_handlers.assembly_dir, with_handlers.resource(layer_id))

    shipped = asset / "python" / "myjobs" / "tasks.py"
    assert shipped.read_text() == TASKS


def test_a_handler_module_missing_from_handler_dir_fails_the_synth(tmp_path: Path) -> None:
    package = _handler_package(tmp_path)

    with pytest.raises(ValueError, match=r"'otherpkg\.tasks'"):
        stage_handlers(package, ["myjobs.tasks", "otherpkg.tasks"], tmp_path / "out")
    with pytest.raises(ValueError, match="without handler_modules"):
        stage_handlers(package, [], tmp_path / "out")


def test_a_handler_dir_that_is_a_source_root_puts_its_contents_on_the_path(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _handler_package(src)

    staged = stage_handlers(src, ["myjobs.tasks"], tmp_path / "out")

    assert (staged / "python" / "myjobs" / "tasks.py").read_text() == TASKS


# --- the example app ---------------------------------------------------------------------------------


def test_the_example_app_synthesizes_the_scheduler_construct_with_its_handlers(tmp_path: Path) -> None:
    # Given examples/my_app, run as `cdk synth` runs its cdk.json's app, offline
    example = ROOT / "examples" / "my_app"
    env = {**os.environ, NO_DEPS_ENV: "1", "CDK_OUTDIR": str(tmp_path / "cdk.out")}

    done = subprocess.run(
        [sys.executable, "app.py"], cwd=example, env=env, capture_output=True, text=True, timeout=240
    )

    # Then its stack holds the scheduler: the worker imports myjobs.tasks from a layer that ships it
    assert done.returncode == 0, done.stderr
    template = json.loads((tmp_path / "cdk.out" / "MyApp.template.json").read_text())
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    # (the scheduler's five functions; the sixth, the shard-count guard's, imports no handler)
    variables = [
        f["Properties"]["Environment"]["Variables"] for f in functions if "Environment" in f["Properties"]
    ]
    assert len(functions) == 6 and len(variables) == 5
    assert all(v[c.HANDLER_MODULES_ENV] == "myjobs.tasks" for v in variables)
    assert all(v[c.DEMO_HANDLERS_ENV] == "false" for v in variables)
    layers = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::LayerVersion"}
    shipped = [
        _asset_dir(tmp_path / "cdk.out", r) / "python" / "myjobs" / "tasks.py" for r in layers.values()
    ]
    assert sum(path.is_file() for path in shipped) == 1
    assert "reports.nightly" in next(p for p in shipped if p.is_file()).read_text()
    assert "SchedulerApiUrl" in template["Outputs"]
