"""Load the Lambda entry points of functions/ in-process, as the Lambda runtime would."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
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
        raise ImportError(f"no Lambda entry point at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class Environments:
    """Warm execution environments of one function: each a module of its own, used by one invocation
    at a time, as Lambda runs each concurrent invocation in a sandbox of its own.

    An entry point's module keeps per-invocation state at module scope (powertools' batch processor holds
    the batch it is processing), which is right on Lambda and wrong for two threads sharing one
    module. acquire() hands out the most recently released environment (the warmest), or loads a new
    one (a cold start) when every one is busy; the caller bounds how many are busy at once.
    """

    def __init__(self, name: str, first: ModuleType | None = None) -> None:
        self._name = name
        self._idle: list[ModuleType] = [first] if first is not None else []
        self._lock = threading.Lock()
        self.loaded = len(self._idle)

    def acquire(self) -> ModuleType:
        """An idle environment, else a freshly loaded one."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self.loaded += 1
        return load(self._name)

    def release(self, module: ModuleType) -> None:
        """The invocation is over: the environment may serve the next one."""
        with self._lock:
            self._idle.append(module)


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
