"""Capacity planning (pure: no I/O): from per-run AWS costs and AWS limits to a fleet and a daily bill.

The model, in the order `plan()` decides (every number it uses is a field of `inputs`, with its source):

1. Worker side. A burst of B runs due on one second must be drained within the window S, with
   `margin` of it kept spare for latency tails: the fleet must start B / (S * margin) burst runs a
   second on top of the steady rate. A worker slot (one Lambda invocation of the SQS event-source
   mapping) cycles ReceiveMessage -> invoke -> `batch` runs, `worker_threads` at a time ->
   DeleteMessageBatch, so worker concurrency = runs per second * cycle / batch. Each started run
   costs its overlap hold (jobs table), its read of the run row and its history write (runs table),
   as `RunCost` has them, so the drain is also bounded by the on-demand per-table quota: when the
   margin-ed rate would need a raised quota but the rate the current one allows still drains within
   the window, the plan drains at that rate instead. The event-source mapping's standard mode adds
   concurrency at 300 a minute from wherever the steady load left it; when that ramp cannot drain
   the burst in time, the plan switches to provisioned mode with enough minimum pollers (10 invokes
   each).
2. Dispatch side. Pre-dispatch hands each tick to SQS up to the look-ahead ahead (DelaySeconds), so
   the burst must be read, sent and stamped before it is due. The first pass that sees it can start
   as late as look-ahead - tick before the due second (the rule's phase is arbitrary), and a paced
   pass works 90% of its shard lease (tick - 5 s), so that is the dispatch budget. Stamping a
   burst job moves its due-index key (a delete on "<burst minute>#<shard>" and a put on its next
   tick's partition), so
   each burst run costs 1 job write + 2 index writes; the index is a GSI with its own per-table
   quota. The look-ahead is lengthened (never past SQS's 900 s delay cap) until the dispatch rate
   fits the quota, then K shards are chosen so the busiest "<minute>#<shard>" partition takes at
   most `headroom` of its 1,000 WCU/s, and the dispatcher's in-flight calls per shard so its
   latency-bound page rate beats the pace it is held to.
3. Cost per day at the DESIGN.md list prices: steady runs plus the bursts, each at its kind's per-run
   counts, plus per-pass overheads (due-index queries, shard-lease writes, dispatcher invocations).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from jobsched.planning.inputs import (
    KIB,
    SECONDS_PER_DAY,
    ItemSizes,
    Latencies,
    Limits,
    PerRunCosts,
    Prices,
    Workload,
)
from jobsched.planning.model import (
    DISPATCHER_IO_WORKERS,
    PASS_SHARE_OF_LEASE,
    buckets_per_pass,
    dispatch_budget_s,
    page_seconds,
    slot_cycle_s,
    standard_drain_s,
    steady_pass_seconds,
)

EsmMode = Literal["standard", "provisioned"]
Status = Literal["ok", "raise", "over"]


@dataclass(frozen=True, slots=True)
class Fleet:
    """The knobs the plan sets (env names in README's local-stack table and the CDK stack)."""

    shards: int  # JOBSCHED_SHARD_COUNT
    lookahead_s: int  # JOBSCHED_LOOKAHEAD_SECONDS
    tick_s: int
    page_size: int
    worker_threads: int  # JOBSCHED_WORKER_CONCURRENCY: runs of a batch a worker executes at once
    dispatcher_parallelism: int  # in-flight calls per shard pass (sends, then stamps)
    dispatch_pace: float  # runs/s per shard the dispatcher is held to (0: unpaced)
    worker_concurrency: int  # the mapping's maximum concurrency / the worker's reserved concurrency
    batch_size: int
    esm_mode: EsmMode
    min_pollers: int  # provisioned mode only
    table_quota: float  # the on-demand table-level quota the plan needs (per table and per GSI)
    account_concurrency: int  # the Lambda account concurrency the plan needs

    @property
    def lease_s(self) -> int:
        """How long one pass may hold a shard (dispatch.py: tick - 5 s, at least 10 s)."""
        return max(10, self.tick_s - 5)

    @property
    def pass_s(self) -> float:
        """How long a paced pass works before it leaves the rest to the next one."""
        return PASS_SHARE_OF_LEASE * self.lease_s


@dataclass(frozen=True, slots=True)
class Check:
    """`value` against `limit`; "raise": over a default soft quota the plan raises; "over": infeasible."""

    name: str
    value: float
    limit: float
    unit: str
    status: Status
    note: str = ""


@dataclass(frozen=True, slots=True)
class CostLine:
    """One line of the daily bill."""

    item: str
    units_per_day: float
    usd_per_day: float


@dataclass(frozen=True, slots=True)
class TargetCost:
    """What starting 99% of the burst within `p99_s` of its second would take."""

    p99_s: float
    runs_per_s: float
    worker_concurrency: int
    table_quota: float
    feasible: bool
    note: str


@dataclass(frozen=True, slots=True)
class Plan:
    """A capacity plan: the fleet, the rates it implies, the limits checked, and the daily bill."""

    workload: Workload
    fleet: Fleet
    rates: Mapping[str, float]
    checks: tuple[Check, ...]
    changes: tuple[str, ...]
    costs: tuple[CostLine, ...]
    targets: tuple[TargetCost, ...]
    per_run: PerRunCosts
    limits: Limits
    latencies: Latencies
    sizes: ItemSizes
    margin: float
    headroom: float
    quota_utilization: float

    @property
    def ok(self) -> bool:
        """No hard limit exceeded (raised soft quotas are part of the plan)."""
        return all(c.status != "over" for c in self.checks)

    @property
    def usd_per_day(self) -> float:
        """The daily bill."""
        return sum(line.usd_per_day for line in self.costs)


def _units(size: int, unit: int) -> int:
    return max(1, math.ceil(size / unit))


@dataclass(frozen=True, slots=True)
class _Dispatch:
    lookahead: int
    shards: int
    parallelism: int
    pace: float
    natural: float
    steady_pass: float
    budget: float
    rate: float
    needed_quota: float
    shard_entries: float


def _round_up(x: float, step: float) -> float:
    return math.ceil(x / step - 1e-9) * step


def plan(
    workload: Workload,
    *,
    shards: int | None = None,
    lookahead_s: int | None = None,
    parallelism: int | None = None,
    concurrency: int | None = None,
    esm_mode: EsmMode | None = None,
    tick_s: int = 60,
    page_size: int = 100,
    batch_size: int = 10,
    worker_threads: int = 10,
    per_run: PerRunCosts | None = None,
    limits: Limits | None = None,
    latencies: Latencies | None = None,
    sizes: ItemSizes | None = None,
    prices: Prices | None = None,
    margin: float = 0.9,
    headroom: float = 0.8,
    quota_utilization: float = 0.9,
) -> Plan:
    """Plan the fleet for a workload; every argument left None is recommended, every one given is checked."""
    per_run = per_run or PerRunCosts()
    limits = limits or Limits()
    lat = latencies or Latencies()
    sizes = sizes or ItemSizes()
    prices = prices or Prices()
    wanted = {
        "jobs": workload.jobs >= 0,
        "burst": workload.burst >= 0,
        "window": workload.window_s > 0,
        "steady rate": workload.rate >= 0,
        "spread": workload.spread_s >= 0,
        "shards": shards is None or shards >= 1,
        "look-ahead": lookahead_s is None or lookahead_s >= 1,
        "parallelism": parallelism is None or parallelism >= 1,
        "concurrency": concurrency is None or concurrency >= 1,
        "tick": tick_s >= 1,
        "page size": page_size >= 1,
        "batch size": batch_size >= 1,
        "worker threads": worker_threads >= 1,
    }
    wrong = [name for name, fine in wanted.items() if not fine]
    if wrong:
        raise ValueError(f"capacity: out of range: {', '.join(wrong)}")
    steady, hot = per_run["recurring"], per_run["burst"]
    bg = workload.rate
    burst = workload.burst
    checks: list[Check] = []
    changes: list[str] = []

    # -- 1. workers --------------------------------------------------------------------------------
    cycle = slot_cycle_s(hot, lat, batch_size, workload.handler_ms, worker_threads)
    per_slot = batch_size / cycle  # runs/s one worker slot starts
    steady_concurrency = max(limits.esm_standard_initial, math.ceil(bg / per_slot))
    drain_budget = workload.window_s * margin
    burst_rate = burst / drain_budget if burst else 0.0
    # Each table's units a second while the burst drains at `rate`, per run of it and of the steady
    # load: (burst's, steady's). The jobs table takes the overlap holds while the steady stamps go on.
    drain_loads = {
        "runs table writes": (hot.runs_wru, steady.runs_wru),
        "jobs table writes": (hot.hold_wru, steady.hold_wru + steady.jobs_wru),
        "jobs table reads": (hot.jobs_rru, steady.jobs_rru),
        "runs table reads": (hot.runs_rru, steady.runs_rru),
    }
    usable_now = limits.table_quota * quota_utilization
    by_quota = min(
        (
            (usable_now - bg * per_steady) / per_burst
            for per_burst, per_steady in drain_loads.values()
            if per_burst
        ),
        default=math.inf,
    )
    if burst and by_quota < burst_rate and by_quota > 0 and burst / by_quota <= workload.window_s:
        # The margin-ed rate would need a raised quota, but the rate the current one allows still
        # drains within the window: drain at that rate, with less slack, instead of raising it.
        burst_rate = by_quota
        drain_budget = burst / by_quota
        changes.append(
            f"drain the burst at {by_quota:,.0f} runs/s, what {quota_utilization:.0%} of the table quota "
            f"allows: {drain_budget:.1f} s of the {workload.window_s:g} s window"
        )
    worker_rate = burst_rate + bg
    needed_concurrency = math.ceil(worker_rate / per_slot)
    worker_concurrency = concurrency if concurrency is not None else needed_concurrency
    horizon = 20 * max(workload.window_s, 60.0)
    std_cap = min(worker_concurrency, limits.esm_standard_max)
    std_drain = standard_drain_s(
        burst, bg, steady_concurrency, std_cap, per_slot, limits.esm_standard_ramp_per_min, horizon
    )
    mode: EsmMode = esm_mode or ("standard" if std_drain <= drain_budget else "provisioned")
    message_bytes_per_s = worker_rate * sizes.message
    if mode == "provisioned":
        min_pollers = max(
            2,
            math.ceil(worker_concurrency / limits.esm_invokes_per_poller),
            math.ceil(message_bytes_per_s / limits.esm_poller_bytes_per_s),
        )
        warm = min(min_pollers, limits.esm_min_pollers_max) * limits.esm_invokes_per_poller
        drain_s = standard_drain_s(
            burst,
            bg,
            max(steady_concurrency, warm),
            min(worker_concurrency, limits.esm_provisioned_max),
            per_slot,
            limits.esm_provisioned_ramp_per_min,
            horizon,
        )
    else:
        min_pollers = 0
        drain_s = std_drain
    runs_wcu, jobs_wcu_drain, jobs_rcu_drain, runs_rcu_drain = (
        burst_rate * per_burst + bg * per_steady for per_burst, per_steady in drain_loads.values()
    )
    worker_quota = max(runs_wcu, jobs_wcu_drain, jobs_rcu_drain, runs_rcu_drain)

    # -- 2. dispatch ---------------------------------------------------------------------------------
    # While the burst is handed over, the jobs table also takes the steady runs' stamps and holds.
    bg_jobs_wcu = bg * (steady.jobs_wru + steady.hold_wru)
    bg_index_wcu = bg * steady.due_index_wru
    # A table is planned to run at most `quota_utilization` of its quota: the rest absorbs the steady
    # load's variance and retries.
    quota = max(limits.table_quota, _round_up(worker_quota / quota_utilization, 1_000))
    lease = max(10, tick_s - 5)
    working = PASS_SHARE_OF_LEASE * lease  # what a paced pass spends before it stops
    wru_per_index_write = _units(sizes.due_entry, KIB)
    partition_cap = headroom * limits.partition_wcu / wru_per_index_write

    def busiest(k: int) -> float:
        mean = burst / k
        return mean + 3 * math.sqrt(mean * (1 - 1 / k)) if k > 1 else float(burst)

    def dispatch(lookahead: int, quota: float) -> _Dispatch:
        # K, P and the steady share of each pass depend on each other: a few rounds settle them.
        k = shards or 8
        p = parallelism or 8
        for _ in range(4):
            steady_pass = steady_pass_seconds(bg, steady.job_writes, k, tick_s, lookahead, page_size, p, lat)
            budget = dispatch_budget_s(lookahead, tick_s, working, steady_pass)
            seconds = budget * margin
            if shards is None:
                k = 1
                while seconds > 0 and busiest(k) / seconds > partition_cap and k < 100_000:
                    k += 1
                k = int(_round_up(k, 8))
            usable = quota * quota_utilization
            # Each shard is held to the smaller of its partition's share (with headroom) and its share
            # of what the table quota leaves the burst, on the jobs table and on the index.
            shares = [partition_cap]
            if hot.due_index_wru > 0:
                shares.append((usable - bg_index_wcu) / (k * hot.due_index_wru))
            if hot.jobs_wru > 0:
                shares.append((usable - bg_jobs_wcu) / (k * hot.jobs_wru))
            pace = max(1.0, min(shares))
            if parallelism is None:
                # Enough calls in flight that latency leaves 25% spare over the rate the burst needs,
                # and that the steady load takes at most half a pass.
                need = 1.25 * min(pace, busiest(k) / seconds if seconds > 0 else pace)
                p = 1
                while p < DISPATCHER_IO_WORKERS and (
                    page_size / page_seconds(page_size, hot.job_writes, p, lat) < need
                    or steady_pass_seconds(bg, steady.job_writes, k, tick_s, lookahead, page_size, p, lat)
                    > lease / 2
                ):
                    p *= 2
        natural = page_size / page_seconds(page_size, hot.job_writes, p, lat)
        rate = burst / seconds if seconds > 0 else math.inf
        needed_quota = max(rate * hot.due_index_wru + bg_index_wcu, rate * hot.jobs_wru + bg_jobs_wcu)
        return _Dispatch(lookahead, k, p, pace, natural, steady_pass, budget, rate, needed_quota, busiest(k))

    if lookahead_s is not None:
        d = dispatch(lookahead_s, quota)
    else:
        lookahead = max(90, tick_s + 30)
        d = dispatch(lookahead, quota)
        while (
            d.needed_quota > quota * quota_utilization
            or d.shard_entries / min(d.natural, d.pace) > d.budget * margin
        ) and lookahead + 30 <= limits.sqs_max_delay_s:
            lookahead += 30
            d = dispatch(lookahead, quota)
    if math.isfinite(d.needed_quota) and d.needed_quota > quota * quota_utilization:
        quota = _round_up(d.needed_quota / quota_utilization, 1_000)
        d = dispatch(d.lookahead, quota)
    lookahead, k, p, pace = d.lookahead, d.shards, d.parallelism, d.pace
    shard_entries = d.shard_entries
    shard_rate_needed = shard_entries / (d.budget * margin) if d.budget > 0 else math.inf
    shard_rate = min(d.natural, pace)
    shard_dispatch_s = shard_entries / shard_rate if shard_rate > 0 else math.inf
    partition_wcu = shard_rate * wru_per_index_write
    partition_rcu = shard_rate * sizes.due_entry / (4 * KIB) * 0.5  # eventually consistent: half
    dispatch_jobs_wcu = k * shard_rate * hot.jobs_wru + bg_jobs_wcu
    dispatch_index_wcu = k * shard_rate * hot.due_index_wru + bg_index_wcu

    # -- 3. Lambda concurrency ---------------------------------------------------------------------
    account_needed = worker_concurrency + k
    account = max(limits.account_concurrency, int(_round_up(account_needed, 100)))
    new_envs = max(0, worker_concurrency - steady_concurrency)

    # -- checks ---------------------------------------------------------------------------------------
    def check(
        name: str, value: float, limit: float, unit: str, *, soft: float | None = None, note: str = ""
    ) -> None:
        status: Status = "ok"
        if value > limit * (1 + 1e-9):
            status = "over"
        elif soft is not None and value > soft * (1 + 1e-9):
            status = "raise"
        checks.append(Check(name, value, limit, unit, status, note))

    check(
        "due-index partition writes to dispatch in time",
        shard_rate_needed * wru_per_index_write,
        limits.partition_wcu,
        "WCU/s",
        note=f"busiest of {k} '<minute>#<shard>' partitions: {shard_entries:,.0f} deletes (their puts land "
        f"on the next tick's partitions); paced at {partition_wcu:,.0f}",
    )
    check("due-index partition reads", partition_rcu, limits.partition_rcu, "RCU/s")
    check(
        "burst dispatched before it is due",
        shard_dispatch_s,
        d.budget,
        "s",
        note=f"look-ahead {lookahead} s - tick {tick_s} s (worst phase), {lease} s leases, "
        f"{d.steady_pass:.1f} s of steady work per pass",
    )
    check(
        "steady load's share of a dispatcher pass",
        d.steady_pass,
        lease,
        "s",
        note="a pass that cannot drain the steady load within its lease falls behind",
    )
    check("look-ahead within SQS's delay cap", lookahead, limits.sqs_max_delay_s, "s")
    check(
        "jobs table writes during dispatch", dispatch_jobs_wcu, quota, "WCU/s", soft=limits.table_quota,
    )  # fmt: skip
    check(
        "due index (GSI) writes during dispatch", dispatch_index_wcu, quota, "WCU/s", soft=limits.table_quota,
    )  # fmt: skip
    check("runs table writes during the drain", runs_wcu, quota, "WCU/s", soft=limits.table_quota)
    check(
        "jobs table writes during the drain", jobs_wcu_drain, quota, "WCU/s", soft=limits.table_quota,
        note="the runs' overlap holds, and the steady load's stamps",
    )  # fmt: skip
    if jobs_rcu_drain > 0:
        check("jobs table reads during the drain", jobs_rcu_drain, quota, "RCU/s", soft=limits.table_quota)
    check("runs table reads during the drain", runs_rcu_drain, quota, "RCU/s", soft=limits.table_quota)
    check(
        "burst + steady runs due meanwhile drained within the window",
        drain_s,
        workload.window_s,
        "s",
        note=f"{mode} event-source mapping, concurrency {worker_concurrency}, analytic",
    )
    esm_cap = limits.esm_standard_max if mode == "standard" else limits.esm_provisioned_max
    check(f"worker concurrency within the {mode} mapping's maximum", worker_concurrency, esm_cap, "")
    if mode == "provisioned":
        check("minimum pollers", min_pollers, limits.esm_min_pollers_max, "pollers")
    check(
        "Lambda account concurrency (workers + dispatchers)",
        account_needed,
        account,
        "",
        soft=limits.account_concurrency,
    )
    check(
        "new worker environments at the burst (1,000 per 10 s)",
        new_envs / (limits.lambda_scale_per_10s / 10),
        workload.window_s,
        "s to create",
        note=f"{new_envs} cold starts",
    )
    check("in-flight messages", worker_concurrency * batch_size, limits.sqs_max_in_flight, "")

    # -- changes from the defaults -------------------------------------------------------------------
    changes.append(f"JOBSCHED_SHARD_COUNT={k}")
    if lookahead != 90:
        changes.append(
            f"JOBSCHED_LOOKAHEAD_SECONDS={lookahead} (the burst's dispatch must fit the table quota)"
        )
    changes.append(
        f"dispatcher: one invocation per shard per tick, {p} calls in flight (boto3 max_pool_connections "
        f">= {p}), paced at {math.floor(pace):,} due entries/s per shard: JOBSCHED_DISPATCH_PACE="
        f"{math.floor(pace)} (cdk deploy -c dispatch_pace={math.floor(pace)})"
    )
    if mode == "provisioned":
        changes.append(
            f"worker event-source mapping in provisioned mode, minimum pollers {min_pollers}, "
            f"maximum concurrency {worker_concurrency}"
        )
    else:
        changes.append(f"worker event-source mapping maximum concurrency {worker_concurrency}")
    if quota > limits.table_quota:
        changes.append(f"raise DynamoDB's table-level on-demand quota (reads and writes) to {quota:,.0f}")
    if account > limits.account_concurrency:
        changes.append(f"raise Lambda's account concurrency to {account:,}")

    # -- cost per day --------------------------------------------------------------------------------
    steady_runs = bg * SECONDS_PER_DAY
    burst_runs = float(burst * workload.bursts_per_day)
    passes = SECONDS_PER_DAY / tick_s
    buckets = buckets_per_pass(lookahead, tick_s)
    empty_query_rru = passes * k * buckets * 0.5
    lease_wru = passes * k * 2
    pass_s = (buckets + 2) * lat.dynamodb_ms / 1000
    steady_dispatch_s = (
        steady_runs
        * ((steady.job_writes * lat.dynamodb_ms + 0.1 * lat.sqs_ms) / p + lat.dynamodb_ms / page_size)
        / 1000
    )
    burst_dispatch_s = burst_runs / shard_rate if shard_rate > 0 else 0.0
    dispatcher_gb_s = (passes * k * pass_s + steady_dispatch_s + burst_dispatch_s) * 0.25
    wru = steady_runs * steady.dynamodb_wru + burst_runs * hot.dynamodb_wru + lease_wru
    rru = steady_runs * steady.dynamodb_rru + burst_runs * hot.dynamodb_rru + empty_query_rru
    sqs = steady_runs * steady.sqs_requests + burst_runs * hot.sqs_requests
    invocations = steady_runs * steady.lambda_invocations + burst_runs * hot.lambda_invocations + passes * k
    gb_s = steady_runs * steady.lambda_gb_seconds + burst_runs * hot.lambda_gb_seconds + dispatcher_gb_s
    sfn = steady_runs * steady.sfn_transitions + burst_runs * hot.sfn_transitions
    costs = (
        CostLine("DynamoDB write request units", wru, wru / 1e6 * prices.dynamodb_per_million_wru),
        CostLine("DynamoDB read request units", rru, rru / 1e6 * prices.dynamodb_per_million_rru),
        CostLine("SQS requests", sqs, sqs / 1e6 * prices.sqs_per_million_requests),
        CostLine("Lambda requests", invocations, invocations / 1e6 * prices.lambda_per_million_requests),
        CostLine("Lambda GB-seconds (arm64)", gb_s, gb_s * prices.lambda_per_gb_second),
        CostLine("Step Functions transitions", sfn, sfn / 1e6 * prices.sfn_per_million_transitions),
    )

    # -- what the p99 targets would take ------------------------------------------------------------
    targets = []
    for target in workload.p99_targets_s:
        rate = (0.99 * burst / target if burst else 0.0) + bg
        conc = math.ceil(rate / per_slot)
        tq = _round_up(max(rate * hot.runs_wru, rate * hot.jobs_rru) / quota_utilization, 1_000)
        warm_max = limits.esm_min_pollers_max * limits.esm_invokes_per_poller
        feasible = conc <= warm_max and workload.spread_s == 0
        if workload.spread_s > 0:
            note = "burst is spread: see the simulation"
        elif conc <= warm_max:
            note = f"provisioned mode, {math.ceil(conc / limits.esm_invokes_per_poller)} minimum pollers"
        else:
            note = (
                f"over the {warm_max:,} concurrency 200 minimum pollers keep warm; "
                "spread the herd (jitter) instead"
            )
        targets.append(TargetCost(target, rate, conc, tq, feasible, note))

    rates = {
        "steady_runs_per_s": bg,
        "burst_runs_per_s_needed": burst_rate,
        "worker_runs_per_s": worker_rate,
        "slot_cycle_ms": cycle * 1000,
        "runs_per_s_per_slot": per_slot,
        "steady_concurrency": float(steady_concurrency),
        "worker_concurrency_needed": float(needed_concurrency),
        "standard_mode_drain_s": std_drain,
        "drain_s": drain_s,
        "dispatch_budget_s": d.budget,
        "steady_pass_s": d.steady_pass,
        "dispatch_runs_per_s": d.rate,
        "busiest_shard_entries": shard_entries,
        "shard_rate_needed": shard_rate_needed,
        "shard_rate_latency_bound": d.natural,
        "shard_rate": shard_rate,
        "shard_dispatch_s": shard_dispatch_s,
        "partition_wcu": partition_wcu,
        "partition_rcu": partition_rcu,
        "jobs_wcu_dispatch": dispatch_jobs_wcu,
        "due_index_wcu_dispatch": dispatch_index_wcu,
        "runs_wcu_drain": runs_wcu,
        "jobs_wcu_drain": jobs_wcu_drain,
        "jobs_rcu_drain": jobs_rcu_drain,
        "runs_rcu_drain": runs_rcu_drain,
        "lambda_concurrency_needed": float(account_needed),
        "new_worker_environments": float(new_envs),
        # Jitter that spreads the burst over at least this many seconds keeps the fleet ahead of it.
        "spread_to_keep_up_s": burst / max(1e-9, worker_concurrency * per_slot - bg) if burst else 0.0,
        "runs_per_day": workload.runs_per_day,
        "usd_per_million_runs": 0.0,
    }
    fleet = Fleet(
        shards=k,
        lookahead_s=lookahead,
        tick_s=tick_s,
        page_size=page_size,
        worker_threads=worker_threads,
        dispatcher_parallelism=p,
        dispatch_pace=pace,
        worker_concurrency=worker_concurrency,
        batch_size=batch_size,
        esm_mode=mode,
        min_pollers=min_pollers,
        table_quota=quota,
        account_concurrency=account,
    )
    result = Plan(
        workload=workload,
        fleet=fleet,
        rates=rates,
        checks=tuple(checks),
        changes=tuple(changes),
        costs=costs,
        targets=tuple(targets),
        per_run=per_run,
        limits=limits,
        latencies=lat,
        sizes=sizes,
        margin=margin,
        headroom=headroom,
        quota_utilization=quota_utilization,
    )
    runs_day = workload.runs_per_day
    usd_per_million = result.usd_per_day / runs_day * 1e6 if runs_day else 0.0
    return replace(result, rates={**rates, "usd_per_million_runs": usd_per_million})


def plans(workload: Workload, shard_counts: Sequence[int], **kwargs: Any) -> list[Plan]:
    """One plan per shard count (the rest recommended for each), to compare them."""
    return [plan(workload, shards=k, **kwargs) for k in shard_counts]
