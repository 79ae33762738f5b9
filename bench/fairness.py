"""Table g: fair draining and priorities. Lateness of a quiet tenant beside a noisy tenant's burst, and
of high runs beside low ones, with fairness on and off, on the local stack.

Per mode (fair: the default; unfair: JOBSCHED_FAIR_DISPATCH=false, arrival order, no MessageGroupId)
a fresh local stack takes, over HTTP, three groups of one-offs, each due on one second, 45 s apart:

- warm-up: N runs of a third tenant, not counted (the worker environments' cold starts, and the
  first pass's writes, would otherwise land on the first measured group only);
- tenants: tenant "noisy" posts N one-offs, then tenant "quiet" posts Q due on the same second
  (written last: arrival order puts them behind the burst);
- priorities: one tenant posts N low one-offs, then H high ones.

The stack: embedded moto, ticks every 15 s and a 30 s look-ahead (shorter than `make run`'s, so the
bench takes minutes), a 180 s lease, and a small fleet: INVOCATIONS worker invocations of 10 runs at
once. The fleet must be smaller than the burst for the order to matter: runs already received wait
only for this process's CPU, whatever their tenant; the ones still in the queue wait their turn, and
fairness decides whose turn comes first (on AWS: a burst above the worker concurrency).

Each group is found by the dispatcher (due beyond the look-ahead when posted), so every run is in
the queue, delayed, before its second. Lateness = handler start - scheduled_for, read per job after
the queue drained. The local stack runs about 30 echo runs a second, so N runs take N/30 s to drain:
that is what the quiet tenant (or a high run) waits behind without fairness.

    python -m bench.fairness [--quick] [--burst N]     # also `python -m bench --only g`
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import requests

from bench.common import say, table
from bench.lateness import Driver, Scenario, _sleep_until, _whole, collect_one_offs, stack_settings
from jobsched import constants as c
from jobsched.local.stack import LocalConfig, LocalStack, free_port

NAME = "fairness"
TICK_S, LOOKAHEAD_S = 15, 30
LEAD_S = LOOKAHEAD_S + 20  # due beyond the look-ahead when posted (with room for the posts)
GAP_S = 45  # between the groups' seconds: each drains before the next is due
QUIET, HIGH = 5, 5
LEASE_S = 180
INVOCATIONS = 2


def post_batch(session: requests.Session, url: str, tenant: str, bodies: list[dict[str, Any]]) -> list[str]:
    """Create the jobs as `tenant` through POST /api/jobs/batch (100 a request), in order; their ids."""
    ids: list[str] = []
    for start in range(0, len(bodies), 100):
        jobs = [{**b, "idempotency_key": str(uuid.uuid4())} for b in bodies[start : start + 100]]
        response = session.post(
            f"{url}/api/jobs/batch", json={"jobs": jobs}, headers={"X-Tenant": tenant}, timeout=120
        )
        response.raise_for_status()
        items = response.json()["items"]
        bad = [i for i in items if "job_id" not in i]
        if bad:
            raise RuntimeError(f"batch create refused: {json.dumps(bad[0])}")
        ids += [i["job_id"] for i in items]
    return ids


def one_off(due: datetime, priority: str = "normal") -> dict[str, Any]:
    body: dict[str, Any] = {"type": "one_off", "run_at": due.isoformat(), "handler": "demo.echo"}
    if priority != "normal":
        body["priority"] = priority
    return body


class Runs(Driver):
    """The lateness bench's driver, reading each job as its own tenant."""

    tenant: str = ""

    def runs(self, job_id: str) -> list[dict[str, Any]]:
        response = self.session.get(
            f"{self.url}/api/jobs/{job_id}/runs",
            params={"limit": 100},
            headers={"X-Tenant": self.tenant},
            timeout=60,
        )
        response.raise_for_status()
        return list(response.json()["items"])


def measure(fair: bool, burst: int) -> tuple[dict[str, Any], list[Scenario]]:
    """One mode on a fresh stack: the four rows (noisy, quiet, low, high) and the stack's settings."""
    previous = os.environ.get(c.FAIR_DISPATCH_ENV)
    os.environ[c.FAIR_DISPATCH_ENV] = "true" if fair else "false"
    mode = "fair" if fair else "unfair"
    stack = LocalStack(
        LocalConfig(
            api_port=free_port(),
            tick_seconds=TICK_S,
            lookahead_seconds=LOOKAHEAD_S,
            # A lease far above the drain: on a loaded machine a 30 s visibility can lapse under a
            # run still working, and its twin delivery then waits a whole lease (what this bench
            # would measure instead of the order runs are served in).
            lease_seconds=LEASE_S,
            invocations=INVOCATIONS,
            prefix=f"jobsched-bench-g-{mode}",
        )
    )
    rows = {
        "noisy": Scenario("noisy", f"tenant noisy: {burst} one-offs due on one second"),
        "quiet": Scenario("quiet", f"tenant quiet: {QUIET} one-offs due on that second, posted after"),
        "low": Scenario("low", f"{burst} low one-offs due on one second"),
        "high": Scenario("high", f"{HIGH} high one-offs due on that second, posted after"),
    }
    try:
        stack.start()
        session = requests.Session()
        warm = _whole(datetime.now(UTC) + timedelta(seconds=LEAD_S))
        first, second = warm + timedelta(seconds=GAP_S), warm + timedelta(seconds=2 * GAP_S)
        post_batch(session, stack.api_url, "warm-up", [one_off(warm)] * burst)
        noisy_ids = post_batch(session, stack.api_url, "noisy", [one_off(first)] * burst)
        quiet_ids = post_batch(session, stack.api_url, "quiet", [one_off(first)] * QUIET)
        lows = post_batch(session, stack.api_url, "prio", [one_off(second, "low")] * burst)
        highs = post_batch(session, stack.api_url, "prio", [one_off(second, "high")] * HIGH)
        if datetime.now(UTC) > warm - timedelta(seconds=LOOKAHEAD_S):
            say(f"  fairness ({mode}): the posts took past the look-ahead; the API handed some over itself")
        say(f"  fairness ({mode}): tenants due {first.time()}, priorities due {second.time()}")
        for due in (warm, first, second):
            _sleep_until(due + timedelta(seconds=1))
            Driver(stack).settle(after=due + timedelta(seconds=1), timeout=300)
        for name, tenant, ids in (
            ("noisy", "noisy", noisy_ids),
            ("quiet", "quiet", quiet_ids),
            ("low", "prio", lows),
            ("high", "prio", highs),
        ):
            driver = Runs(stack)
            driver.tenant = tenant
            collect_one_offs(driver, ids, rows[name])
        settings = stack_settings(stack)
    finally:
        stack.stop()
        if previous is None:
            os.environ.pop(c.FAIR_DISPATCH_ENV, None)
        else:
            os.environ[c.FAIR_DISPATCH_ENV] = previous
    return settings, list(rows.values())


def run(quick: bool = False, *, burst: int | None = None) -> dict[str, Any]:
    """Both modes; the results dict that render() prints and fairness.json holds."""
    burst = burst or (100 if quick else 300)
    began = time.monotonic()
    modes: dict[str, Any] = {}
    stack: dict[str, Any] = {}
    for fair in (True, False):
        stack, rows = measure(fair, burst)
        modes["fair" if fair else "unfair"] = [r.row() for r in rows]
    return {
        "quick": quick,
        "burst": burst,
        "seconds": round(time.monotonic() - began, 1),
        "stack": stack,
        "modes": modes,
    }


def render(results: dict[str, Any]) -> str:
    def rows_of(names: tuple[str, ...]) -> list[list[Any]]:
        out = []
        for mode in ("unfair", "fair"):
            for r in results["modes"][mode]:
                if r["scenario"] in names:
                    cells = [r[k] for k in ("scenario", "runs", "p50_s", "p99_s", "max_s", "not_run")]
                    out.append([mode, *cells])
        return out

    headers = ["mode", "runs of", "runs", "p50", "p99", "max", "not run"]
    burst = results["burst"]
    return "\n".join(
        [
            f"g. Fair draining: lateness = handler start - scheduled_for, seconds (local stack; {burst} runs "
            f"of a noisy tenant and {QUIET} of a quiet one due on one second)",
            "",
            table(headers, rows_of(("noisy", "quiet"))),
            "",
            f"   Priorities: {burst} low and {HIGH} high runs of one tenant due on one second",
            "",
            table(headers, rows_of(("low", "high"))),
            "",
            "  unfair: JOBSCHED_FAIR_DISPATCH=false (arrival order, no MessageGroupId); fair: the default",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--burst", type=int)
    args = parser.parse_args(argv)
    from bench import common

    results = run(args.quick, burst=args.burst)
    results.setdefault("machine", common.machine())
    common.write(NAME, results)
    print(render(results), flush=True)


if __name__ == "__main__":
    main()
