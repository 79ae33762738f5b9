"""A run that executed is recorded as executed, though the outcome's write fails (found by tests/sim).

Seed 90 (issue 19): a fast-path worker ran the handler, its one write answered a 500, the message
went back to the queue, and its redelivery met the tick's gate first (an edit had moved the
schedule): the run was written SKIPPED although its handler had succeeded; with a cancel in between
it was written CANCELLED.

Seed 2973: a cancel's sweep of a PENDING one-off no message carried any more answered a throttle,
and the client never retried: the run stayed PENDING (services/jobs.py JobService._sweep).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import StoreUnreachable, TransientStoreError
from jobsched.handlers import RunContext
from jobsched.ports import Crash
from jobsched.services.jobs import job_id_for_key
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World
from tests.unit.services.test_worker_crash_after_handler import crash_once_at


class FailingWrite:
    """The run store, but `method` fails `times` times: before its write (a 500) or after it (a timeout)."""

    def __init__(self, runs: Any, method: str, *, after: bool, times: int = 1) -> None:
        self._runs, self._method, self._after, self.left = runs, method, after, times

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._runs, name)
        if name != self._method:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.left and not self._after:
                self.left -= 1
                raise TransientStoreError(f"InternalServerError on {name}", aws_code="InternalServerError")
            out = attr(*args, **kwargs)
            if self.left and self._after:
                self.left -= 1
                raise StoreUnreachable(f"read timeout after {name} applied")
            return out

        return call


def _one_off(world: World) -> tuple[str, list[int]]:
    calls: list[int] = []

    def effect(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        return {"ok": True}

    world.handler("test.effect", effect)
    request = CreateJobRequest(type="one_off", handler="test.effect", run_at=T0 + timedelta(seconds=5))
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    return job_id, calls


@pytest.mark.parametrize(
    ("fast_path", "method"), [(True, "record_unleased"), (False, "record")], ids=["fast", "leased"]
)
@pytest.mark.parametrize("after", [False, True], ids=["500 before the write", "timeout after the write"])
def test_a_success_whose_record_write_fails_once_is_still_recorded_as_executed(
    world: World, fast_path: bool, method: str, after: bool
) -> None:
    # Given a one-off due now, and the run store failing the outcome's write once
    job_id, calls = _one_off(world)
    world.svc.worker.fast_path = fast_path
    world.svc.worker.runs = FailingWrite(world.runs, method, after=after)  # type: ignore[assignment]
    # When the worker runs it
    outcomes = world.deliver()
    # Then the handler ran once, and the run says so: SUCCEEDED, one attempt, the job COMPLETED,
    # the message acknowledged (before, the error left the record to a redelivery)
    assert outcomes == [Outcome.SUCCEEDED] and calls == [1]
    [run] = world.runs.recent(job_id, limit=5)
    assert run.status == RunStatus.SUCCEEDED and [a.attempt for a in run.attempts] == [1]
    job = world.jobs.get_job(job_id)
    assert job is not None and job.status == JobStatus.COMPLETED
    assert world.queue.peek() == []


def test_a_record_that_keeps_failing_leaves_the_message_for_its_redelivery(world: World) -> None:
    # Given the outcome's write failing every time the worker tries it
    job_id, calls = _one_off(world)
    world.svc.worker.runs = FailingWrite(world.runs, "record_unleased", after=False, times=100)  # type: ignore[assignment]
    # When the worker runs it / Then the error reaches the event source: the message stays queued
    with pytest.raises(TransientStoreError):
        world.deliver()
    [run] = world.runs.recent(job_id, limit=5)
    assert calls == [1] and run.status == RunStatus.PENDING and len(world.queue.peek()) == 1


def test_a_cancels_sweep_retries_a_pending_row_whose_write_failed(world: World) -> None:
    # Given a one-off due in 5 s whose hand-over wrote its PENDING row and died before sending its
    # message (so only the row's sweep can settle it: the cancel clears next_run_at, and no pass sends
    # it again), and a store whose first write of that sweep answers a 500
    request = CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5))
    world.svc.dispatcher.crash = crash_once_at("dispatch.before_send")
    with pytest.raises(Crash):
        world.svc.job_service.submit(request, tenant="t", idempotency_key="k")
    job_id = job_id_for_key("t", "k")
    world.svc.job_service.runs = FailingWrite(world.runs, "cancel", after=False)  # type: ignore[assignment]
    # When the client cancels it (once: a client need not retry a cancel)
    control = world.svc.job_service.cancel(job_id, tenant="t")
    # Then the sweep tried the row again: the cancel answers 200 and the run is CANCELLED. Before, the
    # 500 went to the client and the run stayed PENDING for ever (tests/sim seed 2973)
    assert control.status == JobStatus.CANCELLED
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == RunStatus.CANCELLED
    assert world.queue.receive() == []
