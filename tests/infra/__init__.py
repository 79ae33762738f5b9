"""Infra tests import the CDK app's package from infra/ (the app itself runs as `python infra/app.py`).

The path is set when the package is imported, so any test importing `tests.infra.synth` (the
integration test that compares the local stack with the template, too) can synthesize the stack.
"""

from __future__ import annotations

import sys
from pathlib import Path

INFRA_DIR = Path(__file__).resolve().parents[2] / "infra"
if str(INFRA_DIR) not in sys.path:
    sys.path.insert(0, str(INFRA_DIR))
