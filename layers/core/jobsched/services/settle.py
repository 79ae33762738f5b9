"""What follows a recorded outcome, wherever it was recorded (a worker pool's report, a container
task's stop event, a worker that finds its attempt recorded for it): one function, idempotent."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from jobsched.domain.models import Execution, Job
from jobsched.domain.status import RunStatus

if TYPE_CHECKING:  # as in services/workers.py: no import cycle through the services
    from jobsched.services.dag import DagService
    from jobsched.services.failures import FailureService


def settle_recorded(
    job: Job, row: Execution, *, failures: FailureService | None, dag: DagService | None, now: datetime
) -> None:
    """A FAILED run handed to the failure workflow (once per attempt: the execution's name is the
    key); a SUCCEEDED one settled (dependants signalled, a one-off COMPLETED). Anything else: nothing."""
    if row.status == RunStatus.FAILED and failures is not None:
        failures.hand_over(job, row)
    elif row.status == RunStatus.SUCCEEDED and dag is not None:
        dag.settle(job, row, now=now)
