"""The worker's fast path under an eventually consistent read of the run row (found by tests/sim, seed 1)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.domain.records import Outgoing
from jobsched.domain.status import RunStatus
from tests.unit.services.conftest import T0, World


class StaleRuns:
    """The run store, but every eventually consistent read answers the version before the first
    write (no row), as a DynamoDB read may right after a write."""

    def __init__(self, runs: Any) -> None:
        self._runs = runs

    def get(self, job_id: str, scheduled_for: Any, *, consistent: bool = True) -> Any:
        return self._runs.get(job_id, scheduled_for) if consistent else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runs, name)


def test_a_retry_read_stale_on_the_fast_path_hands_its_failure_over_as_the_next_attempt(world: World) -> None:
    # Given a one-off whose attempt 1 failed on the fast path and was handed to the failure workflow
    request = CreateJobRequest(
        type="one_off", handler="demo.flaky", payload={"fail_times": 5}, run_at=T0 + timedelta(seconds=5)
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.deliver()
    sf = times.stored(T0 + timedelta(seconds=5))
    assert [n[-3:] for (_, n) in world.machines.started] == ["-a1"]
    # and the workflow re-armed it (FAILED -> PENDING, attempt 1 kept) and sent its retry message
    key = (job_id, sf)
    world.runs.rows[key] = world.runs.rows[key].model_copy(update={"status": RunStatus.PENDING})
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=sf, guard=True), 0)])
    # When a worker whose eventually consistent read still answers "no row" takes the retry
    world.svc.worker.runs = StaleRuns(world.runs)  # type: ignore[assignment]
    world.deliver()
    # Then the store counts attempt 2, and the failure is handed over as attempt 2: a new workflow
    # execution (before, the worker handed it over as attempt 1 again: the start was a no-op by
    # name, no retry ever came, and the run stayed FAILED forever)
    row = world.runs.get(job_id, sf)
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 2
    names = sorted(n for (_, n) in world.machines.started)
    assert len(names) == 2 and names[1].endswith("-a2"), names


def test_a_replayed_run_read_stale_on_the_fast_path_hands_its_failure_over_in_its_own_series(
    world: World,
) -> None:
    # Given a one-off whose attempt 1 failed on the fast path and was handed over (series r0)
    request = CreateJobRequest(
        type="one_off", handler="demo.flaky", payload={"fail_times": 5}, run_at=T0 + timedelta(seconds=5)
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.advance(5)
    world.deliver()
    sf = times.stored(T0 + timedelta(seconds=5))
    # and, dead-lettered, it was replayed: ReplayRearm (PENDING, attempt 0, replays 1), its message
    key = (job_id, sf)
    world.runs.rows[key] = world.runs.rows[key].model_copy(
        update={"status": RunStatus.PENDING, "attempt": 0, "replays": 1}
    )
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=sf, guard=True), 0)])
    # When a worker whose eventually consistent read answers an older version takes the replay
    world.svc.worker.runs = StaleRuns(world.runs)  # type: ignore[assignment]
    world.deliver()
    # Then its failure is handed over in the replay's series (r1, a1): a new workflow execution.
    # Before, the stale read's series (r0) named it as the first series' attempt 1: the start was a
    # no-op by name, and the run stayed FAILED for good (tests/sim seed 174)
    row = world.runs.get(job_id, sf)
    assert row is not None and row.status == RunStatus.FAILED and (row.attempt, row.replays) == (1, 1)
    names = sorted(n for (_, n) in world.machines.started)
    assert len(names) == 2 and any("r1" in n and n.endswith("-a1") for n in names), names
