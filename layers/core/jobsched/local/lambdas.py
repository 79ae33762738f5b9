"""Load the Lambda handler modules of functions/ in-process, as the Lambda runtime would."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

FUNCTIONS_DIR_ENV = "JOBSCHED_FUNCTIONS_DIR"


def functions_dir() -> Path:
    """The functions/ folder: $JOBSCHED_FUNCTIONS_DIR, else beside layers/ in the source tree."""
    if os.environ.get(FUNCTIONS_DIR_ENV):
        return Path(os.environ[FUNCTIONS_DIR_ENV])
    return Path(__file__).resolve().parents[4] / "functions"


def load(name: str, *, fresh: bool = True) -> ModuleType:
    """Import functions/<name>/handler.py under a private module name (a cold start when fresh)."""
    path = functions_dir() / name / "handler.py"
    module_name = f"jobsched_function_{name}"
    if not fresh and module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no Lambda handler at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class LambdaContext:
    """Enough of the Lambda context object for powertools' decorators."""

    function_name: str
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/local"
    log_stream_name: str = "local"

    @property
    def invoked_function_arn(self) -> str:
        """A local ARN of the function."""
        return f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        """Local invocations have no deadline; answer a generous one."""
        return 900_000
