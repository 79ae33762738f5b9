"""CloudWatch EMF metrics through powertools' Metrics: one EMF log line per invocation."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from jobsched import telemetry

if TYPE_CHECKING:
    from aws_lambda_powertools import Metrics


class EmfMetrics:
    """ports.Metrics over a handler's powertools Metrics (its `service` is the one dimension).

    The values are flushed by the handler's @metrics.log_metrics when the invocation ends. A lock,
    because powertools' metric set is a plain dict and a worker's batch emits from several threads.
    """

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()

    def emit(self, name: str, value: float, unit: str) -> None:
        """Add the value to the invocation's metric set."""
        with self._lock:
            self._metrics.add_metric(name=name, unit=unit, value=value)

    def alert(self, kind: str) -> None:
        """Count one alert of `kind`."""
        self.emit(telemetry.alerts(kind), 1, telemetry.COUNT)
