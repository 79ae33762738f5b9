"""StateMachines in memory: executions recorded by (state machine, name), at most one per name."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemoryStateMachines:
    """Records every started execution; nothing runs (a test plays a workflow's steps itself)."""

    failure_workflow_arn: str = "arn:aws:states:local:000000000000:stateMachine:failure"
    started: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def start_failure(self, name: str, payload: Mapping[str, Any]) -> bool:
        """start() on the failure workflow."""
        return self.start(self.failure_workflow_arn, name, payload)

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> bool:
        """Record an execution named `name`; False if that state machine has one of that name."""
        with self._lock:
            if (state_machine_arn, name) in self.started:
                return False
            self.started[(state_machine_arn, name)] = dict(payload)
            return True
