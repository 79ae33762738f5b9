"""Concurrency keys on the worker (services/run.py: acquire before the handler, release at the outcome)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.limits import Concurrency
from jobsched.domain.status import RunStatus
from jobsched.ports import Crash
from jobsched.services.run import Delivery, Outcome
from tests.unit.services.conftest import T0, World


def keyed_one_off(
    world: World,
    *,
    key: str = "db",
    limit: int = 1,
    seconds: float = 5,
    handler: str = "demo.echo",
    tenant: str = "t",
) -> str:
    request = CreateJobRequest(
        type="one_off",
        handler=handler,
        run_at=T0 + timedelta(seconds=seconds),
        concurrency=Concurrency(key=key, limit=limit),
    )
    return world.svc.job_service.submit(request, tenant=tenant, idempotency_key=None).job_id


def occupy(
    world: World, *, tenant: str = "t", key: str = "db", holder: str = "other", seconds: float = 600
) -> None:
    """Another run holds a slot of (tenant, key) for `seconds`."""
    assert world.svc.worker.limits is not None
    now = world.clock.now()
    assert world.svc.worker.limits.acquire(
        tenant, key, holder=holder, limit=1, until=now + timedelta(seconds=seconds), now=now
    )


def holders(world: World, *, tenant: str = "t", key: str = "db") -> dict[str, Any]:
    assert world.svc.worker.limits is not None
    return world.svc.worker.limits.holders(tenant, key, now=world.clock.now())


def test_a_run_whose_key_is_full_waits_in_a_delayed_copy_and_its_history_says_so(world: World) -> None:
    # Given a one-off with key "db" (limit 1), and another run holding the key's only slot
    job_id = keyed_one_off(world)
    occupy(world)
    # When its second comes
    world.clock.advance(5)
    # Then it does not run: it waits, its message acknowledged and a copy of it sent, delayed 1 s
    assert world.deliver() == [Outcome.WAITING]
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == RunStatus.PENDING and run.attempt == 0
    assert run.reason == "waited for concurrency key 'db' (limit 1)"
    assert world.deliver() == []  # the copy is not visible yet
    # And once the holder is done, the copy runs it; the history keeps the wait
    assert world.svc.worker.limits is not None
    world.svc.worker.limits.release("t", "db", holder="other")
    world.clock.advance(1)
    assert world.deliver() == [Outcome.SUCCEEDED]
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run is not None and run.status == RunStatus.SUCCEEDED and run.attempt == 1
    assert run.reason == "waited for concurrency key 'db' (limit 1)"
    assert holders(world) == {}


def test_a_waiting_run_looks_again_after_a_doubling_delay_capped_at_30_seconds(world: World) -> None:
    # Given a keyed run whose key stays full
    keyed_one_off(world)
    occupy(world, seconds=3600)
    world.clock.advance(5)
    # When it keeps finding the key full, each copy is delayed twice as long as the one before, to 30 s
    delays = []
    for _ in range(7):
        assert world.deliver() == [Outcome.WAITING]
        [(visible_at, _body)] = world.queue.peek()  # the one copy left: the original was acknowledged
        delays.append(round((visible_at - world.clock.now()).total_seconds()))
        world.clock.set(visible_at)
    assert delays == [1, 2, 4, 8, 16, 30, 30]


def test_a_slot_is_released_at_a_failed_outcome_too(world: World) -> None:
    # Given a keyed run whose handler fails
    keyed_one_off(world, handler="demo.fail")
    world.clock.advance(5)
    # When it runs and fails
    assert world.deliver() == [Outcome.FAILED]
    # Then the key has no holder left
    assert holders(world) == {}


def test_a_dead_holders_slot_is_freed_when_its_hold_lapses(world: World) -> None:
    # Given two runs of key "db" (limit 1): the first one's worker dies inside its handler
    def die(payload: dict[str, Any], ctx: Any) -> None:
        raise Crash("worker killed mid-run")

    world.handler("unit.die", die)
    first = keyed_one_off(world, handler="unit.die")
    second = keyed_one_off(world, seconds=6)
    world.clock.advance(5)
    [m] = world.queue.receive()
    with pytest.raises(Crash):
        world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body))
    assert len(holders(world)) == 1  # the dead worker released nothing
    # When the second run comes while the dead holder's hold is live, it waits
    world.clock.advance(1)
    assert world.deliver() == [Outcome.WAITING]
    # Then, once the hold lapses (nothing renews it), the second run gets the slot
    world.clock.advance(world.svc.worker.hold_seconds())
    outcomes = world.deliver()
    assert Outcome.SUCCEEDED in outcomes
    run = world.runs.get(second, T0 + timedelta(seconds=6))
    assert run is not None and run.status == RunStatus.SUCCEEDED
    assert first != second


def test_the_heartbeat_renews_the_key_slot_of_a_long_run(world: World) -> None:
    # Given a keyed run whose handler runs longer than the hold, beating as it goes
    seen: list[int] = []
    hold = world.svc.worker.hold_seconds()

    def long_run(payload: dict[str, Any], ctx: Any) -> None:
        for _ in range(3):
            world.clock.advance(hold - 1)
            ctx.heartbeat()
        seen.append(len(holders(world)))

    world.handler("unit.long", long_run)
    keyed_one_off(world, handler="unit.long")
    world.clock.advance(5)
    # When it runs past three holds' length
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then its slot was live throughout (renewed), and freed at the end
    assert seen == [1]
    assert holders(world) == {}


def test_keys_are_scoped_to_the_tenant(world: World) -> None:
    # Given tenant t's key "db" is full
    occupy(world, tenant="t")
    # When tenant u's job with a key of the same name runs
    keyed_one_off(world, tenant="u")
    world.clock.advance(5)
    # Then it runs: u's "db" is not t's
    assert world.deliver() == [Outcome.SUCCEEDED]


def test_a_job_without_concurrency_never_touches_the_limit_store(world: World) -> None:
    # Given a limit store that fails every call
    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"limit store called: {name}")

    world.svc.worker.limits = Untouchable()  # type: ignore[assignment]
    request = CreateJobRequest(type="one_off", handler="demo.echo", run_at=T0 + timedelta(seconds=5))
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    # When its run comes
    world.clock.advance(5)
    # Then it runs without a single call to it
    assert world.deliver() == [Outcome.SUCCEEDED]
    assert world.runs.get(job_id, times.stored(T0 + timedelta(seconds=5))) is not None


def _deliver_twice(world: World) -> list[Outcome]:
    """Every visible message handed to the worker twice (SQS delivers a message more than once at
    times: the same message id), then acknowledged."""
    outcomes = []
    for m in world.queue.receive():
        for _ in range(2):
            outcomes.append(world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body)))
        world.queue.delete(m.receipt_handle)
    return outcomes


def test_a_waiting_copy_of_a_run_that_finished_leaves_no_copy_behind(world: World) -> None:
    # Given an `allow` job with key "db" whose 12:00:10 run waited for the full key twice at once
    # (its message delivered twice), and then ran from one of the copies
    world.handler("test.ok", lambda payload, ctx: {"ok": True})
    request = CreateJobRequest(
        type="recurring",
        handler="test.ok",
        cron_expr="*/10 * * * * *",
        overlap_policy="allow",
        concurrency=Concurrency(key="db", limit=1),
    )
    job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
    occupy(world, seconds=12)
    world.clock.set(T0 + timedelta(seconds=10))
    world.svc.dispatcher.dispatch_all()
    assert _deliver_twice(world) == [Outcome.WAITING, Outcome.WAITING]
    assert world.svc.worker.limits is not None
    world.svc.worker.limits.release("t", "db", holder="other")
    world.clock.advance(2)
    [m, spare] = world.queue.receive()
    assert world.svc.worker.process(Delivery(m.message_id, m.receipt_handle, m.body)) == Outcome.SUCCEEDED
    world.queue.delete(m.receipt_handle)
    run = world.runs.get(job_id, T0 + timedelta(seconds=10))
    assert run is not None and run.status == RunStatus.SUCCEEDED
    # When the other copy meets the key full again (another run holds it)
    occupy(world, seconds=600)
    outcome = world.svc.worker.process(Delivery(spare.message_id, spare.receipt_handle, spare.body))
    world.queue.delete(spare.receipt_handle)
    # Then it is a duplicate: it leaves no copy behind (before, a finished run's copies waited for
    # the key for as long as it stayed full: tests/sim KEY_SEEDS 890)
    assert outcome == Outcome.DUPLICATE
    assert [body for _, body in world.queue.peek() if "12:00:10" in body] == []
