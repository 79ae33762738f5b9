"""Fair draining: a noisy tenant's burst due on one second does not hold up a quiet tenant due on it,
and high runs are delivered before low ones (services/dispatch.py's "Fairness" paragraph)."""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain.models import Job, RunMessage, SchedulePolicy
from jobsched.domain.status import JobStatus
from tests.unit.services.conftest import T0, World

DUE = T0 + timedelta(seconds=30)


def one_off(world: World, job_id: str, tenant: str, priority: str = "normal") -> None:
    """A one-off due at DUE, stored as the API stores it but left for the dispatcher's pass."""
    job = Job(
        job_id=job_id,
        tenant=tenant,
        type="one_off",
        status=JobStatus.SCHEDULED,
        handler="demo.echo",
        payload={},
        run_at=DUE,
        next_run_at=DUE,
        policy=SchedulePolicy(priority=priority),  # type: ignore[arg-type]
        created_at=T0,
        updated_at=T0,
    )
    world.jobs.create_with_idempotency(job, idempotency_key=job_id, request_hash="h", response={}, now=T0)


def delivery_order(world: World) -> list[str]:
    """Job ids in the order the queue delivers them from their second on, ten per receive, second by
    second (a burst over its tenant's max_runs_per_second is spread over the seconds after it)."""
    world.clock.advance((DUE - world.clock.now()).total_seconds())
    order: list[str] = []
    for _ in range(30):
        while batch := world.queue.receive(10):
            order += [RunMessage.model_validate_json(m.body).job_id for m in batch]
        world.clock.advance(1)
    return order


def test_a_quiet_tenant_due_beside_a_noisy_burst_is_delivered_among_the_first(world: World) -> None:
    # Given a noisy tenant's 250 one-offs due on one second, and a quiet tenant's 3 written after them
    for i in range(250):
        one_off(world, f"noisy-{i:03}", "noisy")
    for i in range(3):
        one_off(world, f"quiet-{i}", "quiet")
    # When a dispatcher pass hands them over and they come due
    world.svc.dispatcher.dispatch_all()
    order = delivery_order(world)
    # Then every run is delivered once, and the quiet tenant's within the first receive
    assert len(order) == 253 and len(set(order)) == 253
    assert {job for job in order[:10] if job.startswith("quiet")} == {"quiet-0", "quiet-1", "quiet-2"}


def test_without_fair_dispatch_the_quiet_tenant_waits_behind_the_burst(world: World) -> None:
    # Given the same burst, with fairness switched off (the bench's baseline)
    world.svc.dispatcher.settings = world.svc.dispatcher.settings.model_copy(update={"fair_dispatch": False})
    for i in range(250):
        one_off(world, f"noisy-{i:03}", "noisy")
    for i in range(3):
        one_off(world, f"quiet-{i}", "quiet")
    # When handed over and due, then the quiet tenant's runs are not all in the first receive
    world.svc.dispatcher.dispatch_all()
    order = delivery_order(world)
    assert len(order) == 253
    assert not {"quiet-0", "quiet-1", "quiet-2"} <= set(order[:10])


def test_high_runs_due_beside_low_ones_are_delivered_first(world: World) -> None:
    # Given one tenant's 200 low one-offs and 4 high ones, due on one second, the high ones written last
    for i in range(200):
        one_off(world, f"low-{i:03}", "t", "low")
    for i in range(4):
        one_off(world, f"high-{i}", "t", "high")
    # When handed over and due, then the 4 high runs are the first delivered
    world.svc.dispatcher.dispatch_all()
    order = delivery_order(world)
    assert sorted(order[:4]) == ["high-0", "high-1", "high-2", "high-3"]
    assert len(order) == 204
