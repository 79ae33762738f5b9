"""Table f: an http target's lateness = the request's arrival at the webhook - the envelope's `scheduled_for`.

The stack is the one `make run` starts (embedded moto, dispatcher pass every 60 s, look-ahead 90 s),
driven over HTTP; the local stack allows http to loopback. The webhook (bench/peers.py) listens on a
free loopback port, answers 200 at once and records when each request's body was read
(`time.time()`, the same machine's clock as the stack's). Each (job, scheduled_for) counts once, at its
first arrival (a redelivery's second request is not a tick). Rows:

- minute: `J` recurring jobs each firing once a minute (`<s> * * * * *`, one second of the minute
  per job, spread over it), their ticks due in an observation window of `M` whole minutes: J x M
  ticks, every one after the first handed over by the dispatcher's once-a-minute pass;
- seconds: one job on seconds-precision cron `*/5 * * * * *` over the same kind of window (12 ticks
  a minute), the dispatcher's pass handing over a look-ahead's worth at a time. Labelled apart: it
  is not the once-a-minute tick.

The tick count of each row is in its description and in `runs`; `not_run` counts the window's ticks
(from jobsched.cron) that never arrived. Full: J=6, M=5 (30 ticks) and 2 min of seconds ticks (24);
--quick: J=4, M=2 (8 ticks) and 1 min (12).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import say, table
from bench.lateness import Driver, Scenario, _sleep_until
from bench.peers import Arrival, Webhook
from jobsched import cron
from jobsched.local.stack import LocalConfig, LocalStack, free_port

NAME = "httplateness"
# The webhook's requests still arriving after the window's last tick is due (a run is late by seconds).
PATIENCE_SECONDS = 20


def lateness_by_tick(arrivals: list[Arrival]) -> dict[tuple[str, datetime], float]:
    """(job_id, scheduled_for) -> first arrival - scheduled_for, seconds, over the webhook's arrivals."""
    out: dict[tuple[str, datetime], float] = {}
    for a in sorted(arrivals, key=lambda a: a.at):
        scheduled = datetime.fromisoformat(a.body["scheduled_for"])
        key = (str(a.body["job_id"]), scheduled)
        out.setdefault(key, a.at - scheduled.timestamp())
    return out


def row_of(
    scenario: Scenario,
    late: dict[tuple[str, datetime], float],
    jobs: dict[str, str],
    window: tuple[datetime, datetime],
) -> Scenario:
    """Fill `scenario` with the window's ticks of `jobs` (job_id -> cron): lateness, or not_run."""
    for job_id, expr in jobs.items():
        # The window's ticks: window[0] <= t < window[1].
        for tick in cron.parse(expr).ticks(
            window[0] - timedelta(microseconds=1), window[1] - timedelta(microseconds=1), limit=10_000
        ):
            if (job_id, tick) in late:
                scenario.values.append(late[(job_id, tick)])
            else:
                scenario.not_run += 1
    return scenario


def run(quick: bool = False) -> dict[str, Any]:
    """Both rows on a fresh local stack; the results dict that render() prints and httplateness.json holds."""
    jobs_per_minute, minutes, seconds_minutes = (4, 2, 1) if quick else (6, 5, 2)
    config = LocalConfig(
        api_port=free_port(), tick_seconds=60, lookahead_seconds=90, prefix="jobsched-bench-f"
    )
    stack = LocalStack(config)
    webhook = Webhook().start()
    began = time.monotonic()
    stack.start()
    driver = Driver(stack)
    try:
        hook = f"{webhook.url}/hook"
        minute_jobs = {}
        for i in range(jobs_per_minute):
            expr = f"{(i * 60 // jobs_per_minute + 7) % 60} * * * * *"
            minute_jobs[driver.post_job({"type": "recurring", "cron_expr": expr, "target": _http(hook)})] = (
                expr
            )
        seconds_expr = "*/5 * * * * *"
        seconds_jobs = {
            driver.post_job(
                {"type": "recurring", "cron_expr": seconds_expr, "target": _http(hook)}
            ): seconds_expr
        }
        # Whole minutes from the next minute on (the create requests' own hand-over is before it).
        start = (datetime.now(UTC) + timedelta(minutes=1)).replace(second=0, microsecond=0)
        minute_window = (start, start + timedelta(minutes=minutes))
        seconds_window = (start, start + timedelta(minutes=seconds_minutes))
        say(f"  httplateness: ticks from {start.time()} for {minutes} min")
        _sleep_until(minute_window[1] + timedelta(seconds=PATIENCE_SECONDS))
        for job_id in (*minute_jobs, *seconds_jobs):
            driver.cancel(job_id)
    finally:
        stack.stop()
        webhook.stop()
    late = lateness_by_tick(webhook.arrivals)
    minute = row_of(
        Scenario(
            "minute",
            f"{jobs_per_minute} jobs each once a minute (<s> * * * * *) for {minutes} min: "
            f"{jobs_per_minute * minutes} ticks",
        ),
        late,
        minute_jobs,
        minute_window,
    )
    seconds = row_of(
        Scenario(
            "seconds", f"1 job on */5 * * * * * for {seconds_minutes} min: {12 * seconds_minutes} ticks"
        ),
        late,
        seconds_jobs,
        seconds_window,
    )
    return {
        "quick": quick,
        "seconds": round(time.monotonic() - began, 1),
        "stack": {
            "tick_seconds": config.tick_seconds,
            "lookahead_seconds": config.lookahead_seconds,
            "pollers": config.pollers,
            "batch_size": config.batch_size,
        },
        "window": {"start": start.isoformat(), "minutes": minutes, "seconds_minutes": seconds_minutes},
        "requests": len(webhook.arrivals),
        "rows": [minute.row(), seconds.row()],
    }


def render(results: dict[str, Any]) -> str:
    rows = results["rows"]
    head = (
        "f. HTTP target lateness = request arrival at the webhook - scheduled_for, seconds (local stack, "
        f"dispatcher pass every {results['stack']['tick_seconds']} s; loopback webhook answering at once)"
    )
    body = table(
        ["row", "ticks", "p50", "p95", "p99", "max", "min", "not run"],
        [
            [
                r["scenario"],
                r["runs"],
                r["p50_s"],
                r["p95_s"],
                r["p99_s"],
                r["max_s"],
                r["min_s"],
                r["not_run"],
            ]
            for r in rows
        ],
    )
    notes = "\n".join(f"  {r['scenario']}: {r['description']}" for r in rows)
    return f"{head}\n\n{body}\n\n{notes}"


def _http(url: str) -> dict[str, Any]:
    return {"type": "http", "url": url, "timeout_seconds": 10}
