"""DAG fan-out is bounded at creation, and within the bounds nothing is cut short (issue 17).

600 dependants of one job used to be accepted; the failure workflow's input then passed Step
Functions' 256 KiB, and failure propagation and the cascading cancel stopped after 201 of them.
Now a job has at most MAX_FAN_OUT dependants and a graph at most MAX_GRAPH_NODES jobs, counting
descendants too; at the caps every dependant is reached and every input fits.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from jobsched.asl_inputs import DagInput, FailureInput
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import MAX_FAN_OUT, MAX_GRAPH_NODES
from jobsched.domain.status import JobStatus
from jobsched.errors import Conflict, FanOutFull, ValidationFailed
from jobsched.services.run import MAX_ERROR_CHARS, Outcome
from tests.unit.services.conftest import T0, World

# The longest tenant a caller can have (X-Tenant: 128 characters): every input item carries it.
TENANT = "t" * 128
STEP_FUNCTIONS_INPUT_LIMIT = 256 * 1024


def submit(world: World, **fields: Any) -> str:
    return world.svc.job_service.submit(
        CreateJobRequest(**fields), tenant=TENANT, idempotency_key=None
    ).job_id


def root(world: World, handler: str = "demo.fail") -> str:
    return submit(world, type="one_off", handler=handler, run_at=T0 + timedelta(seconds=5), max_attempts=1)


def dependant(world: World, *upstreams: str) -> str:
    return submit(world, type="dependent", handler="demo.echo", depends_on=list(upstreams))


def graph_at_the_cap(world: World, root_handler: str = "demo.fail") -> tuple[str, list[str]]:
    """A root with MAX_FAN_OUT dependants, and one more level below them: MAX_GRAPH_NODES jobs in all."""
    top = root(world, root_handler)
    children = [dependant(world, top) for _ in range(MAX_FAN_OUT)]
    grandchildren = [dependant(world, c) for c in children[: MAX_GRAPH_NODES - 1 - MAX_FAN_OUT]]
    assert 1 + len(children) + len(grandchildren) == MAX_GRAPH_NODES
    return top, children + grandchildren


def started(world: World, arn: str) -> list[dict[str, Any]]:
    return [payload for (machine, _), payload in world.machines.started.items() if machine == arn]


def test_a_job_takes_at_most_max_fan_out_dependants_and_the_next_is_a_409_naming_depends_on(
    world: World,
) -> None:
    # Given a job with MAX_FAN_OUT dependants
    top = root(world)
    for _ in range(MAX_FAN_OUT):
        dependant(world, top)
    jobs_before = set(world.jobs.jobs)
    # When one more is created, then it is refused naming depends_on and the upstream, and not stored
    with pytest.raises(Conflict, match=f"depends_on: job '{top}' has {MAX_FAN_OUT} dependants") as refused:
        dependant(world, top)
    assert refused.value.field == "depends_on"
    assert set(world.jobs.jobs) == jobs_before
    stored = world.jobs.get_job(top)
    assert stored is not None and len(stored.dependants) == MAX_FAN_OUT


def test_the_store_refuses_a_dependant_past_the_cap_even_when_the_service_read_room(world: World) -> None:
    # Given a job with MAX_FAN_OUT - 1 dependants, and two creates that both read that (a race:
    # here the second create's read is replayed by checking both before either writes)
    top = root(world)
    for _ in range(MAX_FAN_OUT - 1):
        dependant(world, top)
    dag = world.svc.job_service.dag
    dag.check_upstreams([top], tenant=TENANT)
    dag.check_upstreams([top], tenant=TENANT)
    stored = world.jobs.get_job(top)
    assert stored is not None
    first, second = (
        stored.model_copy(
            update={"job_id": f"job_race{i}", "type": "dependent", "depends_on": (top,), "dependants": ()}
        )
        for i in (1, 2)
    )
    # When both write, then the first takes the last place and the second is refused, unwritten
    for racer in (first, second):
        if racer is second:
            with pytest.raises(FanOutFull, match=f"job '{top}' has {MAX_FAN_OUT} dependants") as refused:
                world.jobs.create_with_idempotency(
                    racer, idempotency_key=None, request_hash="h", response={}, now=T0
                )
            assert refused.value.field == "depends_on"
        else:
            world.jobs.create_with_idempotency(
                racer, idempotency_key=None, request_hash="h", response={}, now=T0
            )
    after = world.jobs.get_job(top)
    assert after is not None and len(after.dependants) == MAX_FAN_OUT
    assert world.jobs.get_job("job_race2") is None


def test_the_graph_bound_counts_descendants_not_only_ancestors(world: World) -> None:
    # Given a job with MAX_GRAPH_NODES - 1 descendants below one dependant of its own
    top = root(world)
    hub = dependant(world, top)
    children = [dependant(world, hub) for _ in range(MAX_FAN_OUT)]
    for c in children[: MAX_GRAPH_NODES - 2 - MAX_FAN_OUT]:
        dependant(world, c)
    # When a second dependant of it is created (its ancestors are only 1: the bound used to count those)
    # Then it is refused naming the upstream: its dead letter's input would pass the bound
    with pytest.raises(ValidationFailed, match=f"job '{top}' would have more than") as refused:
        dependant(world, top)
    assert refused.value.field == "depends_on"


def test_the_graph_bound_counts_the_descendants_of_every_ancestor_not_only_the_direct_upstream(
    world: World,
) -> None:
    # Given a root with two dependants, a and b, and MAX_GRAPH_NODES - 3 jobs below a: the root has
    # MAX_GRAPH_NODES - 1 descendants, the most it may have, while b has none
    top = root(world)
    a, b = dependant(world, top), dependant(world, top)
    children = [dependant(world, a) for _ in range(MAX_FAN_OUT)]
    for c in children[: MAX_GRAPH_NODES - 3 - MAX_FAN_OUT]:
        dependant(world, c)
    assert len(world.svc.job_service.dag._reach([top], upward=False)) == MAX_GRAPH_NODES
    jobs_before = set(world.jobs.jobs)
    # When a dependant of b is created (b's own descendants, which the bound used to count, are 1)
    # Then it is refused naming the root, whose dead letter would list one job too many
    with pytest.raises(ValidationFailed, match=f"job '{top}' would have more than") as refused:
        dependant(world, b)
    assert refused.value.field == "depends_on"
    assert set(world.jobs.jobs) == jobs_before
    # And a PATCH that moves an existing job under b is refused the same way
    loner = root(world)
    with pytest.raises(ValidationFailed, match=f"job '{top}' would have more than"):
        world.svc.job_service.dag.check_upstreams([b], tenant=TENANT, job_id=loner)


def test_at_the_cap_a_dead_letter_propagates_to_every_descendant_in_an_input_under_256_kib(
    world: World,
) -> None:
    # Given a graph at the cap whose root always fails, with one attempt and the longest error a
    # run records (its message is cut to the worker's MAX_ERROR_CHARS; é: 2 bytes each)
    def fail_loudly(payload: dict[str, Any], context: Any) -> None:
        raise RuntimeError("é" * 100_000)

    world.handler("tests.fail_loudly", fail_loudly)
    _top, below = graph_at_the_cap(world, "tests.fail_loudly")
    # When the root runs and is dead-lettered
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    # Then the failure workflow's input lists every descendant, once, and fits Step Functions' limit
    [payload] = started(world, "arn:failure")
    sent = FailureInput.model_validate(payload)
    assert sorted(p.job_id for p in sent.propagate) == sorted(below)
    assert len(sent.alert.error_message) == MAX_ERROR_CHARS
    size = len(json.dumps(payload, ensure_ascii=False).encode())
    assert size < STEP_FUNCTIONS_INPUT_LIMIT, size


def test_at_the_cap_a_success_counts_into_every_dependant_in_an_input_under_256_kib(world: World) -> None:
    # Given a root with MAX_FAN_OUT dependants that succeeds
    top = root(world, "demo.echo")
    children = [dependant(world, top) for _ in range(MAX_FAN_OUT)]
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then the DAG workflow's input counts it into every dependant, and fits
    [payload] = started(world, "arn:dag")
    assert sorted(i.job_id for i in DagInput.model_validate(payload).items) == sorted(children)
    assert len(json.dumps(payload).encode()) < STEP_FUNCTIONS_INPUT_LIMIT


def test_at_the_cap_a_cancel_cascades_to_every_descendant(world: World) -> None:
    top, below = graph_at_the_cap(world)

    world.svc.job_service.cancel(top, tenant=TENANT)

    assert all(world.jobs.jobs[j].status == JobStatus.CANCELLED for j in below)


def test_a_graph_made_before_the_caps_is_cancelled_and_propagated_whole(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 300 dependants of one job, made while no cap applied (more than the 201 the walk used
    # to stop at)
    monkeypatch.setattr("jobsched.services.dag.MAX_FAN_OUT", 10_000)
    monkeypatch.setattr("jobsched.services.dag.MAX_GRAPH_NODES", 10_000)
    monkeypatch.setattr(world.jobs, "max_fan_out", 10_000)
    top = root(world)
    legacy = [dependant(world, top) for _ in range(300)]
    monkeypatch.undo()
    # When the failure of its run is propagated, and the job is cancelled
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    [payload] = started(world, "arn:failure")
    world.svc.job_service.cancel(top, tenant=TENANT)
    # Then none of the 300 is left out of either
    assert len(FailureInput.model_validate(payload).propagate) == 300
    assert all(world.jobs.jobs[j].status == JobStatus.CANCELLED for j in legacy)
