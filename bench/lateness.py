"""Table a: lateness (handler start - scheduled_for) on the local stack, dispatcher ticking once a minute.

The stack is the one `make run` starts (embedded moto, tick every 60 s, look-ahead 90 s, 4 pollers
of up to 10 messages), driven over HTTP. Scenarios, in two phases so the burst disturbs no other:

phase 1 (together: a mixed, light load)
- steady: recurring jobs each firing once a minute, on seconds spread over the minute
  (`<s> * * * * *`); every tick due in the observation window counts. Their first tick is handed
  over by the create request, every later one by the dispatcher's once-a-minute pass;
- api-handover: one-offs due 5 s after they are posted (the request hands them to SQS itself);
- pre-dispatch: one-offs due 100-130 s ahead, beyond the look-ahead, so the dispatcher's pass finds
  them and SQS holds them back until their second;
phase 2 (alone, after the recurring jobs are cancelled)
- burst: N one-offs all due on the same second, found by the dispatcher.

Completion is watched through the execution queue's depth (one SQS call a second), and each job's
runs are read once afterwards, so the measurement does not load the stack while runs are due.
"""

from __future__ import annotations

import itertools
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import requests

from bench.common import percentile, say, table
from jobsched.local.stack import LocalConfig, LocalStack, free_port

NAME = "lateness"
# Beyond the 90 s look-ahead (with room for the time 200 creates take), so the create request leaves
# the run to the dispatcher's next pass.
DISPATCHER_LEAD_SECONDS = 100


def bench_stack(prefix: str) -> LocalStack:
    """The lateness benches' local stack: minute ticks, a 90 s look-ahead, its own resource prefix."""
    return LocalStack(
        LocalConfig(api_port=free_port(), tick_seconds=60, lookahead_seconds=90, prefix=prefix)
    )


def stack_settings(stack: LocalStack) -> dict[str, Any]:
    """What a lateness result was measured with: the stack's pacing, shards and worker concurrency."""
    config = stack.config
    return {
        "tick_seconds": config.tick_seconds,
        "lookahead_seconds": config.lookahead_seconds,
        "pollers": config.pollers,
        "invocations": config.invocations,
        "batch_size": config.batch_size,
        "poll_interval_s": config.poll_interval,
        "shards": config.shard_count,
        "worker_concurrency": stack.worker.services.settings.worker_concurrency if stack.worker else None,
    }


@dataclass
class Scenario:
    """One row of the table: a name, what it measured, and the lateness of each run in seconds."""

    name: str
    description: str
    values: list[float] = field(default_factory=list)
    not_run: int = 0

    def row(self) -> dict[str, Any]:
        v = self.values or [float("nan")]
        return {
            "scenario": self.name,
            "description": self.description,
            "runs": len(self.values),
            "not_run": self.not_run,
            "p50_s": round(percentile(v, 50), 3),
            "p95_s": round(percentile(v, 95), 3),
            "p99_s": round(percentile(v, 99), 3),
            "max_s": round(max(v), 3),
            "min_s": round(min(v), 3),
            "mean_s": round(statistics.fmean(v), 3),
        }


@dataclass
class Driver:
    """HTTP to the local stack, plus a look at its execution queue."""

    stack: LocalStack
    session: requests.Session = field(default_factory=requests.Session)
    sqs: Any = None

    @property
    def url(self) -> str:
        return self.stack.api_url

    def post_job(self, body: dict[str, Any]) -> str:
        response = self.session.post(
            f"{self.url}/api/jobs", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}, timeout=60
        )
        response.raise_for_status()
        return str(response.json()["job_id"])

    def cancel(self, job_id: str, attempts: int = 20) -> None:
        for _ in range(attempts):  # 409 while one of its runs is running: try again
            if self.session.delete(f"{self.url}/api/jobs/{job_id}", timeout=60).status_code == 200:
                return
            time.sleep(0.5)

    def runs(self, job_id: str) -> list[dict[str, Any]]:
        response = self.session.get(f"{self.url}/api/jobs/{job_id}/runs", params={"limit": 100}, timeout=60)
        response.raise_for_status()
        return list(response.json()["items"])

    def queue_depth(self) -> int:
        """Messages in the execution queue: visible, in flight and delayed."""
        self.sqs = self.sqs or boto3.client("sqs", endpoint_url=self.stack.endpoint_url)
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        out = self.sqs.get_queue_attributes(QueueUrl=self.stack.queue_url, AttributeNames=names)
        attrs: dict[str, str] = out["Attributes"]
        return sum(int(attrs.get(n, "0")) for n in names)

    def settle(self, after: datetime, timeout: float) -> None:
        """Wait until `after` has passed and the queue is empty (every handed-over run done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if datetime.now(UTC) > after and self.queue_depth() == 0:
                return
            time.sleep(1.0)
        say(f"  lateness: the queue did not drain within {timeout:.0f} s")


def started_late(run: dict[str, Any]) -> float | None:
    """start - scheduled_for in seconds, for a run that succeeded."""
    if run.get("status") != "SUCCEEDED" or not run.get("started_at"):
        return None
    started = datetime.fromisoformat(run["started_at"])
    return (started - datetime.fromisoformat(run["scheduled_for"])).total_seconds()


def collect_one_offs(driver: Driver, job_ids: list[str], scenario: Scenario, *, patience: float = 30) -> None:
    """Each one-off's lateness; a job whose run has not succeeded yet is read again, up to `patience` s."""
    pending = list(job_ids)
    deadline = time.monotonic() + patience
    while pending:
        later = []
        for job_id in pending:
            late = [v for v in map(started_late, driver.runs(job_id)) if v is not None]
            if late:
                scenario.values.append(late[0])
            else:
                later.append(job_id)
        pending = later
        if pending and time.monotonic() < deadline:
            time.sleep(1.0)
        elif pending:
            scenario.not_run += len(pending)
            break


def post_burst(driver: Driver, due: datetime, count: int) -> list[str]:
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda _: driver.post_job(_one_off(due)), range(count)))


def run(quick: bool = False, *, burst: int | None = None) -> dict[str, Any]:
    """Both phases on a fresh local stack; the results dict that render() prints and lateness.json holds."""
    steady_jobs, steady_window = (10, 60) if quick else (40, 120)
    one_offs = 10 if quick else 20
    burst = burst or (50 if quick else 200)
    stack = bench_stack("jobsched-bench-a")
    passes: list[dict[str, Any]] = []
    tick = stack.tick

    def observed_tick() -> dict[str, Any]:  # the tick loop calls self.tick(): record each pass
        began = datetime.now(UTC)
        out = tick()
        passes.append({"at": began.isoformat(timespec="milliseconds"), "runs_sent": out.get("runs_sent", 0)})
        return out

    stack.tick = observed_tick  # type: ignore[method-assign]
    stack.start()
    driver = Driver(stack)
    steady = Scenario(
        "steady",
        f"{steady_jobs} recurring jobs, each once a minute on its own second, for {steady_window} s",
    )
    handover = Scenario("api-handover", f"{one_offs} one-offs due 5 s after they are posted")
    predispatch = Scenario(
        "pre-dispatch", f"{one_offs} one-offs due 100-130 s ahead (found by the dispatcher)"
    )
    burst_row = Scenario("burst", f"{burst} one-offs due on the same second (found by the dispatcher)")
    began = time.monotonic()
    try:
        # -- phase 1 ----------------------------------------------------------------------------------
        t0 = datetime.now(UTC)
        recurring = [
            driver.post_job(
                {
                    "type": "recurring",
                    "cron_expr": f"{i * 60 // steady_jobs} * * * * *",
                    "handler": "demo.echo",
                }
            )
            for i in range(steady_jobs)
        ]
        window = (t0 + timedelta(seconds=5), t0 + timedelta(seconds=5 + steady_window))
        base = (datetime.now(UTC) + timedelta(seconds=DISPATCHER_LEAD_SECONDS)).replace(microsecond=0)
        predispatch_ids = [
            driver.post_job(_one_off(base + timedelta(seconds=i * 30 / one_offs))) for i in range(one_offs)
        ]
        # The burst is due 10 s after phase 1's last run. A full run creates it only after phase 1,
        # so its creation and its queued messages disturb nothing; a quick run creates it now (its
        # messages then wait in the queue during phase 1's last minute) to save a minute and a half.
        due = _whole(max(window[1], base + timedelta(seconds=30)) + timedelta(seconds=10))
        burst_ids = post_burst(driver, due, burst) if quick else []
        handover_ids = []
        for _ in range(one_offs):
            handover_ids.append(driver.post_job(_one_off(_whole(datetime.now(UTC) + timedelta(seconds=5)))))
            time.sleep(0.3)
        say(f"  lateness: phase 1 ({steady_window} s of steady ticks, one-offs alongside)")
        _sleep_until(window[1])
        for job_id in recurring:
            driver.cancel(job_id)  # their ticks already handed over are dropped when due
        _sleep_until(base + timedelta(seconds=31))
        collect_one_offs(driver, handover_ids, handover)
        collect_one_offs(driver, predispatch_ids, predispatch)
        for job_id in recurring:
            for r in driver.runs(job_id):
                if window[0] <= datetime.fromisoformat(r["scheduled_for"]) < window[1]:
                    late = started_late(r)
                    if late is None:
                        steady.not_run += 1
                    else:
                        steady.values.append(late)
        # -- phase 2 ----------------------------------------------------------------------------------
        if not quick:
            due = _whole(datetime.now(UTC) + timedelta(seconds=DISPATCHER_LEAD_SECONDS))
            burst_ids = post_burst(driver, due, burst)
        say(f"  lateness: phase 2 (burst of {burst} due at {due.time()})")
        driver.settle(after=due + timedelta(seconds=1), timeout=DISPATCHER_LEAD_SECONDS + 300)
        collect_one_offs(driver, burst_ids, burst_row)
    finally:
        stack.stop()
    intervals = [
        (datetime.fromisoformat(b["at"]) - datetime.fromisoformat(a["at"])).total_seconds()
        for a, b in itertools.pairwise(passes)
    ]
    return {
        "quick": quick,
        "seconds": round(time.monotonic() - began, 1),
        "stack": stack_settings(stack),
        "dispatcher_passes": {
            "count": len(passes),
            "mean_interval_s": round(statistics.fmean(intervals), 2) if intervals else None,
            "passes": passes,
        },
        "rows": [s.row() for s in (steady, handover, predispatch, burst_row)],
    }


def render(results: dict[str, Any]) -> str:
    rows = results["rows"]
    passes = results["dispatcher_passes"]
    head = (
        "a. Lateness = handler start - scheduled_for, seconds (local stack, dispatcher pass every "
        f"{results['stack']['tick_seconds']} s: {passes['count']} passes, mean interval "
        f"{passes['mean_interval_s']} s)"
    )
    body = table(
        ["scenario", "runs", "p50", "p95", "p99", "max", "not run"],
        [
            [r["scenario"], r["runs"], r["p50_s"], r["p95_s"], r["p99_s"], r["max_s"], r["not_run"]]
            for r in rows
        ],
    )
    notes = "\n".join(f"  {r['scenario']}: {r['description']}" for r in rows)
    return f"{head}\n\n{body}\n\n{notes}"


def _one_off(run_at: datetime) -> dict[str, Any]:
    return {"type": "one_off", "run_at": run_at.isoformat(), "handler": "demo.echo"}


def _whole(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def _sleep_until(moment: datetime, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
    while (left := (moment - clock()).total_seconds()) > 0:
        time.sleep(min(left, 1.0))
