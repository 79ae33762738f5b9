"""The discrete-event simulation of dispatch and workers around a burst: it checks what the plan promises."""

from __future__ import annotations

import dataclasses
import math

import pytest

from jobsched.planning.inputs import Workload
from jobsched.planning.plan import plan
from jobsched.planning.simulate import simulate

SEEDS = Workload(jobs=100_000_000, burst=2_000_000, window_s=60)
# A tenth of the seeds' steady load and a quarter of their burst: the same shape, quicker to simulate.
SMALL = Workload(jobs=10_000_000, burst=500_000, window_s=30)


def test_the_recommended_plan_drains_the_seeds_2m_burst_within_60_s() -> None:
    p = plan(SEEDS)

    result = simulate(p, seed=1)

    print(
        f"\nseeds' burst: drained in {result.drain_s:.1f} s, lateness p50 {result.lateness_p50_s:.2f} s, "
        f"p99 {result.lateness_p99_s:.2f} s, max {result.lateness_max_s:.2f} s"
    )
    assert result.met
    assert result.drain_s <= 60
    # pre-dispatch: every burst message was in SQS before midnight, so lateness is the worker side's
    assert result.dispatch_done_s < 0
    assert result.late_sends == 0
    # one due second: runs start in the order the fleet reaches them, so p99 is most of the drain
    assert 0 < result.lateness_p50_s < result.lateness_p99_s <= result.lateness_max_s <= result.drain_s
    assert result.lateness_p99_s == pytest.approx(0.99 * result.drain_s, rel=0.05)
    # the limits the plan keeps, measured in the busiest second
    assert result.peak_partition_wcu <= 1_000
    assert result.peak_index_wcu <= p.fleet.table_quota
    assert result.peak_runs_wcu <= p.fleet.table_quota
    assert result.peak_concurrency <= p.fleet.worker_concurrency
    assert result.caught_up_s <= 60  # the steady runs that queued behind the burst ran too


def test_too_little_worker_concurrency_does_not_drain_in_time_and_says_so() -> None:
    p = plan(SMALL)
    starved = dataclasses.replace(p.fleet, worker_concurrency=p.fleet.worker_concurrency // 3)

    result = simulate(p, seed=1, fleet=starved, horizon_s=60)

    assert not result.met
    assert not result.drained
    assert result.drain_s == math.inf
    assert result.peak_concurrency <= starved.worker_concurrency
    assert simulate(p, seed=1).met


def test_a_standard_mapping_ramps_too_slowly_for_the_burst() -> None:
    p = plan(SMALL)
    assert p.fleet.esm_mode == "provisioned"

    standard = simulate(p, seed=1, fleet=dataclasses.replace(p.fleet, esm_mode="standard", min_pollers=0))

    assert not standard.met
    assert standard.drain_s > simulate(p, seed=1).drain_s


def test_too_few_shards_send_the_burst_late() -> None:
    p = plan(SMALL, shards=1, lookahead_s=90)
    assert not p.ok

    result = simulate(p, seed=1, horizon_s=60)

    assert result.late_sends > 0
    assert result.dispatch_done_s > 0 or not result.drained
    # the dispatcher is paced, so the partition never takes more than its limit
    assert result.peak_partition_wcu <= 1_000


def test_jitter_spreading_the_burst_starts_it_within_a_second() -> None:
    spread = dataclasses.replace(SMALL, spread_s=SMALL.window_s)
    p = plan(spread)

    result = simulate(p, seed=1)

    assert result.lateness_p99_s <= 1.0
    assert result.late_sends == 0


def test_it_is_deterministic_for_a_seed() -> None:
    p = plan(Workload(jobs=1_000_000, burst=50_000, window_s=30))

    first, again, other = simulate(p, seed=7), simulate(p, seed=7), simulate(p, seed=8)

    assert first == again
    assert other != first
    assert first.met and other.met


def test_without_a_burst_there_is_nothing_to_drain() -> None:
    result = simulate(plan(Workload(jobs=1_000_000, burst=0, window_s=60)), seed=1)
    assert result.met
    assert result.drain_s == 0.0
    assert result.late_sends == 0


@pytest.mark.parametrize("lane", ["tenant", "priority"])
def test_a_lane_due_with_the_burst_waits_behind_it_without_fairness_and_not_with_it(lane: str) -> None:
    # Given the small burst and 50 runs of a quiet tenant (or 50 high runs) due on its second
    p = plan(SMALL)
    # When simulated in arrival order, and with fair hand-over and delivery
    unfair = simulate(p, seed=3, lane_runs=50, lane=lane, fair=False)  # type: ignore[arg-type]
    fair = simulate(p, seed=3, lane_runs=50, lane=lane, fair=True)  # type: ignore[arg-type]
    print(f"\n{lane} lane: p99 {unfair.lane_p99_s:.2f} s in arrival order, {fair.lane_p99_s:.2f} s fair")
    # Then in arrival order the lane's runs sit anywhere in the burst: its p99 is most of the drain;
    # fair, they start within the first second, and the burst drains as fast as before
    assert unfair.lane_p99_s > 0.5 * unfair.drain_s
    assert fair.lane_p99_s < 1.0
    assert fair.drain_s == pytest.approx(unfair.drain_s, rel=0.05)


def test_a_tenant_lane_as_big_as_the_burst_gets_half_the_fleet_and_a_priority_lane_all_of_it() -> None:
    # Given a lane of as many runs as the burst: a second tenant's, or high runs
    p = plan(SMALL)
    tenant = simulate(p, seed=3, lane_runs=SMALL.burst, lane="tenant", fair=True)
    high = simulate(p, seed=3, lane_runs=SMALL.burst, lane="priority", fair=True)
    # Then a tenant lane takes turns with the burst (both end near the drain), a priority lane goes
    # first (it is done in about half the drain)
    assert tenant.lane_p99_s > 0.8 * tenant.drain_s
    assert high.lane_p99_s < 0.65 * high.drain_s


def test_without_a_lane_the_simulation_reports_none() -> None:
    result = simulate(plan(Workload(jobs=1_000_000, burst=10_000, window_s=60)), seed=1)
    assert result.lane_runs == 0 and math.isnan(result.lane_p99_s)
