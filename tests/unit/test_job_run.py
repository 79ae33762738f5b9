"""Which dead letter ends its job (pure): the one run a one-off or a one-off chain dependant lives for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobsched.domain.models import Execution, Job
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.services.failures import is_job_run

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)


def job(type: str, **fields: Any) -> Job:
    return Job(
        job_id="job_x", tenant="t", type=type, status=JobStatus.SCHEDULED, handler="demo.echo", payload={},
        created_at=T0, updated_at=T0, **fields,
    )  # fmt: skip


def run(scheduled_for: datetime) -> Execution:
    return Execution(
        run_id="r", job_id="job_x", tenant="t", scheduled_for=scheduled_for, status=RunStatus.FAILED
    )


@pytest.mark.parametrize(
    ("the_job", "scheduled_for", "ends_it"),
    [
        (job("one_off", run_at=LATER), LATER, True),  # its run
        (job("one_off", run_at=LATER), T0 + timedelta(minutes=5), False),  # a manual run of it
        (job("dependent", depends_on=("job_a",), root_schedule="once"), T0, True),  # keyed by creation
        (job("dependent", depends_on=("job_a",), root_schedule="* * * * *@UTC"), T0, False),  # periods
        (job("recurring", cron_expr="* * * * *"), T0, False),  # one tick of many
    ],
)  # fmt: skip
def test_it_ends_a_job_only_with_the_one_run_it_lives_for(
    the_job: Job, scheduled_for: datetime, ends_it: bool
) -> None:
    assert is_job_run(the_job, run(scheduled_for)) is ends_it
