"""A run whose first beat's lease write timed out after it applied is recorded as it ran, never CANCELLED.

On the fast path the first heartbeat writes the run's lease row (RunStore.persist_running: PENDING ->
RUNNING under this attempt's own lease). Tests/sim seed 6505: that write applied and its answer timed
out; the beat tried it again, the row (RUNNING now, under this very lease) refused it, and the worker
read the refusal as another holder's. It let its lease go, its outcome's one write (record_unleased)
was refused by that RUNNING row, and the message was left to its visibility. The takeover after the
lease ran the handler again as attempt 2 and recorded that, and a run cancel of the re-armed retry
wrote CANCELLED over a row that held no trace of attempt 1, whose handler had run. Now a refusal by
a row RUNNING under the attempt's own lease (its owner names that attempt alone) is the write's own:
the attempt is recorded under it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.keys import run_id_for
from jobsched.domain.status import RunStatus
from jobsched.errors import StoreUnreachable, TransientStoreError
from jobsched.handlers import RunContext
from jobsched.services.run import Outcome
from jobsched.services.runs import RunService
from tests.unit.services.conftest import T0, World

TICK = T0 + timedelta(seconds=5)
SF = times.stored(TICK)


class LeaseWriteAnswers:
    """The run store, but persist_running's first calls fail as listed: "timeout" (it applied, its
    answer lost: StoreUnreachable) or "500" (nothing written: TransientStoreError)."""

    def __init__(self, runs: Any, *failures: str) -> None:
        self._runs, self.failures = runs, list(failures)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._runs, name)
        if name != "persist_running":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            failure = self.failures.pop(0) if self.failures else None
            if failure == "500":
                raise TransientStoreError("InternalServerError on persist_running")
            out = attr(*args, **kwargs)
            if failure == "timeout":
                raise StoreUnreachable("read timeout after persist_running applied")
            return out

        return call


def _beats_then_fails(payload: dict[str, Any], ctx: RunContext) -> None:
    ctx.heartbeat()  # the handler lasts past its first beat: the fast path writes its lease row
    raise RuntimeError(f"fails attempt {ctx.attempt}")


@pytest.mark.parametrize(
    "failures",
    [("timeout",), ("timeout", "500")],
    ids=["timeout then refused", "timeout then 500 (no answer at all)"],
)
def test_a_run_whose_first_beat_timed_out_after_its_write_is_recorded_and_its_retrys_cancel_keeps_it(
    world: World, failures: tuple[str, ...]
) -> None:
    # Given a one-off due now whose handler beats and then fails, on the fast path, and the store
    # whose answer to the first beat's lease write is lost after the write applied (the beat's second
    # try is then refused by the row RUNNING under this attempt's lease, or fails as well)
    world.handler("t.beats_then_fails", _beats_then_fails)
    request = CreateJobRequest(type="one_off", handler="t.beats_then_fails", run_at=TICK)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.set(TICK)
    world.svc.worker.fast_path = True
    world.svc.worker.runs = LeaseWriteAnswers(world.runs, *failures)  # type: ignore[assignment]
    # When the worker runs it
    outcomes = world.deliver()
    # Then attempt 1 is recorded as it ran (FAILED, under its own lease) and handed to the failure
    # workflow. Before, the worker took the refusal for another holder's, its record was refused, the
    # message was left ("left") and the row stayed RUNNING with no record of attempt 1
    assert outcomes == [Outcome.FAILED]
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 1
    assert [(a.attempt, a.outcome) for a in row.attempts] == [(1, "FAILED")]
    assert [n[-3:] for (_, n) in world.machines.started] == ["-a1"]
    # When the workflow re-arms its retry and a client cancels the run before the retry starts
    assert world.runs.rearm(job_id, SF, attempt=1)
    answer = RunService(job_service=world.svc.job_service).cancel(run_id_for(job_id, TICK), tenant="t")
    # Then the retry is CANCELLED (it never ran), and the row still holds attempt 1 as it ran (seed
    # 6505: a CANCELLED row over an attempt 1 that ran unrecorded)
    assert (answer.status, answer.stopping) == (RunStatus.CANCELLED, False)
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.CANCELLED
    assert [(a.attempt, a.outcome) for a in row.attempts] == [(1, "FAILED")]


def test_a_long_run_whose_first_beat_timed_out_after_its_write_keeps_its_lease_and_hears_a_run_cancel(
    world: World,
) -> None:
    # Given a one-off due now on the fast path, whose first beat's lease write applied and whose
    # answer was lost, the beat's second try refused by the row RUNNING under this attempt's lease
    seen: list[tuple[bool, Any]] = []
    lease = world.svc.worker.settings.lease_seconds

    def long_run(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        ctx.heartbeat()
        # When a client cancels the run while it runs, and the handler beats again 2/3 of a lease on
        answer = RunService(job_service=world.svc.job_service).cancel(ctx.run_id, tenant="t")
        seen.append((answer.stopping, answer.status))
        world.clock.advance(lease * 2 // 3)
        ctx.heartbeat()
        row = world.runs.get(ctx.job_id, SF)
        seen.append((ctx.cancelled, row.lease_until if row is not None else None))
        return {"ok": True}

    world.handler("t.long_run", long_run)
    request = CreateJobRequest(type="one_off", handler="t.long_run", run_at=TICK)
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.svc.dispatcher.dispatch_all()
    world.clock.set(TICK)
    world.svc.worker.fast_path = True
    world.svc.worker.runs = LeaseWriteAnswers(world.runs, "timeout")  # type: ignore[assignment]
    outcomes = world.deliver()
    # Then the cancel asked the run to stop (202), the later beat renewed the run's lease and read the
    # cancel mark for the handler, and the run is recorded as it ran. Before, the beat took the refusal
    # for another holder's: it renewed no lease (a long run's lapsed, open to a takeover while its
    # handler ran) and never read the mark
    assert seen[0] == (True, RunStatus.RUNNING)
    assert seen[1] == (True, world.clock.now() + timedelta(seconds=lease))
    assert outcomes == [Outcome.SUCCEEDED]
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.cancel_requested_at is not None
    assert [(a.attempt, a.outcome) for a in row.attempts] == [(1, "SUCCEEDED")]
