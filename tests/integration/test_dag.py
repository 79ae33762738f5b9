"""DAG dependencies against the embedded moto server, with the DAG workflow executing for real."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.domain.status import RunStatus
from jobsched.errors import Conflict, ValidationFailed
from jobsched.handlers import RunContext
from jobsched.services.run import Delivery
from jobsched.wiring import Services
from tests.support import drain, pump_until

pytestmark = pytest.mark.slow


class Ledger:
    """Every handler invocation: (job name, start, end). `failing` names fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float]] = []
        self.failing: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, str]:
        start = time.monotonic()
        if payload["name"] in self.failing:
            raise RuntimeError(f"{payload['name']} fails")
        with self._lock:
            self.calls.append((payload["name"], start, time.monotonic()))
        return {"name": payload["name"]}

    def count(self) -> Counter[str]:
        return Counter(name for name, _, _ in self.calls)

    def span(self, name: str) -> tuple[float, float]:
        [(start, end)] = [(s, e) for n, s, e in self.calls if n == name]
        return start, end


@pytest.fixture
def ledger(served: Services) -> Ledger:
    ledger = Ledger()
    served.worker.registry.register("test.ledger", ledger)
    served.job_service.registry = served.worker.registry
    return ledger


def root(svc: Services, name: str, tenant: str = "t") -> str:
    request = CreateJobRequest(
        type="one_off", handler="test.ledger", payload={"name": name}, name=name, run_at=datetime.now(UTC),
        max_attempts=1,
    )  # fmt: skip
    return svc.job_service.submit(request, tenant=tenant, idempotency_key=None).job_id


def dependant(svc: Services, name: str, *upstreams: str, tenant: str = "t", **extra: Any) -> str:
    request = CreateJobRequest(
        type="dependent", handler="test.ledger", payload={"name": name}, name=name,
        depends_on=list(upstreams),
        **extra,
    )  # fmt: skip
    return svc.job_service.submit(request, tenant=tenant, idempotency_key=None).job_id


def status_of(svc: Services, job_id: str) -> str | None:
    runs = svc.runs.recent(job_id, limit=1)
    return runs[0].status.value if runs else None


def dag_executions(svc: Services) -> list[dict[str, Any]]:
    sfn = svc.failures.state_machines.client
    return list(sfn.list_executions(stateMachineArn=svc.settings.dag_workflow_arn)["executions"])


def settle(svc: Services, done: Callable[[], bool], timeout: float = 60) -> None:
    """Pump until `done`, then drain: no workflow runs and the queue is empty (AssertionError if not)."""
    pump_until(svc, done, timeout=timeout)
    drain(svc)


def seeds_dag(svc: Services) -> dict[str, str]:
    ids = {"extract": root(svc, "extract"), "load-refs": root(svc, "load-refs")}
    ids["join"] = dependant(svc, "join", ids["extract"], ids["load-refs"])
    ids["transform"] = dependant(svc, "transform", ids["join"])
    ids["validate"] = dependant(svc, "validate", ids["join"])
    ids["publish"] = dependant(svc, "publish", ids["transform"], ids["validate"])
    return ids


def test_the_seeds_dag_runs_in_topological_order_each_node_once(served: Services, ledger: Ledger) -> None:
    svc = served
    ids = seeds_dag(svc)
    settle(svc, lambda: status_of(svc, ids["publish"]) == "SUCCEEDED")
    assert ledger.count() == Counter({name: 1 for name in ids})
    for after, befores in {
        "join": ["extract", "load-refs"],
        "transform": ["join"],
        "validate": ["join"],
        "publish": ["transform", "validate"],
    }.items():
        assert ledger.span(after)[0] >= max(ledger.span(b)[1] for b in befores), after
    graph = svc.job_service.graph(ids["join"], tenant="t")
    assert len(graph.nodes) == 6 and len(graph.edges) == 6
    assert graph.periods[0].status == {job_id: "SUCCEEDED" for job_id in ids.values()}
    assert svc.jobs.get_job(ids["publish"]).status.value == "COMPLETED"  # type: ignore[union-attr]


def test_duplicate_upstream_signals_never_fire_a_dependant_twice(served: Services, ledger: Ledger) -> None:
    svc = served
    a, b = root(svc, "a"), root(svc, "b")
    c = dependant(svc, "c", a, b)
    settle(svc, lambda: status_of(svc, c) == "SUCCEEDED")
    # Re-run the completion workflow for both upstream runs (new execution names: a real re-run)
    for upstream in (a, b):
        job = svc.jobs.get_job(upstream)
        run = svc.runs.recent(upstream, limit=1)[0]
        assert job is not None
        svc.dag.signal_success(job, run.model_copy(update={"replays": 7}))
    # and re-deliver the dependant's own message
    c_run = svc.runs.recent(c, limit=1)[0]
    from jobsched.domain import times
    from jobsched.domain.models import RunMessage

    body = RunMessage(
        job_id=c, scheduled_for=times.stored(c_run.scheduled_for), kind="dependant"
    ).model_dump_json()
    assert svc.worker.process(Delivery("dup", "dup", body)).value == "duplicate"
    # Then, once everything the re-runs set going is delivered, c ran once, in one run
    drain(svc)
    assert ledger.count()["c"] == 1 and svc.runs.recent(c, limit=5)[0].status == RunStatus.SUCCEEDED
    assert len(svc.runs.recent(c, limit=5)) == 1


def test_a_dead_lettered_upstream_marks_dependants_upstream_failed_and_a_replay_re_arms_them(
    served: Services, ledger: Ledger
) -> None:
    svc = served
    ledger.failing.add("validate")
    ids = seeds_dag(svc)
    settle(svc, lambda: status_of(svc, ids["publish"]) == "UPSTREAM_FAILED")
    assert status_of(svc, ids["validate"]) == "DEAD_LETTER"
    assert status_of(svc, ids["transform"]) == "SUCCEEDED"
    publish = svc.runs.recent(ids["publish"], limit=1)[0]
    assert publish.reason and "dead-lettered" in publish.reason
    drain(svc)  # everything in the queue and every workflow has had its effect
    assert status_of(svc, ids["publish"]) == "UPSTREAM_FAILED"  # and stays so
    assert len(svc.runs.recent(ids["publish"], limit=5)) == 1 and "publish" not in ledger.count()
    # When the cause is fixed and validate is replayed
    ledger.failing.clear()
    validate_run = svc.runs.recent(ids["validate"], limit=1)[0]
    svc.failures.replay(validate_run.run_id, tenant="t")
    settle(svc, lambda: status_of(svc, ids["publish"]) == "SUCCEEDED")
    assert ledger.count()["publish"] == 1 and ledger.count()["validate"] == 1


def test_a_dead_lettered_dependant_of_a_one_off_chain_shows_its_job_failed_until_a_replay_completes_it(
    served: Services, ledger: Ledger
) -> None:
    svc = served
    # Given a -> b -> c, where b fails
    ledger.failing.add("b")
    a = root(svc, "a")
    b = dependant(svc, "b", a, max_attempts=1)
    c = dependant(svc, "c", b)
    # When b's run is dead-lettered
    settle(svc, lambda: status_of(svc, c) == "UPSTREAM_FAILED")
    wait = time.monotonic() + 10
    while svc.job_service.get(b, tenant="t").job.status != "FAILED" and time.monotonic() < wait:
        time.sleep(0.05)  # the failure workflow marks the job just after the run
    # Then b's job is FAILED; a completed; c waits for b (its run UPSTREAM_FAILED), still SCHEDULED
    status = {
        name: svc.job_service.get(i, tenant="t").job.status for name, i in {"a": a, "b": b, "c": c}.items()
    }
    assert status == {"a": "COMPLETED", "b": "FAILED", "c": "SCHEDULED"}
    # When the cause is fixed and b replayed
    ledger.failing.clear()
    svc.failures.replay(svc.runs.recent(b, limit=1)[0].run_id, tenant="t")
    settle(svc, lambda: status_of(svc, c) == "SUCCEEDED")
    # Then b and c completed
    assert [svc.job_service.get(i, tenant="t").job.status for i in (b, c)] == ["COMPLETED", "COMPLETED"]


def test_bad_dependencies_are_clear_4xx(served: Services, ledger: Ledger) -> None:
    svc = served
    a = root(svc, "a")
    b = dependant(svc, "b", a)
    c = dependant(svc, "c", b)
    with pytest.raises(ValidationFailed, match=r"a cycle: .* -> "):
        svc.schedule.edit(b, PatchJobRequest(depends_on=[c]), tenant="t")
    with pytest.raises(ValidationFailed, match="itself"):
        svc.schedule.edit(b, PatchJobRequest(depends_on=[b]), tenant="t")
    with pytest.raises(ValidationFailed, match="unknown job 'job_nope'"):
        dependant(svc, "d", "job_nope")
    with pytest.raises(ValidationFailed, match="unknown job"):
        dependant(svc, "e", a, tenant="someone-else")
    hourly = svc.job_service.submit(
        CreateJobRequest(type="recurring", handler="demo.echo", cron_expr="0 * * * *"),
        tenant="t",
        idempotency_key=None,
    ).job_id
    with pytest.raises(ValidationFailed, match="share one schedule"):
        dependant(svc, "f", a, hourly)
    # rewiring is allowed when it stays acyclic
    svc.schedule.edit(c, PatchJobRequest(depends_on=[a]), tenant="t")
    assert svc.jobs.get_job(b).dependants == ()  # type: ignore[union-attr]
    # cancelling an upstream cancels its transitive dependants
    svc.job_service.cancel(a, tenant="t")
    assert svc.jobs.get_job(c).status.value == "CANCELLED"  # type: ignore[union-attr]
    with pytest.raises(Conflict, match="CANCELLED"):
        dependant(svc, "g", a)


# Its deadlines bound a wait on moto, not a speed: on a loaded 2-core machine the 200 nodes take minutes.
@pytest.mark.timeout(900)
def test_a_random_layered_dag_of_200_nodes_runs_every_node_once(served: Services, ledger: Ledger) -> None:
    svc = served
    rng = random.Random(20261130)
    layers: list[list[str]] = [[root(svc, f"n0.{i}") for i in range(10)]]
    edges = 0
    for depth in range(1, 11):
        layer = []
        for i in range(20 if depth < 10 else 10):
            ups = rng.sample(layers[-1], k=rng.randint(1, 3))
            edges += len(ups)
            layer.append(dependant(svc, f"n{depth}.{i}", *ups))
        layers.append(layer)
    nodes = [job_id for layer in layers for job_id in layer]
    assert len(nodes) == 200
    settle(svc, lambda: all(status_of(svc, j) == "SUCCEEDED" for j in layers[-1]), timeout=600)
    pump_until(svc, lambda: all(status_of(svc, j) == "SUCCEEDED" for j in nodes), timeout=120)
    assert set(ledger.count().values()) == {1} and len(ledger.count()) == 200
    sfn = svc.failures.state_machines.client
    entered = 0
    for ex in dag_executions(svc):
        events = sfn.get_execution_history(executionArn=ex["executionArn"], maxResults=1000)["events"]
        entered += sum(e["type"].endswith("StateEntered") for e in events)
    print(f"\nDAG of 200 nodes, {edges} edges: {entered} state transitions, {entered / edges:.2f} per edge")
    assert entered / edges < 8


def test_a_dependant_of_recurring_upstreams_fires_once_per_period(served: Services, ledger: Ledger) -> None:
    svc = served

    def every_2s(name: str) -> str:
        request = CreateJobRequest(
            type="recurring", handler="test.ledger", payload={"name": name}, cron_expr="*/2 * * * * *"
        )
        return svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id

    a, b = every_2s("a"), every_2s("b")
    c = dependant(svc, "c", a, b)
    # a dependant of recurring jobs must share their schedule: a one-off upstream is refused
    with pytest.raises(ValidationFailed, match="share one schedule"):
        dependant(svc, "x", a, root(svc, "one-off"))
    pump_until(
        svc,
        lambda: sum(r.status == RunStatus.SUCCEEDED for r in svc.runs.recent(c, limit=20)) >= 3,
        timeout=30,
    )
    svc.job_service.cancel(a, tenant="t")  # stops the chain (and cancels c with it)
    svc.job_service.cancel(b, tenant="t")
    c_runs = {r.scheduled_for: r.status for r in svc.runs.recent(c, limit=50)}
    a_runs = {r.scheduled_for: r.status for r in svc.runs.recent(a, limit=50)}
    b_runs = {r.scheduled_for: r.status for r in svc.runs.recent(b, limit=50)}
    # every period of c is a period both a and b succeeded in, and c ran once in it
    for period, status in c_runs.items():
        if status == RunStatus.SUCCEEDED:
            assert a_runs[period] == RunStatus.SUCCEEDED and b_runs[period] == RunStatus.SUCCEEDED
    assert ledger.count()["c"] == sum(s == RunStatus.SUCCEEDED for s in c_runs.values()) >= 3


def test_a_dependant_created_after_its_one_off_upstream_succeeded_still_fires(
    served: Services, ledger: Ledger
) -> None:
    svc = served
    a = root(svc, "a")
    pump_until(svc, lambda: status_of(svc, a) == "SUCCEEDED")
    b = root(svc, "b")
    c = dependant(svc, "c", a, b)  # a already succeeded; b has not run yet
    settle(svc, lambda: status_of(svc, c) == "SUCCEEDED")
    assert ledger.count() == Counter({"a": 1, "b": 1, "c": 1})
    late = dependant(svc, "late", a, b)  # both already succeeded
    settle(svc, lambda: status_of(svc, late) == "SUCCEEDED")
    assert ledger.count()["late"] == 1 and ledger.count()["c"] == 1


def test_a_dependant_created_after_its_one_off_upstream_was_dead_lettered_is_upstream_failed_until_a_replay(
    served: Services, ledger: Ledger
) -> None:
    svc = served
    # Given a one-off upstream whose only attempt failed and was dead-lettered
    ledger.failing.add("a")
    a = root(svc, "a")
    settle(svc, lambda: status_of(svc, a) == "DEAD_LETTER")
    # When a dependant of it is created afterwards
    late = dependant(svc, "late", a)
    # Then its run shows UPSTREAM_FAILED at once, naming the dead letter, instead of nothing for good
    assert status_of(svc, late) == "UPSTREAM_FAILED"
    row = svc.runs.recent(late, limit=1)[0]
    assert row.reason == f"upstream {svc.runs.recent(a, limit=1)[0].run_id} was dead-lettered"
    # And once the cause is fixed and the upstream replayed, it runs, once
    ledger.failing.clear()
    svc.failures.replay(svc.runs.recent(a, limit=1)[0].run_id, tenant="t")
    settle(svc, lambda: status_of(svc, late) == "SUCCEEDED")
    assert ledger.count()["late"] == 1 and ledger.count()["a"] == 1
