"""The services start the workflows with their typed inputs (jobsched.asl_inputs), on the fakes.

tests/unit/test_asl_inputs.py proves each definition reads only fields of its model; these prove
the services send exactly a valid instance of it (the models forbid extra fields).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobsched.asl_inputs import DagInput, FailureInput, ReplayInput
from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.services.failures import dead_letter_key
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World


def submit(world: World, **fields: Any) -> str:
    return world.svc.job_service.submit(CreateJobRequest(**fields), tenant="t", idempotency_key=None).job_id


def started(world: World, arn: str) -> list[dict[str, Any]]:
    return [payload for (machine, _), payload in world.machines.started.items() if machine == arn]


def test_a_failed_attempt_starts_the_failure_workflow_with_a_failure_input(world: World) -> None:
    # Given a one-off that always fails, with one attempt
    job_id = submit(
        world, type="one_off", handler="demo.fail", run_at=T0 + timedelta(seconds=5), max_attempts=1
    )
    # When it runs and fails
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    # Then the failure workflow got a FailureInput: exactly its fields, nothing else
    [payload] = started(world, "arn:failure")
    sent = FailureInput.model_validate(payload)
    assert sent.model_dump(mode="json") == payload
    assert (sent.action, sent.retryable, sent.attempt, sent.job_run) == ("retry", False, 1, True)
    assert sent.alert.job_id == job_id and sent.alert.error_type == "DemoFailure"


def test_a_replay_starts_the_failure_workflow_with_a_replay_input(world: World) -> None:
    # Given a dead-lettered run
    job_id = submit(
        world, type="one_off", handler="demo.fail", run_at=T0 + timedelta(seconds=5), max_attempts=1
    )
    world.clock.advance(5)
    world.deliver()
    sf = times.stored(T0 + timedelta(seconds=5))
    world.runs.dead_letter(job_id, sf, dl_key=dead_letter_key("t"), dead_at=world.clock.now())
    # When an operator replays it
    run = world.runs.get(job_id, sf)
    assert run is not None
    world.svc.failures.replay(run.run_id, tenant="t")
    # Then the failure workflow got a ReplayInput for it
    [payload] = [p for p in started(world, "arn:failure") if p["action"] == "replay"]
    sent = ReplayInput.model_validate(payload)
    assert sent.model_dump(mode="json") == payload and sent.now == times.stored(world.clock.now())


def test_an_upstream_success_starts_the_dag_workflow_with_a_dag_input(world: World) -> None:
    # Given a one-off and a dependant of it
    upstream = submit(world, type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5))
    dependant = submit(world, type="dependent", handler="demo.echo", depends_on=[upstream])
    # When the upstream succeeds
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then the DAG workflow got a DagInput counting it into the dependant
    [payload] = started(world, "arn:dag")
    sent = DagInput.model_validate(payload)
    assert sent.model_dump(mode="json") == payload
    assert [(i.job_id, i.fan_in) for i in sent.items] == [(dependant, 1)]
