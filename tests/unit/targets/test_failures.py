"""How a target's failure reaches the run: its error type, and whether any retry is left.

A target raises TargetFailed naming its error type (HTTP503, a Lambda's errorType); a final one
(FinalTargetFailure: a 4xx, a refused address) dead-letters at once whatever the job's policy.
The worker runs on the in-memory fakes; the target is played by a python handler that raises what
an adapter raises (targets are wired into jobs by the lead's next step).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import RunStatus
from jobsched.domain.targets import FinalTargetFailure, TargetFailed, final_error_type
from jobsched.handlers import RunContext
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World


def fail_once_with(world: World, exc: Exception, **retry: object) -> tuple[str, dict[str, object]]:
    def raises(payload: dict[str, object], ctx: RunContext) -> None:
        raise exc

    world.handler("unit.target", raises)
    request = CreateJobRequest(
        type="one_off", handler="unit.target", run_at=T0 + timedelta(seconds=5), max_attempts=3, **retry
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    (payload,) = world.machines.started.values()
    return job_id, payload


def test_a_final_4xx_is_dead_lettered_at_once_although_attempts_are_left(world: World) -> None:
    # Given a job with 3 attempts whose target answers 404 (final)
    job_id, handed_over = fail_once_with(
        world, FinalTargetFailure("HTTP 404: no such hook", error_type="HTTP404")
    )
    # When its first attempt fails, then the run's error type is HTTP404 and the workflow is told
    # not to retry: it dead-letters the run now
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == RunStatus.FAILED and run.attempt == 1
    assert run.error is not None and run.error.type == "HTTP404"
    assert handed_over["retryable"] is False


def test_a_retryable_target_failure_keeps_its_error_type_and_is_retried(world: World) -> None:
    # Given a job with 3 attempts whose target answers 503
    job_id, handed_over = fail_once_with(
        world, TargetFailed("HTTP 503: busy", error_type="HTTP503", retry_after=7)
    )
    # Then the error type is the target's (non_retryable_errors name it), and a retry follows
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.error is not None and run.error.type == "HTTP503"
    assert handed_over["retryable"] is True


def test_non_retryable_errors_apply_to_a_target_error_type(world: World) -> None:
    # Given a job that names a Lambda's errorType as non-retryable
    _, handed_over = fail_once_with(
        world,
        TargetFailed("bad input", error_type="ValidationError"),
        non_retryable_errors=["ValidationError"],
    )
    # Then its failure is not retried
    assert handed_over["retryable"] is False


@pytest.mark.parametrize(
    ("error_type", "final"),
    [
        ("HTTP400", True),
        ("HTTP404", True),
        ("HTTP410", True),
        ("HTTP302", True),
        ("HTTP408", False),
        ("HTTP425", False),
        ("HTTP429", False),
        ("HTTP500", False),
        ("HTTP503", False),
        ("HTTPTimeout", False),
        ("HTTPConnectionError", False),
        ("AddressRefused", True),
        ("ValueError", False),
    ],
)
def test_only_a_targets_final_answers_are_final(error_type: str, final: bool) -> None:
    assert final_error_type(error_type) is final


def test_a_final_failure_cannot_carry_a_retryable_error_type() -> None:
    with pytest.raises(ValueError, match="HTTP503 is not a final error type"):
        FinalTargetFailure("busy", error_type="HTTP503")
