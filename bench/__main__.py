"""`make bench` (python -m bench): the benchmark tables, printed, each also written as JSON.

    a  lateness     bench/lateness.py    handler start - scheduled_for on the local stack, real tick
    b  throughput   bench/throughput.py  runs/s through jobsched vs. the same AWS calls made directly
    c  costs        bench/costs.py       cost per run by kind (run if the module is there)
    d  coldstart    bench/coldstart.py   handler import time and upload sizes
    e  hol          bench/hol.py         an echo job's lateness beside slow jobs (head-of-line blocking)
    f  httplateness bench/httplateness.py  an http target's request arrival - scheduled_for, real tick
    g  fairness     bench/fairness.py    a quiet tenant beside a noisy burst, high beside low, fair or not
    h  pools        bench/pools.py       worker pools: hand-off to started over three workers, cost per run

Each writes bench/results/<name>.json (bench/results/README.md describes the fields). Tables go to
stdout, progress to stderr. `--quick` is a short smoke run of every table; `--only b,d` picks tables.
The cost table runs its quick variant unless `--costs-full` (its full run alone takes about 6 min;
`python -m bench.costs` runs it on its own).
They run one after another (d, b, c, a, e, f, g, h: the machine-bound ones first), never at the same
time: each measures this machine's CPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bench import common
from bench.common import say

TABLES = {
    "a": "lateness",
    "b": "throughput",
    "c": "costs",
    "d": "coldstart",
    "e": "hol",
    "f": "httplateness",
    "g": "fairness",
    "h": "pools",
}
ORDER = ("d", "b", "c", "a", "e", "f", "g", "h")


def load(name: str) -> ModuleType | None:
    """bench.<name>, or None if that module is not there (costs is written separately)."""
    try:
        return importlib.import_module(f"bench.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"bench.{name}":
            raise
        return None


def run_table(
    letter: str, quick: bool, options: dict[str, Any]
) -> tuple[str, dict[str, Any] | None, Callable[[dict[str, Any]], str] | None]:
    name = TABLES[letter]
    module = load(name)
    if module is None:
        return name, None, None
    if name == "costs" and not options.get("costs_full"):
        quick = True  # its full run alone takes longer than the rest of make bench
    results: dict[str, Any] = module.run(quick, **options.get(name, {}))
    results.setdefault("machine", common.machine())
    if name == "costs":  # its own format, as `python -m bench.costs` writes it
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        (common.RESULTS / "costs.json").write_text(json.dumps(results, indent=2) + "\n")
    else:
        common.write(name, results)
    return name, results, module.render


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run of every table")
    parser.add_argument("--only", default="", help="comma-separated tables: a,b,c,d,e,f,g,h or their names")
    parser.add_argument("--burst", type=int, help="a: jobs due on the same second (default 200, quick 50)")
    parser.add_argument(
        "--costs-full",
        action="store_true",
        help="c: the full cost table (about 6 min alone; make bench runs its quick variant)",
    )
    args = parser.parse_args(argv)
    wanted = {t.strip() for t in args.only.split(",") if t.strip()}
    letters = [letter for letter in ORDER if not wanted or letter in wanted or TABLES[letter] in wanted]
    unknown = wanted - set(TABLES) - set(TABLES.values())
    if unknown:
        choices = ", ".join(f"{k}={v}" for k, v in TABLES.items())
        parser.error(f"unknown tables {sorted(unknown)}; choose from {choices}")
    options: dict[str, Any] = {"lateness": {"burst": args.burst}} if args.burst else {}
    options["costs_full"] = args.costs_full
    began = time.monotonic()
    done: dict[str, float] = {}
    for letter in letters:
        name = TABLES[letter]
        say(f"bench {letter} ({name}){' --quick' if args.quick else ''} ...")
        started = time.monotonic()
        name, results, render = run_table(letter, args.quick, options)
        if results is None or render is None:
            print(f"\n{letter}. {name}: skipped (bench/{name}.py is not there yet)\n", flush=True)
            continue
        done[name] = time.monotonic() - started
        print(
            f"\n{render(results)}\n\nwritten to bench/results/{name}.json  ({done[name]:.0f} s)\n", flush=True
        )
    timings = ", ".join(f"{n} {s:.0f} s" for n, s in done.items())
    print(f"make bench: {time.monotonic() - began:.0f} s in all ({timings})", flush=True)


if __name__ == "__main__":
    main()
