"""The simulated workflows (tests/sim/workflows.py): the ASL of asl.py interpreted on the in-memory fakes.

The expected end states are those moto reaches executing the same ASL (tests/integration/test_failures.py
and test_dag.py); here on a simulated clock, one state per step of a small event loop.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobsched import asl
from jobsched.adapters.memory import MemoryJobStore, MemoryRunQueue, MemoryRunStore
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import Backoff, Execution, Job
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import TransientStoreError
from jobsched.handlers import HandlerRegistry, RunContext, registry
from jobsched.ports import FakeClock
from jobsched.services.run import Delivery, InFlightElsewhere, Outcome
from jobsched.settings import Settings
from jobsched.wiring import Services, compose
from tests.sim.workflows import KNOWN_STATES, SimExecution, SimStateMachines, model_gaps

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@dataclass
class Loop:
    """A minimal event loop on a fake clock: steps run in time order, ties in the order scheduled."""

    clock: FakeClock
    _heap: list[tuple[datetime, int, Callable[[], None]]] = field(default_factory=list)
    _seq: Iterator[int] = field(default_factory=itertools.count)

    def schedule(self, delay: float, step: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.clock.now() + timedelta(seconds=delay), next(self._seq), step))

    def run(self, *, until: datetime | None = None) -> None:
        """Run every step due up to `until` (all of them if None); the clock ends at `until`."""
        while self._heap and (until is None or self._heap[0][0] <= until):
            at, _, step = heapq.heappop(self._heap)
            self.clock.set(max(at, self.clock.now()))
            step()
        if until is not None and until > self.clock.now():
            self.clock.set(until)


class Switch:
    """A handler that fails while `failing` is set (the cause an operator fixes before a replay)."""

    def __init__(self) -> None:
        self.failing = True

    def __call__(self, payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        if self.failing:
            raise RuntimeError("switch is off")
        return {"ok": True}


@dataclass
class World:
    """The real services on the fakes, the workflows simulated on one loop."""

    svc: Services
    clock: FakeClock
    loop: Loop
    jobs: MemoryJobStore
    runs: MemoryRunStore
    queue: MemoryRunQueue
    machines: SimStateMachines
    handlers: HandlerRegistry
    faults: dict[str, int] = field(default_factory=dict)  # state -> transient faults still to raise
    after_write: dict[str, int] = field(default_factory=dict)  # state -> timeouts after its write

    def deliver(self) -> list[Outcome | str]:
        """Every visible message to the worker, acknowledged unless the worker leaves it queued."""
        outcomes: list[Outcome | str] = []
        for m in self.queue.receive():
            try:
                outcomes.append(self.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body)))
            except InFlightElsewhere:
                outcomes.append("left")
                continue
            self.queue.delete(m.receipt_handle)
        return outcomes

    def settle(self) -> None:
        """Run the workflows and deliver what they enqueue until nothing more happens."""
        for _ in range(50):
            self.loop.run()
            if not self.deliver() and not self.machines.running():
                return
        raise AssertionError("the world did not settle in 50 rounds")

    def one_off(self, handler: str, *, max_attempts: int = 3, wait: float = 5, **extra: Any) -> str:
        request = CreateJobRequest(
            type="one_off",
            handler=handler,
            run_at=extra.pop("run_at", self.clock.now()),
            max_attempts=max_attempts,
            backoff=Backoff(initial_seconds=wait, multiplier=1, max_seconds=wait, jitter=False),
            **extra,
        )
        return self.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id

    def dependant(self, *upstreams: str, handler: str = "demo.echo", max_attempts: int = 1) -> str:
        request = CreateJobRequest(
            type="dependent", handler=handler, depends_on=list(upstreams), max_attempts=max_attempts
        )
        return self.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id

    def run_of(self, job_id: str) -> Execution:
        [run] = self.runs.recent(job_id, limit=5)
        return run

    def job(self, job_id: str) -> Job:
        job = self.jobs.get_job(job_id)
        assert job is not None
        return job

    def messages_for(self, job_id: str) -> list[tuple[datetime, str]]:
        return [(at, body) for at, body in self.queue.peek() if job_id in body]

    def executions(self, kind: str) -> list[SimExecution]:
        arn = {"failure": self.svc.settings.failure_workflow_arn, "dag": self.svc.settings.dag_workflow_arn}
        return [e for (a, _), e in self.machines.executions.items() if a == arn[kind]]

    def _fault(self, state: str) -> None:
        if self.faults.get(state, 0) > 0:
            self.faults[state] -= 1
            raise TransientStoreError(f"throttled at {state}")

    def _fault_after(self, state: str) -> None:
        if self.after_write.get(state, 0) > 0:
            self.after_write[state] -= 1
            raise TransientStoreError(f"timed out after the write at {state}")


@pytest.fixture
def world() -> World:
    return new_world()


def new_world() -> World:
    """The services, the fakes and the simulated workflows at T0, nothing submitted."""
    clock = FakeClock(T0)
    loop = Loop(clock)
    settings = Settings(
        jobs_table="jobs",
        runs_table="runs",
        execution_queue_url="memory://execution",
        failure_workflow_arn="arn:failure",
        dag_workflow_arn="arn:dag",
        alert_topic_arn="arn:alerts",
        shard_count=2,
        lease_seconds=300,
    )
    handlers = registry.copy()
    jobs, runs = MemoryJobStore(shard_count=settings.shard_count), MemoryRunStore()
    queue = MemoryRunQueue(clock=clock, visibility_seconds=300)
    box: dict[str, World] = {}
    machines = SimStateMachines(
        jobs=jobs,
        runs=runs,
        queue=queue,
        settings=settings,
        clock=clock,
        schedule=loop.schedule,
        fault=lambda state: box["w"]._fault(state),
        fault_after=lambda state: box["w"]._fault_after(state),
    )
    svc = compose(
        settings, jobs=jobs, runs=runs, queue=queue, state_machines=machines, clock=clock, handlers=handlers
    )
    svc.worker.sleep = lambda seconds: clock.advance(seconds)  # type: ignore[assignment]
    svc.dispatcher.sleep = lambda seconds: None
    box["w"] = World(svc, clock, loop, jobs, runs, queue, machines, handlers)
    return box["w"]


RETRY_PATH = ["Route", "CanRetry", "Backoff", "Rearm", "Enqueue", "Done"]
DEAD_LETTER_PATH = [
    *("Route", "CanRetry", "DeadLetter", "DeadJobRun", "FailJob"),
    *("AlertWanted", "Alert", "Propagate", "Done"),
]


# -- the model knows every state of the ASL ------------------------------------------------------------
def test_every_state_and_task_of_both_definitions_is_modelled() -> None:
    # Given the definitions CDK deploys / When the model is checked against them / Then no gap
    assert model_gaps({"failure": asl.failure_definition(), "dag": asl.dag_definition()}) == []


@pytest.mark.parametrize(
    "edit, gap",
    [
        (
            lambda d: d["States"].update(Backoff2=d["States"].pop("Backoff")),
            "state Backoff2 (Wait) is not modelled",
        ),
        (
            lambda d: d["States"].update(Extra={"Type": "Pass", "End": True}),
            "state Extra (Pass) is not modelled",
        ),
        (lambda d: d["States"].pop("Stale"), "modelled state Stale is gone"),
        (
            lambda d: d["States"]["Rearm"]["Parameters"].update(UpdateExpression="SET #s = :pending"),
            "Task Rearm has no modelled effect",
        ),
        (
            lambda d: d["States"].update(Route={"Type": "Parallel"}),
            "state Route is a Parallel, modelled as a Choice",
        ),
    ],
)
def test_a_state_gained_lost_renamed_or_rewritten_in_the_asl_is_a_gap(
    edit: Callable[[dict[str, Any]], Any], gap: str
) -> None:
    # Given the failure definition edited as a future change of asl.py might edit it
    definition = copy.deepcopy(asl.failure_definition())
    edit(definition)
    # When the model is checked against it / Then the gap is named
    assert any(gap in g for g in model_gaps({"failure": definition})), model_gaps({"failure": definition})


def test_a_dag_iterator_state_renamed_is_a_gap() -> None:
    definition = copy.deepcopy(asl.dag_definition())
    iterator = definition["States"]["Dependants"]["Iterator"]["States"]
    iterator["Tally"] = iterator.pop("Count")
    assert "dag: state Tally (Task) is not modelled" in model_gaps({"dag": definition})
    assert set(KNOWN_STATES["dag"]) - {"Count"} < set(KNOWN_STATES["dag"])


# -- the failure workflow --------------------------------------------------------------------------------
def test_a_failed_attempt_is_re_armed_and_re_sent_after_its_backoff(world: World) -> None:
    # Given a one-off whose first attempt fails, with a 5 s backoff
    job_id = world.one_off("demo.fail", max_attempts=3, wait=5)
    assert world.deliver() == [Outcome.FAILED]
    failed_at = world.clock.now()
    # When the workflow runs until just before the backoff ends
    world.loop.run(until=failed_at + timedelta(seconds=4.9))
    # Then the run still waits FAILED, with no message
    assert world.run_of(job_id).status == RunStatus.FAILED and world.messages_for(job_id) == []
    # When the backoff ends
    world.loop.run()
    # Then the run is PENDING again and its message is re-sent, visible when the backoff ended
    assert world.run_of(job_id).status == RunStatus.PENDING
    assert [at for at, _ in world.messages_for(job_id)] == [failed_at + timedelta(seconds=5)]
    [execution] = world.executions("failure")
    assert execution.entered == RETRY_PATH and execution.status == "SUCCEEDED"


def test_a_failing_job_is_dead_lettered_after_exactly_max_attempts_with_backoff(world: World) -> None:
    # Given a one-off that always fails, 3 attempts, a 5 s backoff
    job_id = world.one_off("demo.fail", max_attempts=3, wait=5)
    # When everything runs out
    world.settle()
    # Then (as on moto) the run is dead-lettered after attempts 1, 2, 3, the backoff between them
    run = world.run_of(job_id)
    assert run.status == RunStatus.DEAD_LETTER and [a.attempt for a in run.attempts] == [1, 2, 3]
    starts = [a.started_at for a in run.attempts]
    assert all(b - a >= timedelta(seconds=5) for a, b in itertools.pairwise(starts) if a and b)
    # its one-off job FAILED, one alert naming the run, the dead-letter list showing it
    assert world.job(job_id).status == JobStatus.FAILED
    assert [a["message"]["run_id"] for a in world.machines.alerts] == [run.run_id]
    page = world.svc.failures.list_dead_letters(tenant="t", cursor=None, limit=10)
    assert [(i.run_id, i.attempt) for i in page.items] == [(run.run_id, 3)]
    assert [e.entered for e in world.executions("failure")] == [RETRY_PATH, RETRY_PATH, DEAD_LETTER_PATH]


def test_a_flaky_job_succeeds_on_its_third_attempt_and_costs_twelve_transitions(world: World) -> None:
    # Given a job that fails twice, then succeeds / When it runs out
    job_id = world.one_off("demo.flaky", max_attempts=3, payload={"fail_times": 2})
    world.settle()
    # Then, as moto counts it: two workflows, 6 states each
    assert world.run_of(job_id).status == RunStatus.SUCCEEDED and world.run_of(job_id).attempt == 3
    assert len(world.executions("failure")) == 2 and world.machines.transitions() == 12


def test_a_retried_rearm_whose_run_a_cancel_moved_after_the_write_ends_stale_and_sends_nothing(
    world: World,
) -> None:
    # (While the run waits FAILED in its backoff nobody else may move it: a duplicate start of the same
    # attempt is refused by its execution name, a cancel sweeps only PENDING runs, the reconciler leaves
    # a FAILED run alone. The actor that can come between is one that moves the re-armed PENDING run:
    # a cancel of its job, or a worker claiming it from a redelivered message.)
    # Given a failed attempt whose Rearm writes, then its answer times out (Step Functions retries it 1 s on)
    world.after_write["Rearm"] = 1
    job_id = world.one_off("demo.fail", max_attempts=3, wait=5)
    world.deliver()
    failed_at = world.clock.now()
    world.loop.run(until=failed_at + timedelta(seconds=5.5))
    assert world.run_of(job_id).status == RunStatus.PENDING and world.messages_for(job_id) == []
    # When the job is cancelled before the retry (its PENDING run swept to CANCELLED)
    world.svc.job_service.cancel(job_id, tenant="t")
    assert world.run_of(job_id).status == RunStatus.CANCELLED
    world.loop.run()
    # Then the retried Rearm is refused, the execution ends in Stale, and it enqueues nothing
    [execution] = world.executions("failure")
    assert execution.ended_in == ["Stale"] and "Enqueue" not in execution.entered
    assert world.messages_for(job_id) == [] and world.run_of(job_id).status == RunStatus.CANCELLED


def test_a_dead_lettered_one_off_replayed_after_its_fix_is_scheduled_again_and_completes(
    world: World,
) -> None:
    # Given a one-off whose only run was dead-lettered (its job FAILED)
    switch = Switch()
    world.handlers.register("test.switch", switch)
    job_id = world.one_off("test.switch", max_attempts=1)
    world.settle()
    assert world.run_of(job_id).status == RunStatus.DEAD_LETTER
    assert world.job(job_id).status == JobStatus.FAILED
    # When the cause is fixed and the run replayed
    switch.failing = False
    world.svc.failures.replay(world.run_of(job_id).run_id, tenant="t")
    world.settle()
    # Then the replay re-armed it (attempt 1 of a new series), the job was restored and completed
    run = world.run_of(job_id)
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 1 and run.replays == 1
    assert world.job(job_id).status == JobStatus.COMPLETED
    replay = world.executions("failure")[-1]
    assert replay.entered == ["Route", "ReplayRearm", "ReplayOfJobRun", "RestoreJob", "Enqueue", "Done"]
    assert world.svc.failures.list_dead_letters(tenant="t", cursor=None, limit=10).items == []


def test_a_transient_fault_before_a_task_is_retried_with_the_states_backoff(world: World) -> None:
    # Given Rearm is throttled twice
    world.faults["Rearm"] = 2
    job_id = world.one_off("demo.fail", max_attempts=3, wait=5)
    world.deliver()
    failed_at = world.clock.now()
    # When the workflow runs
    world.loop.run()
    # Then Rearm applied on its third try, 1 s then 2 s after the first (IntervalSeconds 1, rate 2)
    assert [at for at, _ in world.messages_for(job_id)] == [failed_at + timedelta(seconds=5 + 1 + 2)]
    [execution] = world.executions("failure")
    assert execution.status == "SUCCEEDED" and execution.retries == 2


def test_a_task_that_keeps_failing_fails_the_execution_after_its_max_attempts(world: World) -> None:
    # Given SQS refuses every send
    world.faults["Enqueue"] = 100
    job_id = world.one_off("demo.fail", max_attempts=3, wait=5)
    world.deliver()
    failed_at = world.clock.now()
    world.loop.run()
    # Then the execution fails after 6 retries (1+2+4+8+16+32 s), the run re-armed but never enqueued
    [execution] = world.executions("failure")
    assert execution.status == "FAILED" and execution.error == "SQS.SdkClientException"
    assert execution.retries == 6 and world.clock.now() == failed_at + timedelta(seconds=5 + 63)
    assert world.run_of(job_id).status == RunStatus.PENDING and world.messages_for(job_id) == []


def test_a_timeout_after_rearm_wrote_still_enqueues_the_retry(world: World) -> None:
    # Given Rearm's write applies and its answer times out (DynamoDB 500 after the write)
    world.after_write["Rearm"] = 1
    job_id = world.one_off("demo.fail", max_attempts=3, wait=5)
    world.deliver()
    # When the workflow runs
    world.loop.run()
    # Then the retried Rearm accepts the row its first try wrote (PENDING at the same attempt), and the
    # retry is sent once
    assert world.run_of(job_id).status == RunStatus.PENDING
    assert len(world.messages_for(job_id)) == 1
    [execution] = world.executions("failure")
    assert execution.entered[-2:] == ["Enqueue", "Done"] and execution.retries == 1


def test_a_timeout_after_replay_rearm_wrote_still_enqueues_the_replayed_run(world: World) -> None:
    # Given a dead-lettered one-off, and a replay whose ReplayRearm write applies and whose answer
    # times out (DynamoDB 500 after the write)
    switch = Switch()
    world.handlers.register("test.switch", switch)
    job_id = world.one_off("test.switch", max_attempts=1)
    world.settle()
    assert world.run_of(job_id).status == RunStatus.DEAD_LETTER
    world.after_write["ReplayRearm"] = 1
    # When the cause is fixed and the run replayed
    switch.failing = False
    world.svc.failures.replay(world.run_of(job_id).run_id, tenant="t")
    world.settle()
    # Then the retried ReplayRearm accepts the row its first try wrote (PENDING, attempt 0, the same
    # series), and the run is sent and runs: before, it ended Stale and the run stayed PENDING with
    # no message for good (tests/sim seed 293)
    run = world.run_of(job_id)
    assert (run.status, run.attempt, run.replays) == (RunStatus.SUCCEEDED, 1, 1)
    replay = world.executions("failure")[-1]
    assert replay.entered[-2:] == ["Enqueue", "Done"] and replay.retries == 1


def test_a_timeout_after_dead_letter_wrote_still_fails_the_job_alerts_and_propagates(world: World) -> None:
    # Given a -> b, a fails for good, and DeadLetter's answer times out after its write
    world.after_write["DeadLetter"] = 1
    a = world.one_off("demo.fail", max_attempts=1)
    b = world.dependant(a)
    # When everything runs out
    world.settle()
    # Then a is dead-lettered with everything that goes with it
    assert world.run_of(a).status == RunStatus.DEAD_LETTER
    assert world.job(a).status == JobStatus.FAILED and len(world.machines.alerts) == 1
    assert world.run_of(b).status == RunStatus.UPSTREAM_FAILED


def test_a_retried_dead_letter_whose_run_a_replay_moved_after_the_write_ends_stale(world: World) -> None:
    # Given a one-off that fails for good, and DeadLetter's answer times out after its write
    world.after_write["DeadLetter"] = 1
    a = world.one_off("demo.fail", max_attempts=1)
    world.deliver()
    failed_at = world.clock.now()
    world.loop.run(until=failed_at + timedelta(seconds=0.5))
    assert world.run_of(a).status == RunStatus.DEAD_LETTER
    # When an operator replays the dead letter before the retry (the run PENDING at attempt 0)
    world.svc.failures.replay(world.run_of(a).run_id, tenant="t")
    world.loop.run(until=failed_at + timedelta(seconds=0.9))
    assert world.run_of(a).status == RunStatus.PENDING and world.run_of(a).attempt == 0
    world.loop.run()
    # Then the retried DeadLetter is refused: the execution ends in Stale, fails no job, alerts nobody
    first = world.executions("failure")[0]
    assert first.ended_in == ["Stale"] and "Alert" not in first.entered
    assert world.machines.alerts == [] and world.job(a).status == JobStatus.SCHEDULED


# -- the DAG workflow ------------------------------------------------------------------------------------
def test_a_dependant_is_released_once_when_all_its_upstreams_of_the_period_are_done(world: World) -> None:
    # Given c depends on a and b, both due now
    a, b = world.one_off("demo.echo"), world.one_off("demo.echo")
    c = world.dependant(a, b)
    # When a and b succeed and their DAG workflows run
    assert sorted(world.deliver()) == [Outcome.SUCCEEDED, Outcome.SUCCEEDED]
    world.loop.run()
    # Then c's run is PENDING and its message sent exactly once
    run = world.run_of(c)
    assert run.status == RunStatus.PENDING and run.kind == "dependant" and len(world.messages_for(c)) == 1
    world.settle()
    assert world.run_of(c).status == RunStatus.SUCCEEDED and world.job(c).status == JobStatus.COMPLETED
    # When both upstream runs are signalled again (new execution names: a real re-run), as on moto
    for upstream in (a, b):
        again = world.run_of(upstream).model_copy(update={"replays": 7})
        world.svc.dag.signal_success(world.job(upstream), again)
    world.loop.run()
    # Then the count refuses them and nothing is sent: c ran once, in one run
    assert world.messages_for(c) == []
    assert [e.entered[-1] for e in world.executions("dag")[-2:]] == ["Released", "Released"]
    assert len(world.runs.recent(c, limit=5)) == 1 and world.run_of(c).attempt == 1


def test_a_dependant_waits_while_one_of_its_upstreams_is_outstanding(world: World) -> None:
    # Given c depends on a (due now) and b (due in an hour)
    a = world.one_off("demo.echo")
    b = world.one_off("demo.echo", run_at=T0 + timedelta(hours=1))
    c = world.dependant(a, b)
    # When a succeeds and its DAG workflow runs
    world.deliver()
    world.loop.run()
    # Then c has no run and no message; its wait record counts one outstanding upstream
    assert world.runs.recent(c, limit=5) == [] and world.messages_for(c) == []
    [execution] = world.executions("dag")
    assert execution.ended_in == ["Waiting"] and execution.entered == [
        "Dependants",
        "Count",
        "Ready",
        "Waiting",
    ]
    assert world.runs.waits[(c, "once")] == (1, frozenset({world.run_of(a).run_id}))


def test_a_dead_lettered_upstream_marks_its_dependants_upstream_failed_and_a_replay_re_arms_them(
    world: World,
) -> None:
    # Given a -> b -> c, and a always fails
    switch = Switch()
    world.handlers.register("test.switch", switch)
    a = world.one_off("test.switch", max_attempts=1)
    b = world.dependant(a)
    c = world.dependant(b)
    # When a is dead-lettered
    world.settle()
    # Then every transitive dependant's run of the period is UPSTREAM_FAILED, visibly, with no message
    for dependant in (b, c):
        run = world.run_of(dependant)
        assert run.status == RunStatus.UPSTREAM_FAILED and run.reason and "dead-lettered" in run.reason
    assert world.messages_for(b) == [] and world.messages_for(c) == []
    # When the cause is fixed and a replayed
    switch.failing = False
    world.svc.failures.replay(world.run_of(a).run_id, tenant="t")
    world.settle()
    # Then b and c are re-armed from UPSTREAM_FAILED and run, once each
    assert [world.run_of(j).status for j in (a, b, c)] == [RunStatus.SUCCEEDED] * 3
    assert [world.job(j).status for j in (a, b, c)] == [JobStatus.COMPLETED] * 3


def test_a_timeout_after_the_count_wrote_is_rechecked_and_counted_once(world: World) -> None:
    # Given a's count into c applies and its answer times out
    world.after_write["Count"] = 1
    a, b = world.one_off("demo.echo"), world.one_off("demo.echo", run_at=T0 + timedelta(seconds=30))
    c = world.dependant(a, b)
    world.deliver()
    world.loop.run()
    # Then the retried count is refused (the run was counted): Recheck reads 1 outstanding, c waits
    [execution] = world.executions("dag")
    assert execution.entered == ["Dependants", "Count", "Recheck", "Ready", "Waiting"]
    assert world.runs.waits[(c, "once")][0] == 1 and world.runs.recent(c, limit=5) == []
    # When b succeeds too / Then c is released once
    world.clock.advance(30)
    world.svc.dispatcher.dispatch_all()
    world.settle()
    assert world.run_of(c).status == RunStatus.SUCCEEDED and world.run_of(c).attempt == 1


def test_a_release_whose_answer_timed_out_still_sends_the_dependant_once(world: World) -> None:
    # Given c's release applies and its answer times out
    world.after_write["Release"] = 1
    a = world.one_off("demo.echo")
    c = world.dependant(a)
    world.deliver()
    world.loop.run()
    # Then the retried release is refused, Existing reads it PENDING, and it is enqueued once
    [execution] = world.executions("dag")
    assert execution.entered[-4:] == ["Existing", "StillPending", "Enqueue", "Released"]
    assert len(world.messages_for(c)) == 1
