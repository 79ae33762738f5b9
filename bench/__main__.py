"""`make bench`: lateness on the local stack with the real once-a-minute dispatcher tick.

Scenarios (handler start - scheduled_for, from the run rows' started_at):
- api-handover: one-offs due 5 s after they are posted (the request hands them to SQS itself);
- pre-dispatch: one-offs due 100-130 s ahead, found by the once-a-minute dispatcher pass and
  held back in SQS until their second;
- burst: N one-offs all due on the same second, found by the dispatcher.
Results are printed as a table and written to bench/results/lateness.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from jobsched.local.stack import LocalConfig, LocalStack, free_port

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def post(url: str, body: dict[str, Any]) -> str:
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    response = requests.post(f"{url}/api/jobs", json=body, headers=headers, timeout=30)
    response.raise_for_status()
    return str(response.json()["job_id"])


def one_off(run_at: datetime) -> dict[str, Any]:
    return {"type": "one_off", "run_at": run_at.isoformat(), "handler": "demo.echo"}


def lateness(url: str, job_ids: list[str], timeout: float) -> list[float]:
    """Wait for every job's run to succeed; return start - scheduled_for in seconds."""
    deadline = time.monotonic() + timeout
    pending, out = set(job_ids), []
    while pending and time.monotonic() < deadline:
        for job_id in list(pending):
            runs = requests.get(f"{url}/api/jobs/{job_id}", timeout=30).json()["recent_executions"]
            if runs and runs[0]["status"] == "SUCCEEDED":
                run = runs[0]
                started = datetime.fromisoformat(run["started_at"])
                out.append((started - datetime.fromisoformat(run["scheduled_for"])).total_seconds())
                pending.discard(job_id)
        time.sleep(0.5)
    if pending:
        raise SystemExit(f"bench: {len(pending)} runs did not succeed within {timeout} s")
    return out


def scenario_api_handover(url: str, count: int) -> list[float]:
    ids = []
    for _ in range(count):
        ids.append(post(url, one_off((datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0))))
        time.sleep(0.2)
    return lateness(url, ids, timeout=60)


def scenario_pre_dispatch(url: str, count: int) -> list[float]:
    base = (datetime.now(UTC) + timedelta(seconds=100)).replace(microsecond=0)
    ids = [post(url, one_off(base + timedelta(seconds=i * 30 / count))) for i in range(count)]
    return lateness(url, ids, timeout=240)


def scenario_burst(url: str, count: int) -> list[float]:
    due = (datetime.now(UTC) + timedelta(seconds=100)).replace(microsecond=0)
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: post(url, one_off(due)), range(count)))
    return lateness(url, ids, timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(prog="make bench")
    parser.add_argument("--count", type=int, default=20, help="jobs per steady scenario")
    parser.add_argument("--burst", type=int, default=200, help="jobs due on the same second")
    args = parser.parse_args()

    config = LocalConfig(api_port=free_port(), tick_seconds=60)
    stack = LocalStack(config).start()
    rows: list[dict[str, Any]] = []
    try:
        for name, run, n in [
            ("api-handover (due in 5 s)", scenario_api_handover, args.count),
            ("pre-dispatch (due in 100-130 s)", scenario_pre_dispatch, args.count),
            (f"burst ({args.burst} due on one second)", scenario_burst, args.burst),
        ]:
            values = run(stack.api_url, n)
            rows.append(
                {
                    "scenario": name,
                    "runs": len(values),
                    "p50_s": round(percentile(values, 50), 3),
                    "p95_s": round(percentile(values, 95), 3),
                    "p99_s": round(percentile(values, 99), 3),
                    "max_s": round(max(values), 3),
                    "min_s": round(min(values), 3),
                    "mean_s": round(statistics.fmean(values), 3),
                }
            )
            print(f"  done: {name}", flush=True)
    finally:
        stack.stop()
    print("\nLateness = handler start - scheduled_for (local stack, dispatcher tick once a minute)\n")
    header = f"{'scenario':<36} {'runs':>5} {'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'max s':>7} {'min s':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['scenario']:<36} {r['runs']:>5} {r['p50_s']:>7.3f} {r['p95_s']:>7.3f} "
            f"{r['p99_s']:>7.3f} {r['max_s']:>7.3f} {r['min_s']:>7.3f}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "lateness.json"
    out.write_text(json.dumps({"generated_at": datetime.now(UTC).isoformat(), "rows": rows}, indent=2))
    print(f"\nwritten to {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")


if __name__ == "__main__":
    main()
