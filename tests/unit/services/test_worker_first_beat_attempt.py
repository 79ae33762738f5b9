"""The fast path's first heartbeat writes the lease row, attempt + 1 over the row it finds: the failure
is handed over under that attempt (found by tests/sim, seeds 1260 and 49: stuck FAILED)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.models import RunMessage
from jobsched.domain.records import AttemptEnd, NewRun, Outgoing
from jobsched.domain.status import RunStatus
from jobsched.handlers import RunContext
from tests.unit.services.conftest import T0, World
from tests.unit.services.test_worker_stale_reads import StaleRuns

TICK = T0 + timedelta(seconds=60)
SF = times.stored(TICK)


def _allow_job(world: World, handler: str) -> str:
    """A job ticking every minute, overlap allowed: its runs read their row eventually consistently
    (a run that holds the job's slot reads it consistently), and its tick's message is sent here."""
    request = CreateJobRequest(
        type="recurring", handler=handler, cron_expr="* * * * *", overlap_policy="allow"
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    world.clock.set(TICK)
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=SF, guard=False), 0)])
    return job_id


def _beats_then_fails(payload: dict[str, Any], ctx: RunContext) -> None:
    ctx.heartbeat()  # the handler lasts past its first beat: the fast path writes its lease row
    raise RuntimeError(f"fails attempt {ctx.attempt}")


def test_a_retry_read_stale_that_beats_hands_its_failure_over_as_the_attempt_its_lease_counted(
    world: World,
) -> None:
    # Given a run whose attempt 1 failed on the fast path (past its first beat) and was handed over
    world.handler("t.beats_then_fails", _beats_then_fails)
    job_id = _allow_job(world, "t.beats_then_fails")
    world.deliver()
    assert [n[-3:] for (_, n) in world.machines.started] == ["-a1"]
    # and the workflow re-armed it (FAILED -> PENDING, attempt 1 kept) and sent its retry message
    key = (job_id, SF)
    world.runs.rows[key] = world.runs.rows[key].model_copy(update={"status": RunStatus.PENDING})
    world.queue.send([Outgoing(RunMessage(job_id=job_id, scheduled_for=SF, guard=False), 0)])
    # When a worker whose eventually consistent read still answers "no row" takes the retry, and its
    # handler beats (the lease row written: PENDING at attempt 1 -> RUNNING at attempt 2) and fails
    world.svc.worker.runs = StaleRuns(world.runs)  # type: ignore[assignment]
    world.deliver()
    # Then the failure is handed over as attempt 2, the row's: a new workflow execution. Before, the
    # worker handed it over as the attempt its stale read suggested (1), a no-op by name, and the run
    # stayed FAILED for good (tests/sim seed 1260; seed 1 was the same without the beat)
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 2
    assert row.attempts[-1].attempt == 2
    names = sorted(n for (_, n) in world.machines.started)
    assert len(names) == 2 and names[1].endswith("-a2"), names


def test_a_copy_whose_twin_failed_and_was_re_armed_before_its_first_beat_hands_over_the_next_attempt(
    world: World,
) -> None:
    # Given a run on the fast path (no row read: attempt 1), whose handler, before its first
    # beat, outlives a twin delivery of the same run: the twin recorded attempt 1 FAILED, and the
    # failure workflow re-armed the row (PENDING, attempt 1) and queued the retry
    job_id = ""

    def handler(payload: dict[str, Any], ctx: RunContext) -> None:
        now = world.clock.now()
        twin = AttemptEnd(attempt=1, started_at=now, finished_at=now, error=("RuntimeError", "twin"))
        assert world.runs.record_unleased(
            job_id, SF, worker="twin", end=twin, create=NewRun(job_id, "t", SF)
        ).applied
        assert world.runs.rearm(job_id, SF, attempt=1)
        _beats_then_fails(payload, ctx)

    world.handler("t.outlives_its_twin", handler)
    job_id = _allow_job(world, "t.outlives_its_twin")
    # When its first beat writes the lease row over the re-armed one (RUNNING, attempt 2) and it fails
    world.deliver()
    # Then its failure is handed over as attempt 2, the row's. Before, as attempt 1, the twin's
    # execution by name: a no-op, the retry message met the row held and was dropped, and the run
    # stayed FAILED for good (tests/sim seed 49)
    row = world.runs.get(job_id, SF)
    assert row is not None and row.status == RunStatus.FAILED and row.attempt == 2
    assert [n[-3:] for (_, n) in world.machines.started] == ["-a2"]
