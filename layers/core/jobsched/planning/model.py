"""The timing model the plan and the simulation share: a worker slot's cycle, a dispatcher page and
pass, the dispatch budget a look-ahead leaves, and how fast the standard event-source mapping drains.

Pure functions of the inputs (`inputs.Latencies`, `inputs.RunCost`); no I/O.
"""

from __future__ import annotations

import math

from jobsched.planning.inputs import Latencies, RunCost

# services/dispatch.py's PASS_SHARE_OF_LEASE (this module imports nothing that does I/O; a test
# checks the two agree): a paced pass stops at this share of its lease.
PASS_SHARE_OF_LEASE = 0.9
# services/dispatch.py's Dispatcher.io_workers: the calls a shard pass keeps in flight at most.
DISPATCHER_IO_WORKERS = 16


def slot_cycle_s(
    cost: RunCost, latencies: Latencies, batch: int, handler_ms: float = 0.0, threads: int = 1
) -> float:
    """One worker slot's mean cycle for a full batch: receive, invoke, the runs, delete.

    The worker runs `threads` of its batch at once (JOBSCHED_WORKER_CONCURRENCY), in rounds as slow
    as their slowest run. Call latencies are p50s (their mean is `mean_factor` higher); the per-run
    time comes from measured GB-seconds, already a mean, and is drawn log-normal around it.
    """
    calls = (2 * latencies.sqs_ms + latencies.invoke_ms) * latencies.mean_factor
    median = (cost.worker_ms + handler_ms) / latencies.mean_factor
    return (calls + _rounds_ms(median, batch, max(1, threads), latencies)) / 1000


def _rounds_ms(median_ms: float, calls: int, parallelism: int, latencies: Latencies) -> float:
    total = 0.0
    while calls > 0:
        c = min(parallelism, calls)
        total += latencies.round_ms(median_ms, c)
        calls -= c
    return total


def page_seconds(n: int, stamps_per_run: float, parallelism: int, latencies: Latencies) -> float:
    """A dispatcher page carrying n runs: Query, then sends, then stamps, P calls in flight (each round as
    slow as its slowest call)."""
    query = latencies.round_ms(latencies.dynamodb_ms, 1)
    sends = _rounds_ms(latencies.sqs_ms, math.ceil(n / 10), parallelism, latencies)
    stamps = _rounds_ms(latencies.dynamodb_ms, math.ceil(n * stamps_per_run), parallelism, latencies)
    return (query + sends + stamps) / 1000


def steady_pass_seconds(
    steady_rate: float, stamps_per_run: float, shards: int, fleet_tick_s: int, lookahead_s: int,
    page_size: int, parallelism: int, latencies: Latencies,
) -> float:  # fmt: skip
    """What a shard pass spends on the steady load before the burst's bucket: lease, queries, steady pages.

    A page holds `page_size` due entries; with `stamps_per_run` < 1 each entry carries several runs
    (a job with several ticks in the window), each one sent.
    """
    entries = steady_rate * fleet_tick_s * stamps_per_run / max(1, shards)
    pages = math.ceil(entries / page_size)
    runs_per_page = round(page_size / stamps_per_run) if stamps_per_run > 0 else page_size
    queries = buckets_per_pass(lookahead_s, fleet_tick_s) + 1
    pages_s = pages * page_seconds(runs_per_page, stamps_per_run, parallelism, latencies)
    return pages_s + queries * latencies.dynamodb_ms / 1000


def buckets_per_pass(lookahead_s: int, tick_s: int) -> int:
    """Minute buckets one pass queries per shard: from now - (look-ahead + tick) to now + look-ahead."""
    return (2 * lookahead_s + tick_s) // 60 + 1


def standard_drain_s(
    burst: int, rate: float, start: float, cap: float, per_slot: float, ramp_per_min: float, horizon: float
) -> float:
    """Seconds to drain `burst` runs on top of `rate` steady ones when concurrency ramps from `start`.

    Concurrency grows by ramp_per_min a minute up to `cap` while messages wait; each slot starts
    `per_slot` runs a second. Returns math.inf if not drained within `horizon`.
    """
    done, t, dt = 0.0, 0.0, 0.05
    while t < horizon:
        level = min(cap, start + ramp_per_min * t / 60)
        done += max(0.0, level * per_slot - rate) * dt
        t += dt
        if done >= burst:
            return t
    return math.inf


def dispatch_budget_s(lookahead_s: int, tick_s: int, lease_s: float, steady_pass_s: float) -> float:
    """Seconds a shard can spend on a burst before it is due, in the worst phase of the tick.

    The first pass that sees the burst can start as late as look-ahead - tick before it; every pass
    spends `steady_pass_s` on the steady load first and works at most its lease, then the next tick's
    pass resumes.
    """
    total, before = 0.0, float(lookahead_s - tick_s)
    while before > 0:
        total += max(0.0, min(float(lease_s), before) - steady_pass_s)
        before -= tick_s
    return total


def lane_last_start_s(lane_runs: int, burst: int, rate: float, *, lane: str, fair: bool) -> float:
    """When the last of `lane_runs` runs due with a `burst` starts, the fleet starting `rate` runs a second.

    In arrival order a lane's runs are anywhere in the burst: the last one waits for about all of
    it. Fair: a priority lane goes first (its own runs only); a tenant lane shares the fleet with
    the burst turn for turn (SQS fair queues, two groups), so it is done after twice its own runs,
    or with the burst when it is the bigger one.
    """
    if rate <= 0:
        return math.inf
    if not fair:
        return (lane_runs + burst) / rate
    if lane == "priority":
        return lane_runs / rate
    return min(2 * lane_runs, lane_runs + burst) / rate
