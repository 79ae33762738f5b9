"""`python -m tests.sim --seeds N --first-seed S [--mutant NAME] [--jobs J] [--hours H] [--record]`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "sim.json"


@contextlib.contextmanager
def _mutant(name: str | None) -> Iterator[None]:
    if not name:
        yield
        return
    from tests.sim.mutants import MUTANTS

    with MUTANTS[name]():
        yield


def kind_of(violation: str) -> str:
    """A violation without its job, instants and numbers: what kind of broken promise it is."""
    text = re.sub(r"job_[0-9a-z]+", "JOB", violation)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "T", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def _one(args: tuple[int, float, int, str | None, bool]) -> dict[str, Any]:
    from tests.sim.workload import simulate

    seed, minutes, jobs, mutant, baseline = args
    with _mutant(mutant):
        r = simulate(seed, minutes=minutes, scale=jobs)
    if mutant and baseline:
        # Only the kinds of violation the unmutated code does not show on this seed count: the
        # planted bug's own (the open findings of the unmutated code are not the mutant's).
        known = {kind_of(v) for v in simulate(seed, minutes=minutes, scale=jobs).violations}
        r.violations = [v for v in r.violations if kind_of(v) not in known]
    traces = {}
    for v in r.violations:
        job = v.split(":")[0]
        if job in r.traces:
            traces[job] = r.traces[job]
    return {
        "seed": r.seed, "jobs": r.jobs, "runs": r.runs, "calls": r.handler_calls, "faults": dict(r.faults),
        "violations": r.violations, "traces": traces, "digest": r.digest, "sim_seconds": r.sim_seconds,
        "wall": r.wall_seconds, "statuses": dict(r.statuses),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")
    parser = argparse.ArgumentParser(prog="python -m tests.sim")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--mutant", default=None, help="plant one bug (tests/sim/mutants.py) for the run")
    parser.add_argument("--jobs", type=int, default=10, help="jobs created per schedule")
    parser.add_argument(
        "--hours", type=float, default=1 / 12, help="simulated hours of faulty load per schedule"
    )
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes")
    parser.add_argument("--record", action="store_true", help="write bench/results/sim.json")
    parser.add_argument("--stop-at-first", action="store_true", help="stop at the first failing seed")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--baseline", action="store_true", help="with --mutant: count only violations the unmutated run lacks"
    )
    args = parser.parse_args(argv)
    console = Console(width=250, soft_wrap=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    work = [(s, args.hours * 60, args.jobs, args.mutant, args.baseline) for s in seeds]
    started = time.perf_counter()
    faults: Counter[str] = Counter()
    failing: list[int] = []
    sim_seconds = 0.0
    done = 0
    first_failure: dict[str, Any] | None = None
    interrupted = False
    pool = ProcessPoolExecutor(max_workers=args.workers) if args.workers > 1 else None
    results = pool.map(_one, work, chunksize=4) if pool is not None else map(_one, work)
    try:
        for r in results:
            done += 1
            faults.update(r["faults"])
            sim_seconds += r["sim_seconds"]
            if r["violations"]:
                failing.append(r["seed"])
                first_failure = first_failure or r
                console.print(f"[red]seed {r['seed']}: {len(r['violations'])} violation(s)[/red]")
                for v in r["violations"][:20]:
                    console.print(f"  seed {r['seed']}: {v}", markup=False, highlight=False)
                for job, lines in r["traces"].items():
                    console.print(
                        f"  trace of {job} (replay: python -m tests.sim --first-seed {r['seed']} --seeds 1)",
                        markup=False,
                    )
                    for line in lines[-int(os.environ.get("SIM_TRACE_LINES", "60")) :]:
                        console.print(f"    {line}", markup=False, highlight=False)
                if args.stop_at_first:
                    break
            if done % 500 == 0:
                console.print(f"{done} schedules, {time.perf_counter() - started:.0f} s", highlight=False)
                console.file.flush()
    except KeyboardInterrupt:
        interrupted = True  # SIGINT: report (and record) the schedules done so far
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    wall = time.perf_counter() - started
    per_min = done / wall * 60 if wall else 0.0
    table = Table(
        title=f"simulation: seeds {args.first_seed}..{args.first_seed + done - 1}"
        + (f", mutant {args.mutant}" if args.mutant else "")
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("schedules", str(done))
    table.add_row("wall seconds", f"{wall:.1f} ({args.workers} processes)")
    table.add_row("schedules/min", f"{per_min:.0f}")
    table.add_row("simulated hours", f"{sim_seconds / 3600:.1f}")
    for kind, n in sorted(faults.items()):
        table.add_row(f"fault: {kind}", str(n))
    table.add_row("violating seeds", str(len(failing)))
    table.add_row("first violating seed", str(failing[0]) if failing else "-")
    console.print(table)
    if args.record:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({
            "schedules": done, "first_seed": args.first_seed, "mutant": args.mutant,
            "jobs_per_schedule": args.jobs,
            "load_hours": args.hours, "processes": args.workers, "wall_seconds": round(wall, 1),
            "schedules_per_minute": round(per_min, 1), "simulated_hours": round(sim_seconds / 3600, 1),
            "faults": dict(sorted(faults.items())), "violating_seeds": failing, "interrupted": interrupted,
        }, indent=2) + "\n")  # fmt: skip
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
