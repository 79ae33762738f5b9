"""The reports of `jobsched capacity`: each plan with its simulation, and a comparison of shard counts.

As tables for people (`as_text`) or as one JSON document for machines (`as_json`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

from jobsched.planning.plan import Plan
from jobsched.planning.simulate import SimResult

# A plan and its simulation (None when the plan is not simulated: --no-simulate).
Evaluated = tuple[Plan, SimResult | None]


def as_json(results: Sequence[Evaluated]) -> str:
    """Every plan and its simulation as `{"plans": [{"plan", "simulation"}, ...]}`, indented."""
    payload = [
        {
            "plan": {**dataclasses.asdict(plan), "ok": plan.ok, "usd_per_day": plan.usd_per_day},
            "simulation": None if sim is None else {**dataclasses.asdict(sim), "met": sim.met},
        }
        for plan, sim in results
    ]
    return json.dumps(_finite({"plans": payload}), indent=2)


def as_text(results: Sequence[Evaluated]) -> str:
    """A comparison row per plan when there are several, then each plan's report."""
    reports = "\n\n".join(plan_report(plan, sim) for plan, sim in results)
    if len(results) <= 1:
        return reports
    rows = [
        [
            f"{plan.fleet.shards}",
            f"{plan.checks[0].value:,.0f}",
            f"{plan.rates['shard_dispatch_s']:,.1f} / {plan.rates['dispatch_budget_s']:,.1f}",
            f"{plan.fleet.lookahead_s}",
            "-" if sim is None else _seconds(sim.drain_s),
            "-" if sim is None else f"{sim.lateness_p99_s:.2f} s",
            "ok" if plan.ok and (sim is None or sim.met) else "OVER",
        ]
        for plan, sim in results
    ]
    header = ["shards", "WCU/s per partition", "dispatch s / budget", "look-ahead", "drain", "p99", "plan"]
    return _table(rows, header) + "\n\n" + reports


def lanes_text(results: Sequence[Evaluated], *, lane_runs: int, lane: str, seed: int) -> str:
    """Per plan: a lane's last start by the model and its simulated p99, fair and in arrival order."""
    from jobsched.planning.model import lane_last_start_s
    from jobsched.planning.simulate import simulate

    rows = []
    for plan, sim in results:
        burst = plan.workload.burst
        rate = (
            burst / sim.drain_s if sim is not None and sim.drain_s > 0 and math.isfinite(sim.drain_s) else 0.0
        )
        for fair in (False, True):
            lane_sim = simulate(plan, seed=seed, lane_runs=lane_runs, lane=lane, fair=fair)  # type: ignore[arg-type]
            rows.append(
                [
                    f"{plan.fleet.shards}",
                    "fair" if fair else "arrival order",
                    _seconds(lane_last_start_s(lane_runs, burst, rate, lane=lane, fair=fair)),
                    _seconds(lane_sim.lane_p99_s),
                    _seconds(lane_sim.lateness_p99_s),
                ]
            )
    what = "high runs" if lane == "priority" else "runs of a quiet tenant"
    head = f"Lanes: {lane_runs:,} {what} due with the burst"
    header = ["shards", "order", "lane done by (model)", "lane p99 (simulated)", "burst p99"]
    return head + "\n" + _table(rows, header)


def plan_report(plan: Plan, sim: SimResult | None) -> str:
    """The plan, its checks, its daily bill and the simulation, as tables."""
    wl, fleet, r = plan.workload, plan.fleet, plan.rates
    out = [
        f"jobsched capacity: {wl.jobs:,} jobs; a burst of {wl.burst:,} runs due "
        + ("on one second" if not wl.spread_s else f"across {wl.spread_s:g} s (jitter)")
        + f", to drain within {wl.window_s:g} s",
        f"steady load {wl.rate:,.0f} runs/s; {wl.runs_per_day:,.0f} runs a day",
        f"per-run counts: {plan.per_run.source}",
        "",
        "Plan",
    ]
    dispatcher = (
        f"one invocation per shard per tick, {fleet.dispatcher_parallelism} calls in flight, "
        f"paced at {math.floor(fleet.dispatch_pace):,} due entries/s per shard (JOBSCHED_DISPATCH_PACE)"
    )
    mapping = f"{fleet.esm_mode} mode, maximum concurrency {fleet.worker_concurrency:,}"
    if fleet.esm_mode == "provisioned":
        mapping += f", {fleet.min_pollers} minimum pollers"
    mapping += f"; batches of {fleet.batch_size}, {fleet.worker_threads} runs at once"
    settings = [
        ["shards (JOBSCHED_SHARD_COUNT)", f"{fleet.shards}"],
        ["look-ahead (JOBSCHED_LOOKAHEAD_SECONDS)", f"{fleet.lookahead_s} s"],
        ["dispatcher", dispatcher],
        ["worker event-source mapping", mapping],
        [
            "Lambda concurrency",
            f"{r['lambda_concurrency_needed']:,.0f} (workers {fleet.worker_concurrency:,} + dispatchers "
            f"{fleet.shards}) of an account limit of {fleet.account_concurrency:,}",
        ],
        ["DynamoDB table-level quota", f"{fleet.table_quota:,.0f} read and write units/s per table and GSI"],
    ]
    out.append(_table(settings, ["setting", "value"]))
    out += ["", "Changes from the defaults", *(f"  - {change}" for change in plan.changes), "", "Limits"]
    rows = [
        [
            c.name,
            f"{_num(c.value)} {c.unit}".rstrip(),
            _num(c.limit),
            c.status.upper() if c.status != "ok" else "ok",
        ]
        for c in plan.checks
    ]
    out.append(_table(rows, ["check", "value", "limit", "status"]))
    out += ["", "Rates"]
    rate_rows = [
        ["burst runs/s needed (burst / (window x margin))", f"{r['burst_runs_per_s_needed']:,.0f}"],
        [
            "worker slot: runs/s (mean cycle of a batch)",
            f"{r['runs_per_s_per_slot']:,.1f} ({r['slot_cycle_ms']:,.0f} ms)",
        ],
        ["steady concurrency before the burst", f"{r['steady_concurrency']:,.0f}"],
        ["dispatch budget per shard (worst phase)", _seconds(r["dispatch_budget_s"])],
        ["busiest shard's burst entries", f"{r['busiest_shard_entries']:,.0f}"],
        ["its dispatch at the pace", _seconds(r["shard_dispatch_s"])],
        ["due-index WCU/s per partition (paced)", f"{r['partition_wcu']:,.0f}"],
        ["jobs table WCU/s during dispatch", f"{r['jobs_wcu_dispatch']:,.0f}"],
        ["due index WCU/s during dispatch", f"{r['due_index_wcu_dispatch']:,.0f}"],
        ["runs table WCU/s during the drain", f"{r['runs_wcu_drain']:,.0f}"],
        ["jobs table WCU/s during the drain (holds)", f"{r['jobs_wcu_drain']:,.0f}"],
        ["jobs table RCU/s during the drain", f"{r['jobs_rcu_drain']:,.0f}"],
        ["runs table RCU/s during the drain", f"{r['runs_rcu_drain']:,.0f}"],
        [
            "drain, analytic (standard mode would take)",
            f"{_seconds(r['drain_s'])} ({_seconds(r['standard_mode_drain_s'])})",
        ],
    ]
    out.append(_table(rate_rows, ["rate", "value"]))
    out += ["", "Cost per day (DESIGN.md list prices)"]
    cost_rows = [[c.item, f"{c.units_per_day:,.0f}", f"${c.usd_per_day:,.2f}"] for c in plan.costs]
    cost_rows.append(["total", "", f"${plan.usd_per_day:,.2f}"])
    out.append(_table(cost_rows, ["item", "units/day", "USD/day"]))
    out.append(f"  (${r['usd_per_million_runs']:,.2f} per million runs)")
    if sim is not None:
        verdict = "within" if sim.met else "NOT within"
        out += [
            "",
            f"Simulation (seed {sim.seed}, {sim.events:,} events)",
            _table(
                [
                    [
                        "last burst message sent (vs due)",
                        f"{sim.dispatch_done_s:+,.1f} s" if sim.burst else "-",
                    ],
                    ["burst runs sent late", f"{sim.late_sends:,}"],
                    ["burst drained", f"{_seconds(sim.drain_s)} ({verdict} the {sim.window_s:g} s window)"],
                    ["steady runs due meanwhile caught up", _seconds(sim.caught_up_s)],
                    [
                        "burst lateness p50 / p95 / p99 / max",
                        f"{sim.lateness_p50_s:.2f} / {sim.lateness_p95_s:.2f} / {sim.lateness_p99_s:.2f} / "
                        f"{sim.lateness_max_s:.2f} s",
                    ],
                    ["steady runs' lateness p99 (due during the drain)", f"{sim.steady_p99_s:.2f} s"],
                    ["peak concurrency (cold starts)", f"{sim.peak_concurrency:,} ({sim.cold_starts:,})"],
                    ["busiest due-index partition", f"{sim.peak_partition_wcu:,.0f} WCU/s"],
                    [
                        "due index / jobs table writes",
                        f"{sim.peak_index_wcu:,.0f} / {sim.peak_jobs_wcu:,.0f} WCU/s",
                    ],
                    [
                        "runs table writes / reads",
                        f"{sim.peak_runs_wcu:,.0f} WCU/s / {sim.peak_runs_rcu:,.0f} RCU/s",
                    ],
                    ["jobs table reads", f"{sim.peak_jobs_rcu:,.0f} RCU/s"],
                    ["time spent waiting on DynamoDB limits", f"{sim.throttled_s:,.1f} s"],
                ],
                ["measured", "value"],
            ),
        ]
    out += ["", "What a p99 lateness target would take for this burst"]
    target_rows = [
        [
            f"p99 <= {t.p99_s:g} s",
            f"{t.runs_per_s:,.0f}",
            f"{t.worker_concurrency:,}",
            f"{t.table_quota:,.0f}",
            "yes" if t.feasible else "no",
            t.note,
        ]
        for t in plan.targets
    ]
    out.append(_table(target_rows, ["target", "runs/s", "concurrency", "table quota", "feasible", "note"]))
    if wl.burst and not wl.spread_s:
        out.append(
            f"  or spread the burst with jitter over >= {r['spread_to_keep_up_s']:,.0f} s: the planned fleet "
            "keeps up with it (try --spread)"
        )
    return "\n".join(out)


def _finite(value: Any) -> Any:
    """JSON has no infinity: a limit never reached is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = [i > 0 and all(_looks_numeric(r[i]) for r in rows if r[i]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        )

    return "\n".join(["  " + line(header).rstrip(), *("  " + line(r).rstrip() for r in rows)])


def _looks_numeric(text: str) -> bool:
    return bool(text) and (text[0].isdigit() or text[0] in "-$") and not text.startswith("-:")


def _num(value: float) -> str:
    if not math.isfinite(value):
        return "inf"
    return f"{value:,.0f}" if abs(value - round(value)) < 1e-9 or abs(value) >= 1_000 else f"{value:,.1f}"


def _seconds(value: float) -> str:
    return "never" if not math.isfinite(value) else f"{value:,.1f} s"
