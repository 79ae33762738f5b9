"""The capacity model (pure): shards, quotas, concurrency and the bill from per-run counts and AWS limits."""

from __future__ import annotations

import math

import pytest

from jobsched.planning.inputs import KIB, ItemSizes, Latencies, Limits, PerRunCosts, RunCost, Workload
from jobsched.planning.model import lane_last_start_s, slot_cycle_s
from jobsched.planning.plan import Check, Plan, plan

SEEDS = Workload(jobs=100_000_000, burst=2_000_000, window_s=60)


def check(p: Plan, name: str) -> Check:
    [found] = [c for c in p.checks if c.name.startswith(name)]
    return found


def test_the_interim_per_run_counts_are_the_defaults() -> None:
    recurring = PerRunCosts()["recurring"]
    # 0.2 stamps (1 WRU on the job, 2 on the index: a key move) + the overlap hold + 1 history write
    assert recurring.dynamodb_wru == pytest.approx(0.2 + 0.4 + 1.0 + 1.0)
    assert recurring.hold_wru == 1.0  # `skip`, the default: a compare-and-set on the job item
    assert recurring.jobs_rru == 0.0  # the hold returns the job
    assert recurring.runs_rru == 0.5  # the run row, eventually consistent
    assert recurring.sqs_requests == pytest.approx(0.3)
    assert recurring.lambda_invocations == pytest.approx(0.1)
    assert recurring.worker_ms == pytest.approx(15.0)  # 0.00375 GB-s at 256 MB
    assert recurring.sfn_transitions == 0.0
    # a burst job has one tick in the window: its stamp is not amortized
    burst = PerRunCosts()["burst"]
    assert (burst.job_writes, burst.jobs_wru, burst.due_index_wru) == pytest.approx((1.0, 1.0, 2.0))
    assert burst.calls["DynamoDB.UpdateItem"] == pytest.approx(3.0)  # the stamp, the hold, the outcome
    assert burst.hold_wru == recurring.hold_wru
    assert burst.runs_wru == recurring.runs_wru


def test_it_overlays_what_the_benchmark_measured_and_keeps_the_defaults_for_the_rest() -> None:
    costs = PerRunCosts.from_mapping(
        {
            "kinds": {
                "recurring": {
                    "dynamodb_wru": 5.2,  # twice the default total: every table's share doubles
                    "sqs_requests": 0.5,
                    "calls": {"DynamoDB.UpdateItem": 0.3},
                },
                "one_off": {"lambda_gb_seconds": 0.01},
            }
        },
        source="bench/results/costs.json",
    )
    recurring = costs["recurring"]
    assert (
        recurring.jobs_wru,
        recurring.due_index_wru,
        recurring.hold_wru,
        recurring.runs_wru,
    ) == pytest.approx((0.4, 0.8, 2.0, 2.0))
    assert recurring.sqs_requests == 0.5
    assert recurring.runs_rru == 0.5  # not measured: the default
    assert recurring.calls["DynamoDB.UpdateItem"] == 0.3
    assert recurring.calls["DynamoDB.GetItem"] == 1.0
    # the burst kind follows the measured recurring run, one stamp per run
    assert costs["burst"].jobs_wru == pytest.approx(2.0)
    assert costs["burst"].sqs_requests == 0.5
    assert costs["one_off"].lambda_gb_seconds == 0.01
    assert costs.source == "bench/results/costs.json"


def test_it_takes_the_due_index_share_and_the_hourly_kind_from_the_benchmark_when_it_has_them() -> None:
    costs = PerRunCosts.from_mapping(
        {
            "kinds": {
                "recurring": {
                    "dynamodb_wru": 2.0,
                    "wru_breakdown": {"table": 1.5, "index:due": 0.5},
                    "runs": 20,
                    "title": "every minute",
                    "seconds_per_run": {"worker": 0.01},
                },
                "recurring_hourly": {"dynamodb_wru": 4.0, "job_writes": 1.0},
            }
        }
    )
    recurring = costs["recurring"]
    assert recurring.due_index_wru == pytest.approx(0.5)
    # the rest, 1.5, over the stamps, the hold and the history in the defaults' proportion (0.2 : 1 : 1)
    assert (recurring.jobs_wru, recurring.hold_wru, recurring.runs_wru) == pytest.approx(
        (1.5 * 0.2 / 2.2, 1.5 / 2.2, 1.5 / 2.2)
    )
    assert recurring.dynamodb_wru == pytest.approx(2.0)
    # an hourly job has one tick per hand-over window: the burst is made of those
    assert costs["burst"].dynamodb_wru == pytest.approx(4.0)
    assert costs["burst"].job_writes == 1.0


def test_units_by_phase_set_each_table_exactly_holds_on_the_jobs_table_at_run_time() -> None:
    # What `make bench` measures for an every-minute `skip` job: stamps and index moves at dispatch,
    # the hold on the job and the history row when the run starts and ends.
    measured = {
        "dispatch": {"jobs_wru": 0.07, "due_index_wru": 0.14, "due_index_rru": 0.02},
        "run": {"jobs_wru": 1.0, "runs_wru": 1.0, "runs_rru": 0.5},
        "api": {"jobs_wru": 9.0},  # not planned: jobs are created outside the burst
    }
    costs = PerRunCosts.from_mapping(
        {"kinds": {"recurring": {"dynamodb_wru": 2.21, "units": measured}, "burst": {"units": measured}}}
    )
    recurring = costs["recurring"]
    assert (recurring.job_writes, recurring.jobs_wru, recurring.due_index_wru) == pytest.approx(
        (0.07, 0.07, 0.14)
    )
    assert (recurring.hold_wru, recurring.runs_wru) == (1.0, 1.0)
    assert (recurring.jobs_rru, recurring.runs_rru, recurring.due_index_rru) == (0.0, 0.5, 0.02)
    with pytest.raises(ValueError, match=r"units\.run\.runs_wru"):
        PerRunCosts.from_mapping({"kinds": {"recurring": {"units": {"run": {"runs_wru": "one"}}}}})

    # The burst's holds land on the jobs table while it drains: planned and checked there
    p = plan(SEEDS, per_run=costs)
    assert p.rates["jobs_wcu_drain"] == pytest.approx(2_000_000 / 54 * 1.0 + 10_000 * (1.0 + 0.07))
    assert check(p, "jobs table writes during the drain").value == p.rates["jobs_wcu_drain"]
    assert p.rates["runs_rcu_drain"] == pytest.approx((2_000_000 / 54 + 10_000) * 0.5)
    assert p.fleet.table_quota * p.quota_utilization >= p.rates["jobs_wcu_drain"]


def test_it_tolerates_missing_kinds_and_keys_and_refuses_what_is_not_a_count() -> None:
    assert PerRunCosts.from_mapping({}).kinds == PerRunCosts().kinds
    assert PerRunCosts.from_mapping({"kinds": {"recurring": {}}}).kinds == PerRunCosts().kinds
    with pytest.raises(ValueError, match=r"kinds\.recurring\.sqs_requests"):
        PerRunCosts.from_mapping({"kinds": {"recurring": {"sqs_requests": "many"}}})
    with pytest.raises(ValueError, match="non-negative"):
        PerRunCosts.from_mapping({"kinds": {"recurring": {"calls": {"SQS.SendMessage": -1}}}})
    with pytest.raises(ValueError, match="object"):
        PerRunCosts.from_mapping({"kinds": []})


def test_it_recommends_enough_shards_that_no_due_index_partition_exceeds_1000_wcu_at_the_seeds_scale() -> (
    None
):
    p = plan(SEEDS)

    assert p.ok
    partition = check(p, "due-index partition writes")
    assert partition.status == "ok"
    assert partition.value <= 1_000 * p.headroom
    assert p.rates["partition_wcu"] <= 1_000 * p.headroom
    # the busiest shard's deletes, dispatched within the budget, stay under the limit
    assert p.rates["busiest_shard_entries"] / p.rates["dispatch_budget_s"] <= 1_000
    assert p.rates["shard_dispatch_s"] <= p.rates["dispatch_budget_s"]
    assert p.fleet.shards % 8 == 0
    assert p.rates["partition_rcu"] < 3_000


def test_a_plan_with_too_few_shards_is_over_the_partition_limit() -> None:
    p = plan(SEEDS, shards=4)

    assert not p.ok
    assert check(p, "due-index partition writes").status == "over"
    assert check(p, "burst dispatched before it is due").status == "over"


def test_it_lengthens_the_lookahead_until_the_burst_dispatch_fits_the_table_quota() -> None:
    p = plan(SEEDS)
    assert p.fleet.lookahead_s > 90
    assert p.rates["due_index_wcu_dispatch"] <= p.fleet.table_quota * p.quota_utilization
    assert p.fleet.lookahead_s <= Limits().sqs_max_delay_s

    # pinned at 90 s, the same burst needs a much larger quota (a key move is 2 index writes)
    pinned = plan(SEEDS, lookahead_s=90)
    assert pinned.fleet.lookahead_s == 90
    assert pinned.fleet.table_quota > 3 * p.fleet.table_quota
    assert check(pinned, "due index (GSI) writes").status == "raise"
    assert pinned.fleet.shards > p.fleet.shards


def test_the_seeds_burst_needs_more_than_the_default_table_quota_and_says_so() -> None:
    p = plan(SEEDS)
    # 2M / (60 s x 0.9) + 10K steady runs/s, one history write and one GetItem each
    assert p.rates["runs_wcu_drain"] == pytest.approx(2_000_000 / 54 + 10_000)
    assert p.fleet.table_quota > 40_000
    assert check(p, "runs table writes during the drain").status == "raise"
    assert any("table-level on-demand quota" in change for change in p.changes)


def test_it_takes_provisioned_pollers_when_the_standard_ramp_cannot_drain_the_burst_in_time() -> None:
    p = plan(SEEDS)
    assert p.rates["standard_mode_drain_s"] > 60  # +300 concurrency a minute from the steady level
    assert p.fleet.esm_mode == "provisioned"
    assert p.fleet.min_pollers * 10 >= p.fleet.worker_concurrency
    assert p.rates["drain_s"] <= 60
    assert p.fleet.worker_concurrency == math.ceil(
        p.rates["worker_runs_per_s"] / p.rates["runs_per_s_per_slot"]
    )

    small = plan(Workload(jobs=1_000_000, burst=20_000, window_s=60))
    assert small.fleet.esm_mode == "standard"
    assert small.fleet.min_pollers == 0

    forced = plan(SEEDS, esm_mode="standard")
    assert check(forced, "burst + steady runs due meanwhile drained").status == "over"


def test_it_counts_workers_and_dispatchers_against_the_account_concurrency() -> None:
    p = plan(SEEDS, concurrency=1_200)
    assert p.rates["lambda_concurrency_needed"] == 1_200 + p.fleet.shards
    assert p.fleet.account_concurrency >= 1_200 + p.fleet.shards
    assert check(p, "Lambda account concurrency").status == "raise"
    assert any("account concurrency" in change for change in p.changes)


def test_the_bill_prices_every_unit_at_the_design_prices() -> None:
    wl = Workload(jobs=1_000_000, burst=0, window_s=60, steady_rate=1_000)
    p = plan(wl, shards=8)
    lines = {line.item: line for line in p.costs}
    runs = 1_000 * 86_400
    passes, shards = 86_400 / 60, 8
    wru = lines["DynamoDB write request units"]
    assert wru.units_per_day == pytest.approx(runs * 2.6 + passes * shards * 2)  # + lease writes
    assert wru.usd_per_day == pytest.approx(wru.units_per_day / 1e6 * 0.625)
    sqs = lines["SQS requests"]
    assert sqs.usd_per_day == pytest.approx(runs * 0.3 / 1e6 * 0.40)
    invocations = lines["Lambda requests"]
    assert invocations.units_per_day == pytest.approx(runs * 0.1 + passes * shards)
    assert lines["Step Functions transitions"].usd_per_day == 0
    assert p.usd_per_day == pytest.approx(sum(line.usd_per_day for line in p.costs))


def test_measured_counts_change_the_bill() -> None:
    doubled = PerRunCosts.from_mapping({"kinds": {"recurring": {"sqs_requests": 0.6}}})
    wl = Workload(jobs=1_000_000, burst=0, window_s=60, steady_rate=1_000)
    before = {line.item: line.usd_per_day for line in plan(wl).costs}
    after = {line.item: line.usd_per_day for line in plan(wl, per_run=doubled).costs}
    assert after["SQS requests"] == pytest.approx(2 * before["SQS requests"])
    assert after["DynamoDB write request units"] == before["DynamoDB write request units"]


def test_it_says_what_a_p99_target_would_take_for_a_same_second_herd() -> None:
    p = plan(SEEDS)
    one, five = p.targets
    assert one.p99_s == 1.0 and not one.feasible
    assert one.runs_per_s == pytest.approx(0.99 * 2_000_000 + 10_000)
    assert five.worker_concurrency < one.worker_concurrency
    # a fleet that keeps up with the burst spread over this long starts it on time
    assert 50 < p.rates["spread_to_keep_up_s"] < 60

    tiny = plan(Workload(jobs=100_000, burst=5_000, window_s=60), shards=8)
    assert tiny.targets[1].feasible


def test_an_index_entry_over_1_kb_costs_more_partition_units() -> None:
    big = plan(SEEDS, sizes=ItemSizes(due_entry=2 * KIB))
    assert big.rates["partition_wcu"] == pytest.approx(2 * big.rates["shard_rate"])
    assert big.fleet.shards >= plan(SEEDS).fleet.shards


def test_run_cost_of_a_measured_run_without_stamps_stays_as_it_is() -> None:
    cost = RunCost(job_writes=0.0, jobs_wru=0.0, due_index_wru=0.0)
    assert cost.unamortized() is cost


def test_it_refuses_a_workload_or_fleet_out_of_range() -> None:
    with pytest.raises(ValueError, match="window"):
        plan(Workload(jobs=1, burst=1, window_s=0))
    with pytest.raises(ValueError, match="shards, concurrency"):
        plan(SEEDS, shards=0, concurrency=0)


def test_a_worker_running_its_batch_at_once_cycles_faster_than_one_run_after_another() -> None:
    cost, lat = RunCost(), Latencies()
    calls_ms = (2 * lat.sqs_ms + lat.invoke_ms) * lat.mean_factor
    one_by_one = slot_cycle_s(cost, lat, 10, threads=1)
    at_once = slot_cycle_s(cost, lat, 10, threads=10)
    # one after another: ten mean run times; at once: one round as slow as the slowest of ten
    assert one_by_one * 1000 == pytest.approx(calls_ms + 10 * cost.worker_ms)
    assert at_once * 1000 == pytest.approx(calls_ms + lat.round_ms(cost.worker_ms / lat.mean_factor, 10))
    assert cost.worker_ms < (at_once * 1000 - calls_ms) < 10 * cost.worker_ms
    # so the same burst needs fewer workers
    assert (
        plan(SEEDS, worker_threads=10).fleet.worker_concurrency
        < plan(SEEDS, worker_threads=1).fleet.worker_concurrency
    )
    with pytest.raises(ValueError, match="worker threads"):
        plan(SEEDS, worker_threads=0)


def test_the_burst_alone_drains_within_the_default_quota_at_the_rate_it_allows() -> None:
    # 2M due at midnight and no other load: at 90% of 40,000 units/s the history writes (and the
    # overlap holds) allow 36,000 runs/s, which drains 2M in 55.6 s, inside the 60 s window.
    alone = plan(Workload(jobs=100_000_000, burst=2_000_000, window_s=60, steady_rate=0))
    assert alone.fleet.table_quota == 40_000
    assert alone.rates["burst_runs_per_s_needed"] == pytest.approx(36_000)
    assert alone.rates["runs_wcu_drain"] == pytest.approx(36_000)
    assert alone.rates["jobs_wcu_drain"] == pytest.approx(36_000)
    assert all(c.status == "ok" for c in alone.checks), [c for c in alone.checks if c.status != "ok"]
    assert any("what 90% of the table quota allows: 55.6 s" in change for change in alone.changes)
    # With the seeds' steady 10K runs/s on top, one history write per run is 43,333 units/s at the
    # least (2M / 60 s + 10K): over 40,000 whatever the margins, so the quota must be raised.
    seeds = plan(SEEDS)
    assert 2_000_000 / 60 + 10_000 > 40_000
    assert seeds.fleet.table_quota > 40_000
    assert check(seeds, "runs table writes during the drain").status == "raise"


def test_the_model_stops_a_paced_pass_where_the_dispatcher_does() -> None:
    from jobsched.planning import model
    from jobsched.services import dispatch

    assert model.PASS_SHARE_OF_LEASE == dispatch.PASS_SHARE_OF_LEASE
    # and never asks a pass for more calls in flight than the dispatcher keeps
    assert dispatch.Dispatcher.io_workers == model.DISPATCHER_IO_WORKERS
    assert plan(SEEDS).fleet.dispatcher_parallelism <= dispatch.Dispatcher.io_workers


@pytest.mark.parametrize(
    ("lane_runs", "lane", "fair", "expected_s"),
    [
        (10, "tenant", False, 101.0),  # arrival order: anywhere in the burst, the last one at its end
        (10, "tenant", True, 2.0),  # fair queue, two groups: turn for turn, done after 2 x 10 runs
        (2_000, "tenant", True, 300.0),  # a lane bigger than the burst: it ends last, with everything
        (10, "priority", True, 1.0),  # high first: its own runs only
    ],
)
def test_a_lanes_last_start_by_the_model(lane_runs: int, lane: str, fair: bool, expected_s: float) -> None:
    # Given a burst of 1,000 runs and a fleet starting 10 runs a second, with a lane due beside it
    assert lane_last_start_s(lane_runs, 1_000, 10.0, lane=lane, fair=fair) == pytest.approx(expected_s)
