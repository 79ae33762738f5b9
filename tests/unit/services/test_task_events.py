"""Container tasks' stop events (services/task_events.py) on the in-memory fakes: each recorded-shape
event (tests/events/ecs_task_stopped_*.json) records its run attempt's outcome once, as the ECS
worker's poll would map it; a duplicate, late or foreign event changes nothing; and the worker
that follows the task finds its attempt recorded and settles nothing twice."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.ecs_tasks import RAN_UNRECORDED, started_by, task_ended
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import TargetFailed, TargetSpec
from jobsched.handlers import RunContext
from jobsched.ports import Crash, Target
from jobsched.services.run import Outcome
from jobsched.services.task_events import TaskEventOutcome, TaskStopEvents
from tests.unit.services.conftest import T0, World

EVENTS = Path(__file__).resolve().parents[2] / "events"
CLUSTER_ARN = "arn:aws:ecs:us-east-1:123456789012:cluster/jobsched"
TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/jobsched/4f1c0e6a9b2d4c3e8f7a6b5c4d3e2f1a"
ECS = {
    "type": "ecs",
    "image": "public.ecr.aws/docker/library/busybox:1.36",
    "command": ["sh", "-c", "exit 3"],
}
SF = T0 + timedelta(seconds=5)


def stopped_event(name: str, *, run_id: str, attempt: int = 1, task_arn: str = TASK_ARN) -> dict[str, Any]:
    """A recorded-shape event of tests/events, filled in for one run attempt's task."""
    text = (EVENTS / f"ecs_task_stopped_{name}.json").read_text()
    for placeholder, value in (
        ("__TASK_ARN__", task_arn),
        ("__CLUSTER_ARN__", CLUSTER_ARN),
        ("__STARTED_BY__", started_by(run_id)),
        ("__RUN_ID__", run_id),
        ("__JOB_ID__", run_id.rpartition("-")[0]),
        ("__ATTEMPT__", str(attempt)),
    ):
        text = text.replace(placeholder, value)
    return dict(json.loads(text))


@dataclass
class Following:
    """An ecs target's stand-in for EcsTaskRunner: the task 'runs' while the worker heartbeats (the
    run row is RUNNING under its lease), `during` plays what happens meanwhile (an event), then the
    worker's own poll sees the task STOPPED as `task` says and maps it as the runner does."""

    task: dict[str, Any] = field(default_factory=lambda: {"containers": [{"exitCode": 0}]})
    during: Callable[[Mapping[str, Any]], None] = lambda envelope: None
    envelopes: list[dict[str, Any]] = field(default_factory=list)

    def for_spec(
        self, spec: TargetSpec, *, timeout_seconds: float | None = None, resources: Any = None
    ) -> Target:
        return _Runner(self)

    def check(self, spec: TargetSpec) -> None:
        return None


@dataclass
class _Runner:
    source: Following

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        self.source.envelopes.append(dict(envelope))
        ctx.heartbeat()  # the first poll's beat: the run row is RUNNING under this worker's lease
        self.source.during(envelope)
        return task_ended(TASK_ARN, self.source.task)


@pytest.fixture
def following(world: World) -> Following:
    source = Following()
    world.svc.worker.targets = source
    world.svc.job_service.targets = source
    return source


@pytest.fixture
def stops(world: World) -> TaskStopEvents:
    return TaskStopEvents(
        jobs=world.jobs, runs=world.runs, failures=world.svc.failures, dag=world.svc.dag, clock=world.clock
    )


def submit(world: World, **fields: Any) -> str:
    request = CreateJobRequest.model_validate(
        {"type": "one_off", "run_at": SF, "target": ECS, "timeout_seconds": 600, **fields}
    )
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def run_id_of(world: World, job_id: str) -> str:
    row = world.runs.get(job_id, SF)
    assert row is not None
    return row.run_id


def test_it_maps_a_stopped_task_exactly_as_the_worker_poll_does() -> None:
    # Given the three recorded stops
    def detail(name: str) -> dict[str, Any]:
        return dict(stopped_event(name, run_id="j-1")["detail"])

    # Then exit 0 succeeds, exit 3 is ExitCode, and no exit code is TaskLost with the stop reason
    assert task_ended(TASK_ARN, detail("exit0")) == {"task_arn": TASK_ARN, "exit_code": 0}
    with pytest.raises(TargetFailed) as exit3:
        task_ended(TASK_ARN, detail("exit3"))
    assert (exit3.value.error_type, str(exit3.value)) == ("ExitCode", f"{TASK_ARN}: exit code 3")
    with pytest.raises(TargetFailed) as lost:
        task_ended(TASK_ARN, detail("no_exit_code"))
    assert lost.value.error_type == "TaskLost" and "Task failed to start" in str(lost.value)


def test_a_python_runs_own_task_that_ran_its_handler_unrecorded_is_task_lost_not_exit_code() -> None:
    # Given a STOPPED task whose container exited RAN_UNRECORDED (4)
    task = {"lastStatus": "STOPPED", "containers": [{"exitCode": RAN_UNRECORDED}]}
    # Then a Python run's own task (its handler ran; its record failed) is an unknown outcome
    with pytest.raises(TargetFailed) as own:
        task_ended(TASK_ARN, task, own_task=True)
    assert own.value.error_type == "TaskLost" and "could not be recorded" in str(own.value)
    # And a user's container exiting 4 is that container's own failure
    with pytest.raises(TargetFailed) as user:
        task_ended(TASK_ARN, task)
    assert (user.value.error_type, str(user.value)) == ("ExitCode", f"{TASK_ARN}: exit code 4")


@pytest.mark.parametrize(
    ("reason", "code", "error_type", "says"),
    [
        ("jobsched: cancelled", 143, "Cancelled", "stopped by its run's cancel (exit code 143)"),
        ("jobsched: cancelled", None, "Cancelled", "stopped by its run's cancel (no exit code)"),
        ("jobsched: over 60 s", 137, "Timeout", "stopped over 60 s, exit code 137"),
        ("Essential container in task exited", 143, "ExitCode", "exit code 143"),
    ],
)
def test_a_task_jobsched_stopped_ends_as_why_it_stopped_it_in_both_readers(
    reason: str, code: int | None, error_type: str, says: str
) -> None:
    # Given a stopped task whose stop reason is jobsched's own StopTask reason (or not)
    task = dict(stopped_event("exit3", run_id="j-1")["detail"])
    task["stoppedReason"] = reason
    task["containers"] = [{**task["containers"][0], "exitCode": code}]
    # Then it failed for that reason, whichever reader (the worker's poll, the stop event) reads it
    with pytest.raises(TargetFailed) as failed:
        task_ended(TASK_ARN, task)
    assert failed.value.error_type == error_type and says in str(failed.value)


def test_a_task_that_exits_0_after_its_cancel_succeeds() -> None:
    task = dict(stopped_event("exit0", run_id="j-1")["detail"])
    task["stoppedReason"] = "jobsched: cancelled"
    assert task_ended(TASK_ARN, task) == {"task_arn": TASK_ARN, "exit_code": 0}


@pytest.mark.parametrize(
    ("name", "status", "error_type"),
    [
        ("exit0", RunStatus.SUCCEEDED, None),
        ("exit3", RunStatus.FAILED, "ExitCode"),
        ("no_exit_code", RunStatus.FAILED, "TaskLost"),
    ],
)
def test_the_event_before_the_workers_poll_records_the_attempt_once(
    world: World,
    following: Following,
    stops: TaskStopEvents,
    name: str,
    status: RunStatus,
    error_type: str | None,
) -> None:
    # Given a one-off container job whose task stops while its worker follows it (the row RUNNING)
    job_id = submit(world, max_attempts=1)
    seen: list[TaskEventOutcome] = []

    def event_arrives(envelope: Mapping[str, Any]) -> None:
        event = stopped_event(name, run_id=str(envelope["run_id"]), attempt=int(envelope["attempt"]))
        # When ECS's stop event arrives first, and then a duplicate of it
        seen.append(stops.stopped(event["detail"]))
        seen.append(stops.stopped(event["detail"]))

    following.during = event_arrives
    following.task = dict(stopped_event(name, run_id="x")["detail"])  # the worker's poll sees the same
    world.clock.advance(5)
    outcomes = world.deliver()

    # Then the event recorded the attempt, the duplicate changed nothing
    assert seen == [TaskEventOutcome(status.value.lower()), TaskEventOutcome.NOT_RUNNING]
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == status and row.attempt == 1 and len(row.attempts) == 1
    assert (row.error.type if row.error else None) == error_type
    # And the worker, finding its attempt recorded, ended the run as recorded, without a second record
    assert outcomes == [Outcome.SUCCEEDED if status == RunStatus.SUCCEEDED else Outcome.FAILED]
    # And it was settled once: a one-off COMPLETED, or one failure workflow execution
    job = world.jobs.get_job(job_id)
    assert job is not None
    if status == RunStatus.SUCCEEDED:
        assert job.status == JobStatus.COMPLETED and world.machines.started == {}
        assert row.result == {"task_arn": TASK_ARN, "exit_code": 0}
    else:
        (handed,) = world.machines.started.values()
        assert handed["attempt"] == 1 and handed["retryable"] is False
    assert world.queue.receive() == []  # the message was acknowledged


def test_an_event_for_a_run_the_worker_recorded_already_changes_nothing(
    world: World, following: Following, stops: TaskStopEvents
) -> None:
    # Given a container run its worker recorded FAILED (exit 3) and handed over
    following.task = {"containers": [{"exitCode": 3}]}
    job_id = submit(world, max_attempts=1)
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    before = world.runs.get(job_id, SF)
    handed = dict(world.machines.started)
    # When the stop event arrives late (any of the three shapes)
    for name in ("exit0", "exit3", "no_exit_code"):
        event = stopped_event(name, run_id=run_id_of(world, job_id))
        # Then it is ignored, and nothing changed
        assert stops.stopped(event["detail"]) == TaskEventOutcome.NOT_RUNNING
    assert world.runs.get(job_id, SF) == before
    assert world.machines.started == handed


def test_an_event_for_another_attempt_changes_nothing(
    world: World, following: Following, stops: TaskStopEvents
) -> None:
    # Given a run RUNNING on attempt 1
    job_id = submit(world)
    seen: list[TaskEventOutcome] = []

    def stale_event(envelope: Mapping[str, Any]) -> None:
        # When a stop event of attempt 2's task (or an earlier attempt's) arrives
        for attempt in (0, 2):
            event = stopped_event("exit3", run_id=str(envelope["run_id"]), attempt=attempt)
            seen.append(stops.stopped(event["detail"]))

    following.during = stale_event
    world.clock.advance(5)
    # Then it is ignored: the worker records its own attempt
    assert world.deliver() == [Outcome.SUCCEEDED]
    assert seen == [TaskEventOutcome.NOT_RUNNING, TaskEventOutcome.NOT_RUNNING]
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED


def test_a_foreign_or_unknown_task_is_ignored(world: World, stops: TaskStopEvents) -> None:
    # Given a task no jobsched run started (an ECS service's), and one whose run does not exist
    foreign = stopped_event("foreign", run_id="unused")
    unknown = stopped_event("exit0", run_id="job_nosuchjob0000000000000-1796040005000")
    # And one whose startedBy does not agree with its environment
    forged = stopped_event("exit0", run_id="job_nosuchjob0000000000000-1796040005000")
    forged["detail"]["startedBy"] = "someone-else"
    # Then each is ignored, and nothing is written
    assert stops.stopped(foreign["detail"]) == TaskEventOutcome.FOREIGN
    assert stops.stopped(forged["detail"]) == TaskEventOutcome.FOREIGN
    assert stops.stopped(unknown["detail"]) == TaskEventOutcome.UNKNOWN_RUN
    assert world.machines.started == {}


def test_a_run_not_leased_yet_is_left_to_its_worker(world: World, stops: TaskStopEvents) -> None:
    # Given a container job whose run row is PENDING (the fast path writes no lease before its first beat)
    job_id = submit(world)
    world.clock.advance(5)
    world.runs.put_pending(job_id=job_id, tenant="t", scheduled_for=SF, now=world.clock.now())
    # When a stop event for its attempt 1 arrives
    event = stopped_event("exit0", run_id=run_id_of(world, job_id))
    # Then it is ignored
    assert stops.stopped(event["detail"]) == TaskEventOutcome.NOT_RUNNING
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.PENDING


def test_a_worker_that_dies_after_the_event_leaves_the_run_recorded_once_and_its_message_dropped(
    world: World, following: Following, stops: TaskStopEvents
) -> None:
    # Given a container job whose task exits 3 while its worker follows it
    job_id = submit(world, max_attempts=3)
    seen: list[TaskEventOutcome] = []

    def event_arrives(envelope: Mapping[str, Any]) -> None:
        event = stopped_event("exit3", run_id=str(envelope["run_id"]), attempt=int(envelope["attempt"]))
        seen.append(stops.stopped(event["detail"]))

    def die_after_the_poll(point: str) -> None:
        if point == "run.after_handler":
            raise Crash(point)  # the ECS worker's task is killed before it records

    following.during = event_arrives
    following.task = {"containers": [{"exitCode": 3}]}
    world.svc.worker.crash = die_after_the_poll
    world.clock.advance(5)
    # When the event records the attempt and the worker dies
    with pytest.raises(Crash):
        world.deliver()
    assert seen == [TaskEventOutcome.FAILED]
    # And its message comes back after the visibility timeout
    world.svc.worker.crash = lambda point: None
    world.clock.advance(301)
    outcomes = world.deliver()
    # Then the redelivery finds the attempt recorded: no second run of the task, no second record,
    # and the failure handed over once (the retry is the workflow's, not the redelivery's)
    assert outcomes == [Outcome.DUPLICATE]
    assert len(following.envelopes) == 1
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.FAILED and len(row.attempts) == 1
    (handed,) = world.machines.started.values()
    assert handed["attempt"] == 1 and handed["retryable"] is True
