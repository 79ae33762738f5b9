"""The planted bugs (tests/sim/mutants.py): entering each changes what the real code does, in a small
direct scenario on the fakes; leaving it restores the original behaviour."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from jobsched.domain import times
from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.records import AttemptEnd, NewRun
from jobsched.domain.status import RunStatus
from jobsched.errors import StoreUnreachable
from jobsched.ports import Crash
from jobsched.services.run import Outcome
from tests.sim import mutants
from tests.sim.test_workflows import T0, World, new_world
from tests.support import CrashAt

T = TypeVar("T")


def before_during_after(mutant: Callable[[], object], scenario: Callable[[World], T]) -> tuple[T, T, T]:
    """The scenario's answer in a fresh world without the mutant, with it, and after leaving it."""
    plain = scenario(new_world())
    with mutant():  # type: ignore[attr-defined]
        planted = scenario(new_world())
    return plain, planted, scenario(new_world())


def test_stamp_before_send_loses_the_tick_of_a_dispatcher_that_dies_after_its_stamp() -> None:
    # Given one-offs due in 10 minutes, and a dispatcher that dies right after its stamp
    def scenario(world: World) -> tuple[bool, int]:
        world.svc.dispatcher.crash = CrashAt("dispatch.after_stamp", times=99)
        job_id = world.one_off("demo.echo", run_at=world.clock.now() + timedelta(minutes=10))
        world.clock.advance(10 * 60 - 30)
        for shard in range(world.svc.settings.shard_count):
            with contextlib.suppress(Crash):
                world.svc.dispatcher.dispatch_shard(shard)
        return world.job(job_id).next_run_at is None, len(world.messages_for(job_id))

    # When a pass hands it over and dies / Then: sent before the stamp; with the mutant, stamped, never sent
    assert before_during_after(mutants.stamp_before_send, scenario) == ((True, 1), (True, 0), (True, 1))


def test_unconditional_record_lets_a_duplicate_overwrite_a_recorded_run() -> None:
    # Given a run one delivery recorded SUCCEEDED on the fast path
    def scenario(world: World) -> tuple[bool, int]:
        job_id = world.one_off("demo.echo", run_at=T0 + timedelta(days=1))
        sf = times.stored(T0 + timedelta(days=1))
        created = NewRun(job_id, "t", sf, "scheduled")
        now = world.clock.now()
        end = AttemptEnd(attempt=1, started_at=now, finished_at=now, result="null", error=None)
        assert world.runs.record_unleased(job_id, sf, worker="w1", end=end, create=created).applied
        # When a duplicate delivery that ran at the same time records its own outcome
        failed = AttemptEnd(attempt=1, started_at=now, finished_at=now, result=None, error=("E", "dup"))
        done = world.runs.record_unleased(job_id, sf, worker="w2", end=failed, create=created)
        row = world.runs.get(job_id, sf)
        assert row is not None
        return done.applied, len(row.attempts)

    # Then it is refused; with the mutant it overwrites the row and the history shows two attempts
    assert before_during_after(mutants.unconditional_record, scenario) == ((False, 1), (True, 2), (False, 1))


def test_double_count_releases_a_dependant_before_its_other_upstream_ran() -> None:
    # Given c depends on a (succeeded) and b (due in an hour)
    def scenario(world: World) -> RunStatus | None:
        a = world.one_off("demo.echo", run_at=world.clock.now())
        b = world.one_off("demo.echo", run_at=world.clock.now() + timedelta(hours=1))
        c = world.dependant(a, b)
        world.deliver()
        world.loop.run()
        # When a's run is signalled a second time (a re-run of its DAG workflow)
        again = world.run_of(a).model_copy(update={"replays": 7})
        world.svc.dag.signal_success(world.job(a), again)
        world.loop.run()
        rows = world.runs.recent(c, limit=5)
        return rows[0].status if rows else None

    # Then c still waits; with the mutant the second count releases it early
    assert before_during_after(mutants.double_count, scenario) == (None, RunStatus.PENDING, None)


def test_early_hold_lapse_lets_a_second_tick_take_the_slot_of_a_run_still_running() -> None:
    request = CreateJobRequest(
        type="recurring", handler="demo.echo", cron_expr="* * * * *", overlap_policy="skip"
    )

    def scenario(world: World) -> bool:
        job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
        worker, lease = world.svc.worker, world.svc.settings.lease_seconds
        # Given run A holds the slot as the worker takes it, and heartbeats every lease/3
        now = world.clock.now()
        until = now + timedelta(seconds=worker.hold_seconds())
        held, _ = world.jobs.hold_and_read(job_id, run="A", message="m-a", until=until, now=now)
        assert held
        for _ in range(2):
            world.clock.advance(lease / 3)
            world.jobs.extend_hold(
                job_id, run="A", until=world.clock.now() + timedelta(seconds=worker.hold_seconds())
            )
        # When the next tick B tries to take the slot while A still runs
        now = world.clock.now()
        return world.jobs.hold_job(
            job_id, run="B", message="m-b", until=now + timedelta(seconds=60), now=now, was_buffered=False
        )

    # Then it is refused; with the mutant A's hold has lapsed and B starts beside it
    assert before_during_after(mutants.early_hold_lapse, scenario) == (False, True, False)


def test_skip_on_pause_records_a_handed_over_tick_skipped_instead_of_leaving_it_to_the_resume() -> None:
    def scenario(world: World) -> tuple[Outcome | str, str | None, RunStatus | None]:
        # Given a minutely job (catch-up "all") whose next tick was handed over, then the job paused
        request = CreateJobRequest(
            type="recurring", handler="demo.echo", cron_expr="* * * * *", catchup="all"
        )
        job_id = world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id
        [(tick, _)] = world.queue.peek()  # handed over at creation: due in a minute
        world.clock.advance(5)
        world.svc.schedule.pause(job_id, tenant="t")
        # When the tick comes due during the pause
        world.clock.set(tick)
        [outcome] = world.deliver()
        row = world.runs.get(job_id, tick)
        reason = row.reason if row else None
        # and the job is resumed
        world.clock.advance(30)
        world.svc.schedule.resume(job_id, tenant="t")
        world.svc.dispatcher.dispatch_all()
        world.deliver()
        after = world.runs.get(job_id, tick)
        world.svc.schedule.pause(job_id, tenant="t")  # quiet for the next round
        world.clock.advance(120)
        world.deliver()
        return outcome, reason, after.status if after else None

    plain, planted, restored = before_during_after(mutants.skip_on_pause, scenario)
    # Then the worker leaves it (nothing written) and the resume runs it by its catch-up policy;
    # with the mutant it is SKIPPED "paused" and never runs
    assert plain == (Outcome.PAUSED, None, RunStatus.SUCCEEDED)
    assert planted == (Outcome.SKIPPED, "paused", RunStatus.SKIPPED)
    assert restored == plain


def test_every_mutant_is_listed_for_the_simulator_by_name() -> None:
    assert set(mutants.MUTANTS) == {
        "stamp_before_send",
        "unconditional_record",
        "double_count",
        "early_hold_lapse",
        "skip_on_pause",
    }


@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_leaving_a_mutant_restores_every_patched_attribute(name: str) -> None:
    from jobsched.adapters.memory import MemoryJobStore, MemoryRunStore
    from jobsched.services.dispatch import Dispatcher
    from jobsched.services.run import Worker

    classes = (Dispatcher, Worker, MemoryJobStore, MemoryRunStore)
    before = [dict(vars(c)) for c in classes]
    with mutants.MUTANTS[name]():
        assert [dict(vars(c)) for c in classes] != before
    assert [dict(vars(c)) for c in classes] == before


# -- the simulator finds each planted bug ---------------------------------------------------------------
# The violations (tests/sim/checks.py) each bug must show. A seed finds a mutant when its schedule with
# the mutant shows one of them and the same seed's schedule without it shows none.
SIGNATURES: dict[str, re.Pattern[str]] = {
    "stamp_before_send": re.compile(r"was due and is missing|one-off never ran|one-off ended PENDING"),
    "unconditional_record": re.compile(r"recorded attempt \d+ twice"),
    "double_count": re.compile(
        r"dependant ran before upstream|dependant fired although|more than one period"
    ),
    "early_hold_lapse": re.compile(r"overlapped under overlap policy"),
    "skip_on_pause": re.compile(r"SKIPPED 'paused'"),
}
# Measured over seeds 1.. on this branch: each of the first four was found by seed 1 (and again by most
# of seeds 2, 3); double_count, at WORKFLOW_TIMEOUT_RATE, first by seed 11 (then 15, 23, 25, 29, 30, 31
# of 1..31; none of 1..51 at the simulator's own 1%). A bound is a few times the first finding.
# Since the simulator plays long handlers as tasks of their own and the fixes of this stop,
# early_hold_lapse is first found by seed 9 (python -m tests.sim --seeds 0 --mutants), seed 9 left
# out below: its bound is 30. Since the quiesce stops the client's planned actions (issue 19, a
# planned resume undid the quiesce's pause) stamp_before_send is first found by seed 7 (a tick of
# the quiesce's minute; early_hold_lapse by seed 7 too): its bound is 15.
BOUNDS: dict[str, int] = {
    "stamp_before_send": 15,
    "unconditional_record": 5,
    "double_count": 40,
    "early_hold_lapse": 30,
    "skip_on_pause": 5,
}
# Seed 9's schedule nests long handlers so deep that the simulator plays it for minutes (seen with and
# without every mutant): left out of the search until the simulator bounds its nesting.
SLOW_SEEDS = frozenset({9})
MINUTES, JOBS = 10.0, 12  # python -m tests.sim's defaults: 10 simulated minutes of load, 12 jobs


# A heavier fault profile where a bug needs a rarer fault: the DAG's Count counts one upstream run twice
# only when its write applied and its answer was lost (Step Functions retries it). At the simulator's
# rate (1% per call, ~4 Counts a schedule) that is one schedule in 25-50; here workflow Tasks time out
# after their write at this rate, in the schedule with the mutant and in the plain one alike.
WORKFLOW_TIMEOUT_RATE: dict[str, float] = {"double_count": 0.25}


@contextlib.contextmanager
def workflow_timeouts(rate: float | None) -> Iterator[None]:
    """The simulated workflows' Tasks time out after their write at `rate` (None: the simulator's own)."""
    from tests.sim import world as sim_world

    original = sim_world._state_machines_factory
    if rate is None:
        yield
        return

    def factory() -> Callable[..., Any] | None:
        made = original()
        if made is None:
            return None

        def build(**kwargs: Any) -> Any:
            faults = kwargs["fault"].__self__  # Faults.step, bound: the schedule's fault switchboard

            def after(step: str) -> None:
                if faults.active and faults.rng.random() < rate:
                    faults.injected["timeout_after_write"] += 1
                    raise StoreUnreachable(f"sim: timeout after sfn:{step} applied")

            kwargs["fault_after"] = after
            return made(**kwargs)

        return build

    sim_world._state_machines_factory = factory  # type: ignore[assignment]
    try:
        yield
    finally:
        sim_world._state_machines_factory = original  # type: ignore[assignment]


def recorded_twice(world: Any) -> list[str]:
    """No effect committed twice: each attempt of a run is in its history once (once per replay series)."""
    bad = []
    for (job_id, sf), row in sorted(world.runs.rows.items()):
        numbers = [a.attempt for a in row.attempts if a.attempt]
        twice = sorted({n for n in numbers if numbers.count(n) > 1 + row.replays})
        if twice:
            bad.append(f"{job_id}: run {sf} recorded attempt {twice[0]} twice")
    return bad


@contextlib.contextmanager
def history_check() -> Iterator[None]:
    """The simulator's checks, and recorded_twice on the same world."""
    from tests.sim import workload

    original = workload.check

    def check(world: Any, accepted: Any, *, load_end: Any) -> list[str]:
        return [*original(world, accepted, load_end=load_end), *recorded_twice(world)]

    workload.check = check  # type: ignore[assignment]
    try:
        yield
    finally:
        workload.check = original  # type: ignore[assignment]


def found_by(mutant: str, seed: int) -> list[str]:
    """The mutant's signature violations in `seed`'s schedule that the plain schedule does not show."""
    from tests.sim.workload import simulate

    signature = SIGNATURES[mutant]
    with workflow_timeouts(WORKFLOW_TIMEOUT_RATE.get(mutant)), history_check():
        with mutants.MUTANTS[mutant]():
            planted = simulate(seed, minutes=MINUTES, scale=JOBS)
        hits = [v for v in planted.violations if signature.search(v)]
        if not hits:
            return []
        plain = simulate(seed, minutes=MINUTES, scale=JOBS)
    return [] if any(signature.search(v) for v in plain.violations) else hits


@pytest.mark.slow
@pytest.mark.parametrize("mutant", sorted(mutants.MUTANTS))
def test_the_simulator_finds_each_planted_bug_within_its_measured_bound_of_seeds(mutant: str) -> None:
    # Given the planted bug / When the simulator runs seeds 1, 2, ... with it
    for seed in range(1, BOUNDS[mutant] + 1):
        if seed in SLOW_SEEDS:
            continue
        hits = found_by(mutant, seed)
        if hits:
            print(f"\n{mutant}: found by seed {seed} ({seed} seeds): {hits[0]}")
            # Then a seed finds it within the bound, and the finding replays exactly from its seed
            assert found_by(mutant, seed) == hits
            return
    pytest.fail(f"{mutant}: no seed of 1..{BOUNDS[mutant]} found it")
