"""`python -m tests.sim --seeds N [--first-seed S] [--workers W] [--record] [--mutants] [--mutant NAME] ...`

The simulator's runner: seeds on a pool of W processes, their results merged as they come (the
merge is order-free: sums, and sorted seeds); a progress bar on a terminal, a line every
--progress-every schedules otherwise. Ctrl-C (SIGINT) stops it cleanly: the pool's processes ignore
SIGINT and are terminated, and the schedules done so far are printed (and recorded, `interrupted`).

`--record` writes bench/results/sim.json (or --out): schedules, schedules per minute, wall seconds,
processes, the faults injected by kind (counted where each was applied: a fault drawn on a call that
then raised, a process whose clock was skewed, a stall that really skipped its heartbeats...), the
violations by kind with their seeds, and with `--mutants` each planted bug of tests/sim/mutants.py
with the first seed that found it and how many seeds that took.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import re
import signal
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
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


def _quiet_worker() -> None:
    """A pool process: Ctrl-C is the parent's to handle (no traceback from every process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")


def _one(args: tuple[int, float, int, str | None, bool]) -> dict[str, Any]:
    """One schedule; an exception of the simulator (or of the code under test) is a result too."""
    seed, minutes, jobs, mutant, baseline = args
    try:
        return _simulate(seed, minutes, jobs, mutant, baseline)
    except Exception as exc:  # reported with its seed; the run goes on
        error = f"-: the simulator raised {type(exc).__name__}: {exc}"
        return {
            "seed": seed, "jobs": 0, "runs": 0, "calls": 0, "faults": {}, "violations": [error],
            "traces": {"-": traceback.format_exc().splitlines()}, "digest": "", "sim_seconds": 0.0,
            "wall": 0.0, "statuses": {},
        }  # fmt: skip


def _simulate(seed: int, minutes: float, jobs: int, mutant: str | None, baseline: bool) -> dict[str, Any]:
    from tests.sim.workload import simulate

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


def _find_mutant(args: tuple[str, int]) -> tuple[str, int, list[str]]:
    """(mutant, seed, the violations of the planted bug that seed's schedule shows), as the slow
    test tests/sim/test_mutants.py searches: the mutant's signature, absent without it."""
    from tests.sim.test_mutants import found_by

    name, seed = args
    return name, seed, found_by(name, seed)


@dataclass
class Merged:
    """Every result merged: order-free, so W processes give the numbers one process gives."""

    done: int = 0
    wall: float = 0.0  # seconds the schedules took (the mutant search after them not counted)
    sim_seconds: float = 0.0
    runs: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    failing: list[int] = field(default_factory=list)
    kinds: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    kind_counts: Counter[str] = field(default_factory=Counter)

    def add(self, r: dict[str, Any]) -> None:
        self.done += 1
        self.sim_seconds += r["sim_seconds"]
        self.runs += r["runs"]
        self.faults.update(r["faults"])
        if r["violations"]:
            self.failing.append(r["seed"])
        for kind, n in Counter(kind_of(v) for v in r["violations"]).items():
            self.kinds[kind].append(r["seed"])
            self.kind_counts[kind] += n

    def violations(self) -> dict[str, dict[str, Any]]:
        return {
            kind: {"count": self.kind_counts[kind], "seeds": sorted(seeds)}
            for kind, seeds in sorted(self.kinds.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        }


def _print_failure(console: Console, r: dict[str, Any], *, quiet: bool) -> None:
    console.print(f"[red]seed {r['seed']}: {len(r['violations'])} violation(s)[/red]")
    for v in r["violations"][: 1 if quiet else 20]:
        console.print(f"  seed {r['seed']}: {v}", markup=False, highlight=False)
    if quiet:
        return
    for job, lines in r["traces"].items():
        console.print(
            f"  trace of {job} (replay: python -m tests.sim --first-seed {r['seed']} --seeds 1)", markup=False
        )
        for line in lines[-int(os.environ.get("SIM_TRACE_LINES", "60")) :]:
            console.print(f"    {line}", markup=False, highlight=False)


class Runner:
    """W forked processes (this one, for --workers 1) that map work, and stop at once on SIGINT.

    Process i takes items i, i+W, i+2W, ... (the schedules of seeds are alike in cost, so the shares
    are even) and sends each result back on one queue as it is done. No task queue, no pool: on
    Ctrl-C the parent kills its processes and returns (multiprocessing.Pool.terminate could hang
    under load while its task thread was blocked feeding 100,000 seeds into a full pipe).
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._ctx = multiprocessing.get_context("fork")
        self._procs: list[Any] = []

    def map(self, fn: Callable[[Any], Any], work: Iterable[Any], *, chunksize: int = 0) -> Iterator[Any]:
        items = list(work)
        if self.workers <= 1 or len(items) <= 1:
            yield from map(fn, items)
            return
        results = self._ctx.Queue()
        self._procs = [
            self._ctx.Process(target=_share, args=(fn, items[i :: self.workers], results), daemon=True)
            for i in range(min(self.workers, len(items)))
        ]
        for proc in self._procs:
            proc.start()
        for _ in items:
            while True:
                try:
                    got = results.get(timeout=1.0)
                    break
                except queue.Empty:
                    if not any(p.is_alive() for p in self._procs) and results.empty():
                        raise RuntimeError("every simulator process died") from None
            yield got
        self.close(interrupted=False)

    def close(self, *, interrupted: bool) -> None:
        """Kill what still runs (Ctrl-C, --stop-at-first: the schedules in flight are dropped, each
        is a seed that replays; after the last result a process has nothing left to send)."""
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
            proc.join()
        self._procs = []


def _share(fn: Callable[[Any], Any], items: list[Any], results: Any) -> None:
    """A runner process: its share of the items, each result sent as it is done."""
    _quiet_worker()
    for item in items:
        results.put(fn(item))
    results.close()
    results.join_thread()


def _progress(console: Console, total: int) -> Progress:
    return Progress(
        TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}/min"),
        TextColumn("[red]{task.fields[failing]} violating"), TimeRemainingColumn(),
        console=console, transient=False, disable=not console.is_terminal,
    )  # fmt: skip


def _mutant_search(runner: Runner, console: Console, names: list[str], bound: int) -> dict[str, Any]:
    """Each planted bug: seeds 1, 2, ... (a batch per round, one seed per process) until one finds it."""
    out: dict[str, Any] = {}
    for name in names:
        found: tuple[int, list[str]] | None = None
        seed = 1
        while found is None and seed <= bound:
            batch = [(name, s) for s in range(seed, min(bound, seed + 2 * runner.workers - 1) + 1)]
            hits = sorted((s, v) for _, s, v in runner.map(_find_mutant, batch, chunksize=1) if v)
            found = hits[0] if hits else None
            seed = batch[-1][1] + 1
        if found is None:
            out[name] = {"found": False, "seeds_tried": bound}
            console.print(f"[red]mutant {name}: not found by seeds 1..{bound}[/red]")
        else:
            out[name] = {
                "found": True,
                "first_seed": found[0],
                "seeds_taken": found[0],
                "violation": found[1][0],
            }
            console.print(f"mutant {name}: found by seed {found[0]}: {found[1][0]}", markup=False)
    return out


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
    parser.add_argument("--record", action="store_true", help="write bench/results/sim.json (or --out)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where --record writes")
    parser.add_argument(
        "--mutants", action="store_true", help="also find each planted bug: its first seed, seeds taken"
    )
    parser.add_argument("--mutant-seeds", type=int, default=60, help="--mutants: seeds tried per bug at most")
    parser.add_argument("--stop-at-first", action="store_true", help="stop at the first failing seed")
    parser.add_argument("--quiet", action="store_true", help="one line per violating seed, no traces")
    parser.add_argument(
        "--progress-every", type=int, default=500, help="off a terminal: a line every N schedules"
    )
    parser.add_argument(
        "--baseline", action="store_true", help="with --mutant: count only violations the unmutated run lacks"
    )
    args = parser.parse_args(argv)
    console = Console(width=250, soft_wrap=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    work = [(s, args.hours * 60, args.jobs, args.mutant, args.baseline) for s in seeds]
    started = time.perf_counter()
    merged = Merged()
    interrupted = False
    mutants: dict[str, Any] | None = None
    runner: Runner | None = None
    progress = _progress(console, len(work))
    try:
        runner = Runner(args.workers)
        with progress:
            bar = progress.add_task("sim", total=len(work), rate="-", failing=0)
            for r in runner.map(_one, work):
                merged.add(r)
                elapsed = time.perf_counter() - started
                progress.update(
                    bar, advance=1, rate=f"{merged.done / elapsed * 60:.0f}", failing=len(merged.failing)
                )
                if r["violations"]:
                    _print_failure(progress.console, r, quiet=args.quiet)
                    if args.stop_at_first:
                        break
                if not console.is_terminal and merged.done % max(1, args.progress_every) == 0:
                    console.print(
                        f"{merged.done} schedules, {elapsed:.0f} s, {len(merged.failing)} violating",
                        highlight=False,
                    )
                    console.file.flush()
        merged.wall = time.perf_counter() - started
        if args.mutants and not args.mutant:
            from tests.sim.mutants import MUTANTS

            mutants = _mutant_search(runner, console, sorted(MUTANTS), args.mutant_seeds)
    except KeyboardInterrupt:
        interrupted = True  # SIGINT: report (and record) the schedules done so far
    finally:
        if runner is not None:
            runner.close(interrupted=interrupted)
    wall = time.perf_counter() - started
    _report(console, args, merged, wall, interrupted, mutants)
    if args.record:
        _record(args, merged, wall, interrupted, mutants)
    if interrupted:
        return 130
    return 1 if merged.failing else 0


def _report(
    console: Console,
    args: argparse.Namespace,
    merged: Merged,
    wall: float,
    interrupted: bool,
    mutants: dict[str, Any] | None,
) -> None:
    sched = merged.wall or wall
    per_min = merged.done / sched * 60 if sched else 0.0
    failing = sorted(merged.failing)
    table = Table(
        title=f"simulation: {merged.done} of seeds {args.first_seed}..{args.first_seed + args.seeds - 1}"
        + (f", mutant {args.mutant}" if args.mutant else "")
        + (" (interrupted)" if interrupted else "")
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("schedules", str(merged.done))
    table.add_row("wall seconds", f"{sched:.1f} ({args.workers} processes; {wall:.1f} in all)")
    table.add_row("schedules/min", f"{per_min:.0f}")
    table.add_row("simulated hours", f"{merged.sim_seconds / 3600:.1f}")
    for kind, n in sorted(merged.faults.items()):
        table.add_row(f"fault: {kind}", str(n))
    table.add_row("violating seeds", str(len(failing)))
    table.add_row("first violating seed", str(failing[0]) if failing else "-")
    for kind, v in merged.violations().items():
        seeds = ", ".join(map(str, v["seeds"][:8])) + (", ..." if len(v["seeds"]) > 8 else "")
        table.add_row(f"violation: {kind}", f"{v['count']} in {len(v['seeds'])} seeds ({seeds})")
    for name, m in (mutants or {}).items():
        found = f"seed {m['first_seed']} ({m['seeds_taken']} seeds)" if m["found"] else "not found"
        table.add_row(f"mutant: {name}", found)
    console.print(table)


def _record(
    args: argparse.Namespace,
    merged: Merged,
    wall: float,
    interrupted: bool,
    mutants: dict[str, Any] | None,
) -> None:
    from tests.sim import test_mutants

    args.out.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "schedules": merged.done, "first_seed": args.first_seed, "seeds_asked": args.seeds,
        "interrupted": interrupted, "mutant": args.mutant, "jobs_per_schedule": args.jobs,
        "load_hours": args.hours, "workers": args.workers, "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2), "wall_seconds": round(wall, 1),
        "schedules_wall_seconds": round(merged.wall or wall, 1),
        "schedules_per_minute": round(merged.done / (merged.wall or wall) * 60 if wall else 0.0, 1),
        "simulated_hours": round(merged.sim_seconds / 3600, 1), "runs": merged.runs,
        "faults": dict(sorted(merged.faults.items())), "violating_seeds": sorted(merged.failing),
        "violations": merged.violations(),
    }  # fmt: skip
    if mutants is not None:
        record["mutants"] = {
            "minutes": test_mutants.MINUTES,
            "jobs_per_schedule": test_mutants.JOBS,
            "bugs": mutants,
        }
    args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # a second Ctrl-C while the partial results print
        raise SystemExit(130) from None
