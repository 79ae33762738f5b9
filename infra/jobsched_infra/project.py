"""Where the repository's pieces live, and the CDK context the app runs with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
CORE_PACKAGE_DIR = REPO_ROOT / "layers" / "core" / "jobsched"
CDK_JSON = REPO_ROOT / "cdk.json"
# Where `make synth` builds the Lambda layer (layer.main) and the app takes it from, unless the
# `layer_dir` context names another directory.
LAYER_DIR = REPO_ROOT / "build" / "layer"


def cdk_context(cdk_json: Path = CDK_JSON) -> dict[str, Any]:
    """The `context` block of cdk.json (feature flags).

    The cdk CLI passes it to the app itself; `python infra/app.py` and the tests synthesize
    without the CLI, so they read it here to build the same template (the CLI's values win).
    """
    context: dict[str, Any] = json.loads(cdk_json.read_text())["context"]
    return context
