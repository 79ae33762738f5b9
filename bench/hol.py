"""Table e: head-of-line blocking. An echo job's lateness beside slow jobs, on the local stack.

The stack is the one `make run` starts (embedded moto, dispatcher tick every 60 s, look-ahead 90 s),
driven over HTTP. Three `demo.sleep` jobs of 20 s fire together every 20 s (`*/20 * * * * *`,
overlap `allow`, so each always has a run in flight), and one `demo.echo` job fires every 10 s
(`*/10 * * * * *`). Each echo tick takes a few milliseconds; if it starts late, it waited behind the
slow handlers: in its own batch (runs executed one after another) or for a poller a slow batch holds.

After the observation window, each job's runs are read until every tick of the window has started
(or a patience runs out: those count as not run), then the stack stops. The slow jobs are
never cancelled (one of their runs is always running, a cancel would answer 409).

    python -m bench.hol [--window 120]      # also `python -m bench --only e`
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import common
from bench.common import say, table
from bench.lateness import Driver, Scenario, bench_stack, stack_settings

NAME = "hol"
SLOW_JOBS = 3
SLOW_SECONDS = 20
SLOW_CRON = "*/20 * * * * *"
ECHO_CRON = "*/10 * * * * *"
# Ticks of the window that have not started this long after it ended count as not run.
PATIENCE_SECONDS = 120


def lateness(run: dict[str, Any]) -> float | None:
    """started_at - scheduled_for in seconds, for a run that has started."""
    if not run.get("started_at"):
        return None
    started = datetime.fromisoformat(run["started_at"])
    return (started - datetime.fromisoformat(run["scheduled_for"])).total_seconds()


def in_window(run: dict[str, Any], window: tuple[datetime, datetime]) -> bool:
    return window[0] <= datetime.fromisoformat(run["scheduled_for"]) < window[1]


def expected_ticks(window: tuple[datetime, datetime], every: int) -> int:
    """Ticks of a `*/every` seconds cron in [start, end)."""
    first = window[0].replace(microsecond=0)
    if first < window[0]:
        first += timedelta(seconds=1)
    first += timedelta(seconds=(-first.second) % every)
    return max(0, int((window[1] - first).total_seconds() - 1e-9) // every + 1)


def run(quick: bool = False, *, window: int | None = None) -> dict[str, Any]:
    """The scenario on a fresh local stack; the results dict that render() prints and hol.json holds."""
    window_s = window or (60 if quick else 120)
    stack = bench_stack("jobsched-bench-e").start()
    driver = Driver(stack)
    began = time.monotonic()
    echo = Scenario("echo", f"demo.echo every 10 s ({ECHO_CRON}) beside the slow jobs, {window_s} s")
    slow = Scenario("slow", f"{SLOW_JOBS} demo.sleep {SLOW_SECONDS} s jobs ({SLOW_CRON}, overlap allow)")
    try:
        slow_ids = [
            driver.post_job(
                {
                    "type": "recurring",
                    "cron_expr": SLOW_CRON,
                    "handler": "demo.sleep",
                    "payload": {"seconds": SLOW_SECONDS},
                    "overlap_policy": "allow",
                }
            )
            for _ in range(SLOW_JOBS)
        ]
        echo_id = driver.post_job({"type": "recurring", "cron_expr": ECHO_CRON, "handler": "demo.echo"})
        t0 = datetime.now(UTC)
        span = (t0 + timedelta(seconds=5), t0 + timedelta(seconds=5 + window_s))
        say(
            f"  hol: {window_s} s window from {span[0].time()} (echo every 10 s beside {SLOW_JOBS} slow jobs)"
        )
        while datetime.now(UTC) < span[1]:
            time.sleep(1.0)
        # A run's row may carry started_at only once it is done (the one-write healthy path): wait
        # for the slow jobs' last ticks of the window too.
        wanted = {echo_id: expected_ticks(span, 10), **{j: expected_ticks(span, 20) for j in slow_ids}}
        deadline = time.monotonic() + PATIENCE_SECONDS
        while True:
            seen = {
                job_id: [
                    v for r in driver.runs(job_id) if in_window(r, span) and (v := lateness(r)) is not None
                ]
                for job_id in wanted
            }
            if all(len(seen[j]) >= n for j, n in wanted.items()) or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        echo.values = sorted(seen[echo_id])
        echo.not_run = max(0, wanted[echo_id] - len(seen[echo_id]))
        for job_id in slow_ids:
            slow.values += seen[job_id]
            slow.not_run += max(0, wanted[job_id] - len(seen[job_id]))
    finally:
        stack.stop()
    return {
        "quick": quick,
        "seconds": round(time.monotonic() - began, 1),
        "stack": stack_settings(stack),
        "window_s": window_s,
        "rows": [echo.row(), slow.row()],
    }


def render(results: dict[str, Any]) -> str:
    s = results["stack"]
    head = (
        "e. Head-of-line blocking: start lateness = started_at - scheduled_for, seconds (local stack: "
        f"{s['invocations']} concurrent worker invocations, batches of {s['batch_size']}, "
        f"{s['worker_concurrency']} runs of a batch at once)"
    )
    rows = results["rows"]
    body = table(
        ["job", "runs", "p50", "p99", "max", "not run"],
        [[r["scenario"], r["runs"], r["p50_s"], r["p99_s"], r["max_s"], r["not_run"]] for r in rows],
    )
    notes = "\n".join(f"  {r['scenario']}: {r['description']}" for r in rows)
    return f"{head}\n\n{body}\n\n{notes}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hol", description=__doc__.split("\n")[0])
    parser.add_argument("--window", type=int, default=None, help="observation window, s (default 120)")
    parser.add_argument("--quick", action="store_true", help="a 60 s window")
    args = parser.parse_args(argv)
    results = run(args.quick, window=args.window)
    results.setdefault("machine", common.machine())
    out = common.write(NAME, results)
    print(render(results))
    print(f"\nwritten to {out.relative_to(common.ROOT)}")
    say(json.dumps(results["rows"]))


if __name__ == "__main__":
    main()
