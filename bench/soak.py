"""`make soak`: a sustained mixed load on the local stack, then every accepted job accounted for.

    python -m bench.soak --minutes 10

For N minutes (the load phase) it keeps up a mix at about --rate job creations per second:
- one-off `demo.echo` jobs due 2-120 s ahead (a few are cancelled while they wait);
- a few dozen recurring jobs (`*/10 * * * * *` and `* * * * *`), some `demo.sleep` 12 s with
  overlap_policy skip (a 12 s run under a 10 s cron: every other tick is SKIPPED `overlap`),
  created over the first third of the load phase; two are cancelled half way;
- failing one-offs: `demo.fail` (max_attempts 2, backoff 1 s flat, no jitter: dead-lettered) and
  `demo.flaky` fail_times 1 (succeeds on its second attempt);
- small DAGs: two one-off roots -> a `dependent` job (some with a failing root: UPSTREAM_FAILED;
  a few with a cancelled root: the dependant is cancelled with it).
Then it stops creating, waits (up to --drain-minutes) until every one-off and dependant is terminal,
and accounts for every job the API accepted (201):
- it still exists (GET 200);
- one-offs: SUCCEEDED (flaky: on attempt 2), DEAD_LETTER (demo.fail, after 2 attempts, listed by
  GET /api/dead-letter), or CANCELLED (no run, or a CANCELLED one); exactly one run row;
- dependants: SUCCEEDED, UPSTREAM_FAILED when a root failed, CANCELLED when a root was cancelled;
- recurring: every tick after creation up to the accounting time (the cancel time for a cancelled
  job) has exactly one run row and no row is off the schedule; nothing started after a cancel;
  no run is PENDING/LEASED/RUNNING more than 2 minutes after its tick (stuck).
Every 15 s it samples this process's RSS (the embedded moto server lives in it too) and the
execution queue's depth. Bounded = RSS grows < 30 % over the second half of the load phase and
the queue's peak depth in the second half is at most 1.5x (+50) its first-half peak.

Prints a summary table, writes bench/results/soak.json. Exit status: 1 on any loss or stuck run,
2 if memory or queue depth was not bounded, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import requests

from jobsched.local.stack import LocalConfig, LocalStack, free_port

if TYPE_CHECKING:
    from mypy_boto3_sqs.literals import QueueAttributeNameType

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLE_SECONDS = 15.0
STUCK_AFTER = timedelta(minutes=2)
ACTIVE = {"PENDING", "LEASED", "RUNNING"}
ONE_OFF_FINAL = {"SUCCEEDED", "DEAD_LETTER", "CANCELLED", "UPSTREAM_FAILED", "SKIPPED", "LOST"}
FAIL_BODY: dict[str, Any] = {
    "handler": "demo.fail",
    "max_attempts": 2,
    "backoff": {"initial_seconds": 1, "multiplier": 1, "jitter": False},
}
MEMORY_GROWTH_LIMIT_PCT = 30.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@dataclass
class Tracked:
    """One job the API accepted (201), and what the soak expects of it."""

    job_id: str
    kind: str  # one_off | recurring | dependent
    label: str  # echo, fail, flaky, root, root-fail | 10s, 1m, sleep | dependant
    accepted_at: str
    due: str | None = None  # one-off run_at; a dependant: its latest root's
    period: int | None = None  # recurring: seconds between ticks (UTC-aligned)
    upstreams: list[str] = field(default_factory=list)
    cancel_sent_at: str | None = None  # DELETE answered 200
    cancelled_at: str | None = None
    cancel_refused: str | None = None  # DELETE answered 409 (a run in progress or done)

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None


@dataclass
class Problem:
    """A loss, a stuck run or another broken promise, with what was seen."""

    job_id: str
    label: str
    reason: str
    detail: str = ""


class Api:
    """The soak's HTTP client (the main thread only)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.calls = Counter[str]()
        self.create_latency: list[tuple[float, float]] = []  # (monotonic time, seconds) per 201

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        self.calls[method] += 1
        return self.session.request(method, f"{self.url}{path}", timeout=60, **kwargs)

    def create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST /api/jobs; a transport error or 5xx is retried with the same Idempotency-Key."""
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        status, payload = 0, {}
        for attempt in range(3):
            sent = time.monotonic()
            try:
                response = self.request("POST", "/api/jobs", json=body, headers=headers)
            except requests.RequestException as exc:
                status, payload = 0, {"error": repr(exc)}
            else:
                status, payload = response.status_code, response.json()
                if status == 201:
                    self.create_latency.append((sent, time.monotonic() - sent))
                if status < 500:
                    return status, payload
            time.sleep(0.5 * (attempt + 1))
        return status, payload

    def get(self, path: str, **params: Any) -> tuple[int, dict[str, Any]]:
        for attempt in range(3):
            try:
                response = self.request("GET", path, params=params or None)
                return response.status_code, response.json()
            except (requests.RequestException, ValueError):
                time.sleep(0.5 * (attempt + 1))
        return 0, {}

    def runs(self, job_id: str) -> tuple[int, list[dict[str, Any]]]:
        """Every run row of a job, newest first, through the cursor."""
        rows: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 100}
            if cursor:
                params["cursor"] = cursor
            status, page = self.get(f"/api/jobs/{job_id}/runs", **params)
            if status != 200:
                return status, rows
            rows.extend(page["items"])
            cursor = page.get("next_cursor")
            if not cursor:
                return 200, rows


# -- sampling --------------------------------------------------------------------------------------
def moto_tracked_items() -> int | None:
    """DynamoDB Item objects moto's BaseModel has registered (it keeps every instance until reset)."""
    try:
        from moto.dynamodb.models.dynamo_type import Item
    except ImportError:
        return None
    tracked = getattr(Item, "instances_tracked", None)
    return len(tracked) if tracked is not None else None


def rss_mb() -> float:
    """This process's resident set (VmRSS), in MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Sampler(threading.Thread):
    """Every SAMPLE_SECONDS: RSS, execution queue and redrive DLQ depth."""

    def __init__(self, stack: LocalStack, started: float, progress: dict[str, Any]) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.stack, self.started, self.progress = stack, started, progress
        self.samples: list[dict[str, Any]] = []
        self.errors = 0
        self._stop_event = threading.Event()
        self._sqs = boto3.client("sqs", endpoint_url=stack.endpoint_url)

    def _depth(self, url: str) -> dict[str, int]:
        names: list[QueueAttributeNameType] = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        got = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return {n: int(got.get(n, "0")) for n in names}

    def sample(self) -> None:
        row: dict[str, Any] = {
            "t_s": round(time.monotonic() - self.started, 1),
            "phase": self.progress["phase"],
            "rss_mb": round(rss_mb(), 1),
            "moto_tracked_items": moto_tracked_items(),
            "accepted": self.progress["accepted"],
        }
        try:
            queue = self._depth(self.stack.queue_url)
            dlq = self._depth(self.stack.dlq_url)
            row |= {
                "queue_visible": queue["ApproximateNumberOfMessages"],
                "queue_in_flight": queue["ApproximateNumberOfMessagesNotVisible"],
                "queue_delayed": queue["ApproximateNumberOfMessagesDelayed"],
                "queue_total": sum(queue.values()),
                "dlq_total": sum(dlq.values()),
            }
        except Exception as exc:
            self.errors += 1
            row["error"] = repr(exc)
        self.samples.append(row)
        print(
            f"  [{row['t_s']:>6.0f} s {row['phase']:<8}] accepted {row['accepted']:>5}  "
            f"rss {row['rss_mb']:>7.1f} MB  queue {row.get('queue_total', '?'):>5} "
            f"(visible {row.get('queue_visible', '?')}, in flight {row.get('queue_in_flight', '?')}, "
            f"delayed {row.get('queue_delayed', '?')})  redrive DLQ {row.get('dlq_total', '?')}  "
            f"moto items tracked {row['moto_tracked_items']}",
            flush=True,
        )

    def run(self) -> None:
        while True:
            self.sample()
            if self._stop_event.wait(SAMPLE_SECONDS):
                return

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)


# -- the load phase -------------------------------------------------------------------------------
class Load:
    """Creates the mix and remembers every job the API accepted."""

    def __init__(self, api: Api, rng: random.Random, args: argparse.Namespace, progress: dict[str, Any]):
        self.api, self.rng, self.args, self.progress = api, rng, args, progress
        self.jobs: dict[str, Tracked] = {}
        self.rejected: list[dict[str, Any]] = []
        self.cancels: list[tuple[float, str]] = []  # (monotonic time, job id)
        self.cancel_budget = {"one_off": 12, "dag": 3, "recurring": 2}

    # creation
    def _create(self, body: dict[str, Any], *, kind: str, label: str, **extra: Any) -> Tracked | None:
        status, payload = self.api.create(body)
        if status != 201:
            self.rejected.append({"label": label, "status": status, "body": payload})
            if len(self.rejected) <= 5:
                print(f"  rejected ({label}): {status} {payload}", flush=True)
            return None
        tracked = Tracked(payload["job_id"], kind, label, accepted_at=utcnow().isoformat(), **extra)
        self.jobs[tracked.job_id] = tracked
        self.progress["accepted"] = len(self.jobs)
        return tracked

    def one_off(self, label: str, low: float = 2, high: float = 120) -> Tracked | None:
        due = (utcnow() + timedelta(seconds=self.rng.uniform(low, high))).replace(microsecond=0)
        body: dict[str, Any] = {"type": "one_off", "run_at": due.isoformat(), "handler": "demo.echo"}
        if label in ("fail", "root-fail"):
            body |= FAIL_BODY
        elif label == "flaky":
            body |= {"handler": "demo.flaky", "payload": {"fail_times": 1}}
        else:
            body["payload"] = {"n": len(self.jobs)}
        return self._create(body, kind="one_off", label=label, due=due.isoformat())

    def recurring(self, label: str) -> Tracked | None:
        cron, period = ("* * * * *", 60) if label == "1m" else ("*/10 * * * * *", 10)
        body: dict[str, Any] = {"type": "recurring", "cron_expr": cron, "handler": "demo.echo"}
        if label == "sleep":
            body |= {"handler": "demo.sleep", "payload": {"seconds": 12}, "overlap_policy": "skip"}
        return self._create(body, kind="recurring", label=label, period=period)

    def dag(self) -> int:
        """Two one-off roots and their dependant; returns how many POSTs it made."""
        failing = self.rng.random() < 0.25
        roots = [self.one_off("root", 5, 120), self.one_off("root-fail" if failing else "root", 5, 120)]
        alive = [r for r in roots if r is not None]
        if len(alive) < 2:
            return len(roots)
        body = {
            "type": "dependent",
            "handler": "demo.echo",
            "depends_on": [r.job_id for r in alive],
            "name": "soak-join",
        }
        latest = max(str(r.due) for r in alive)
        self._create(
            body, kind="dependent", label="dependant", due=latest, upstreams=[r.job_id for r in alive]
        )
        lead = (parse_ts(min(str(r.due) for r in alive)) or utcnow()) - utcnow()
        if not failing and lead.total_seconds() > 40 and self._budget("dag"):
            self.cancels.append((time.monotonic() + 3, alive[0].job_id))
        return 3

    def _budget(self, what: str) -> bool:
        if self.cancel_budget[what] <= 0 or self.rng.random() > 0.2:
            return False
        self.cancel_budget[what] -= 1
        return True

    def step(self) -> int:
        """One weighted action; returns how many POSTs it made."""
        action = self.rng.choices(["echo", "fail", "flaky", "dag"], weights=[62, 9, 11, 18])[0]
        if action == "dag":
            return self.dag()
        tracked = self.one_off(action)
        if tracked is not None and action == "echo":
            lead = ((parse_ts(tracked.due) or utcnow()) - utcnow()).total_seconds()
            if lead > 30 and self._budget("one_off"):
                # Cancel while it waits, handed to SQS already (due within 90 s) or not yet.
                self.cancels.append(
                    (time.monotonic() + self.rng.uniform(1, min(20, lead - 10)), tracked.job_id)
                )
        return 1

    # cancellation
    def cancel(self, job_id: str, *, tries: int = 1) -> None:
        tracked = self.jobs[job_id]
        for attempt in range(tries):
            sent = utcnow()
            try:
                response = self.api.request("DELETE", f"/api/jobs/{job_id}")
            except requests.RequestException as exc:  # outcome unknown: a repeat DELETE answers 200 too
                tracked.cancel_refused = repr(exc)
                continue
            if response.status_code == 200:
                tracked.cancel_sent_at, tracked.cancelled_at = sent.isoformat(), utcnow().isoformat()
                tracked.cancel_refused = None
                print(f"  cancelled {tracked.label} {job_id}", flush=True)
                return
            tracked.cancel_refused = f"{response.status_code} {response.text[:200]}"
            if attempt + 1 < tries:
                time.sleep(0.5)
        if self.api.get(f"/api/jobs/{job_id}")[1].get("status") == "CANCELLED":  # it did land
            tracked.cancel_sent_at = tracked.cancelled_at = utcnow().isoformat()
            return
        print(f"  cancel refused for {tracked.label} {job_id}: {tracked.cancel_refused}", flush=True)

    def due_cancels(self) -> None:
        now = time.monotonic()
        ready = [c for c in self.cancels if c[0] <= now]
        self.cancels = [c for c in self.cancels if c[0] > now]
        for _, job_id in ready:
            self.cancel(job_id)

    def run(self, seconds: float) -> None:
        start = time.monotonic()
        end = start + seconds
        plan = (
            ["sleep"] * self.args.sleepers
            + ["1m"] * (self.args.recurring // 3)
            + ["10s"] * (self.args.recurring - self.args.sleepers - self.args.recurring // 3)
        )
        self.rng.shuffle(plan)
        spread = seconds / 3
        recurring_at = [start + i * spread / max(1, len(plan)) for i in range(len(plan))]
        halfway_done = False
        next_at = start
        while (now := time.monotonic()) < end:
            self.due_cancels()
            if not halfway_done and now >= start + seconds / 2:
                halfway_done = True
                for label in ("10s", "1m"):
                    candidates = [j for j in self.jobs.values() if j.label == label]
                    if candidates and self.cancel_budget["recurring"] > 0:
                        self.cancel_budget["recurring"] -= 1
                        self.cancel(self.rng.choice(candidates).job_id, tries=20)
            if plan and now >= recurring_at[0]:
                recurring_at.pop(0)
                self.recurring(plan.pop(0))
                next_at += 1 / self.args.rate
                continue
            if now < next_at:
                time.sleep(min(0.05, next_at - now))
                continue
            next_at += self.step() / self.args.rate
            next_at = max(next_at, now - 5)  # a slow stretch does not turn into a burst
        # Cancels still scheduled (their jobs wait further ahead): do them now.
        for _, job_id in self.cancels:
            self.cancel(job_id)
        self.cancels = []


# -- draining and accounting ---------------------------------------------------------------------
def one_off_final(t: Tracked, view: dict[str, Any]) -> bool:
    runs = view.get("recent_executions") or []
    if runs and runs[0]["status"] in ONE_OFF_FINAL:
        return True
    due = parse_ts(t.due) or utcnow()
    # Cancelled (itself, or a dependant through its root): final once its time is well past.
    return view["status"] == "CANCELLED" and utcnow() > due + timedelta(seconds=20) and not runs


def drain(api: Api, jobs: dict[str, Tracked], seconds: float) -> list[str]:
    """Wait until every one-off and dependant is final; returns the ids still open at the deadline."""
    open_ids = sorted(
        (t.job_id for t in jobs.values() if t.kind != "recurring"), key=lambda i: str(jobs[i].due)
    )
    deadline = time.monotonic() + seconds
    while open_ids and time.monotonic() < deadline:
        still = []
        for job_id in open_ids:
            t = jobs[job_id]
            if (parse_ts(t.due) or utcnow()) > utcnow() or time.monotonic() > deadline:
                still.append(job_id)
                continue
            status, view = api.get(f"/api/jobs/{job_id}")
            if status != 200 or not one_off_final(t, view):
                still.append(job_id)
        open_ids = still
        if open_ids:
            print(f"  draining: {len(open_ids)} one-offs/dependants not final yet", flush=True)
            time.sleep(5)
    return open_ids


@dataclass
class Accounting:
    problems: list[Problem] = field(default_factory=list)
    stuck: list[Problem] = field(default_factory=list)
    unfinished: list[Problem] = field(default_factory=list)  # still on its way, under 2 minutes late
    statuses: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    executed: int = 0
    lateness_s: list[float] = field(default_factory=list)
    latest: list[dict[str, Any]] = field(default_factory=list)  # the latest first attempts
    ticks_expected: int = 0
    ticks_found: int = 0
    dead_letter_listed: int = 0

    def lose(self, t: Tracked, reason: str, detail: str = "") -> None:
        self.problems.append(Problem(t.job_id, t.label, reason, detail))

    def count(self, t: Tracked, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            self.statuses[r["status"]] += 1
            if r.get("reason"):
                self.reasons[str(r["reason"]).split(" ")[0]] += 1
            started = parse_ts(r.get("started_at"))
            if started:
                self.executed += 1
                # A retry starts late by design; a dependant's scheduled_for is its creation time.
                if attempt_of(r) == 1 and t.kind != "dependent":
                    late = (started - (parse_ts(r["scheduled_for"]) or started)).total_seconds()
                    self.lateness_s.append(late)
                    if late > 10:
                        self.latest.append(
                            {"late_s": round(late, 3), "job_id": t.job_id, "label": t.label}
                            | {k: r.get(k) for k in ("scheduled_for", "started_at", "status")}
                        )


def attempt_of(row: dict[str, Any]) -> int:
    """The run's attempt number: `attempts` in the history endpoint, `attempt` in recent_executions."""
    value = row.get("attempt", row.get("attempts"))
    return int(value) if isinstance(value, int | str) else 0


def brief(rows: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{r['scheduled_for']} {r['status']} attempts={attempt_of(r)}"
        + (f" error={(r.get('error') or {}).get('type')}" if r.get("error") else "")
        for r in rows[:5]
    )


def expected_one_off(t: Tracked) -> str:
    if t.cancelled:
        return "CANCELLED"
    if t.label in ("fail", "root-fail"):
        return "DEAD_LETTER"
    return "SUCCEEDED"


def account_single(
    acc: Accounting,
    t: Tracked,
    view: dict[str, Any],
    rows: list[dict[str, Any]],
    jobs: dict[str, Tracked],
    until: datetime,
) -> None:
    """A one-off or a dependant: one run row, in the status its kind promises."""
    acc.count(t, rows)
    if len(rows) > 1:
        acc.lose(t, "more than one run row", brief(rows))
    if t.kind == "dependent":
        roots = [jobs[u] for u in t.upstreams]
        if any(r.cancelled for r in roots):
            want = "CANCELLED"
        elif any(r.label == "root-fail" for r in roots):
            want = "UPSTREAM_FAILED"
        else:
            want = "SUCCEEDED"
    else:
        want = expected_one_off(t)
    row = rows[0] if rows else None
    if want == "CANCELLED":
        if view["status"] != "CANCELLED":
            acc.lose(t, "cancelled (200) but the job is not CANCELLED", f"job status {view['status']}")
        if row is not None and (row["status"] != "CANCELLED" or row.get("started_at")):
            acc.lose(t, "cancelled (200) but its run went on", brief(rows))
        return
    if row is None:
        acc.lose(t, f"no run row (expected {want})", f"job status {view['status']}, due {t.due}")
        return
    if row["status"] != want:
        if row["status"] in {*ACTIVE, "FAILED"}:  # on its way (a retry waits in FAILED)
            old = (parse_ts(row["scheduled_for"]) or until) < until - STUCK_AFTER
            problem = Problem(t.job_id, t.label, f"{row['status']}, expected {want}", brief(rows))
            (acc.stuck if old else acc.unfinished).append(problem)
        else:
            acc.lose(t, f"wrong outcome: {row['status']}, expected {want}", brief(rows))
        return
    attempts = attempt_of(row)
    if t.label == "flaky" and attempts != 2:
        acc.lose(t, f"flaky succeeded on attempt {attempts}, expected 2", brief(rows))
    if want == "DEAD_LETTER" and attempts != 2:
        acc.lose(t, f"dead-lettered after {attempts} attempts, expected 2", brief(rows))


def account_recurring(
    acc: Accounting, t: Tracked, view: dict[str, Any], rows: list[dict[str, Any]], until: datetime
) -> None:
    """Every tick in (created, until] has exactly one row; none off-schedule, stuck or run after a cancel."""
    acc.count(t, rows)
    assert t.period is not None
    created = parse_ts(view["created_at"]) or utcnow()
    cancelled_at = parse_ts(t.cancelled_at)
    end = parse_ts(t.cancel_sent_at) if cancelled_at else until
    assert end is not None
    by_tick = Counter(parse_ts(r["scheduled_for"]) for r in rows if r.get("kind", "scheduled") == "scheduled")
    for tick, n in by_tick.items():
        if n > 1:
            acc.lose(t, "two run rows for one tick", f"{tick} x{n}")
        if tick is not None and (tick.timestamp() % t.period or tick.microsecond):
            acc.lose(t, "run row off the schedule", f"{tick.isoformat()}")
    epoch = int(created.timestamp()) // t.period * t.period + t.period
    expected = [datetime.fromtimestamp(s, UTC) for s in range(epoch, int(end.timestamp()) + 1, t.period)]
    missing = [tick for tick in expected if tick not in by_tick]
    acc.ticks_expected += len(expected)
    acc.ticks_found += len(expected) - len(missing)
    if missing:
        acc.lose(
            t,
            f"{len(missing)} of {len(expected)} ticks have no run row",
            "missing "
            + ", ".join(m.isoformat() for m in missing[:6])
            + (" ..." if len(missing) > 6 else "")
            + f" (created {created.isoformat()}, window end {end.isoformat()})",
        )
    for r in rows:
        sf = parse_ts(r["scheduled_for"]) or until
        started = parse_ts(r.get("started_at"))
        if r["status"] in ACTIVE and sf < until - STUCK_AFTER:
            acc.stuck.append(
                Problem(
                    t.job_id,
                    t.label,
                    f"stuck {r['status']}",
                    f"{r['scheduled_for']} attempts={attempt_of(r)}",
                )
            )
        elif r["status"] in {"FAILED", "DEAD_LETTER", "LOST", "UPSTREAM_FAILED"}:
            acc.lose(t, f"run {r['status']}", brief([r]))
        if cancelled_at and started and started > cancelled_at:
            acc.lose(t, "a run started after the cancel was answered", brief([r]))
        if cancelled_at and sf > cancelled_at and r["status"] not in {"CANCELLED", "SKIPPED"}:
            acc.lose(t, f"a tick after the cancel is {r['status']}", brief([r]))
    if cancelled_at and view["status"] != "CANCELLED":
        acc.lose(t, "cancelled (200) but the job is not CANCELLED", f"job status {view['status']}")


def account(api: Api, jobs: dict[str, Tracked]) -> Accounting:
    acc = Accounting()
    until = utcnow() - timedelta(seconds=5)
    for t in jobs.values():
        status, view = api.get(f"/api/jobs/{t.job_id}")
        if status != 200:
            acc.lose(t, f"vanished: GET answered {status}", str(view)[:200])
            continue
        if t.kind == "recurring":
            status, rows = api.runs(t.job_id)
            if status != 200:
                acc.lose(t, f"run history answered {status}")
                continue
            account_recurring(acc, t, view, rows, until)
        else:
            account_single(acc, t, view, view.get("recent_executions") or [], jobs, until)
    # Every dead-lettered demo.fail run is listed by the dead-letter API.
    listed: set[str] = set()
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100} | ({"cursor": cursor} if cursor else {})
        status, page = api.get("/api/dead-letter", **params)
        if status != 200:
            break
        listed |= {item["job_id"] for item in page["items"]}
        cursor = page.get("next_cursor")
        if not cursor:
            break
    acc.dead_letter_listed = len(listed)
    for t in jobs.values():
        if t.label in ("fail", "root-fail") and not t.cancelled and t.job_id not in listed:
            acc.lose(t, "dead-lettered run missing from GET /api/dead-letter")
    return acc


# -- report -------------------------------------------------------------------------------------------
def bounded(samples: list[dict[str, Any]], load_seconds: float) -> dict[str, Any]:
    load = [s for s in samples if s["phase"] == "load"]
    mid = load_seconds / 2
    first = [s for s in load if s["t_s"] < mid]
    second = [s for s in load if s["t_s"] >= mid]
    out: dict[str, Any] = {}
    if first and second:
        base = second[0]["rss_mb"]
        out["rss_mid_mb"] = base
        out["rss_second_half_max_mb"] = max(s["rss_mb"] for s in second)
        out["rss_growth_second_half_pct"] = round((out["rss_second_half_max_mb"] - base) / base * 100, 1)
        out["memory_bounded"] = out["rss_growth_second_half_pct"] < MEMORY_GROWTH_LIMIT_PCT
        q1 = max((s.get("queue_total", 0) for s in first), default=0)
        q2 = max((s.get("queue_total", 0) for s in second), default=0)
        out["queue_first_half_max"], out["queue_second_half_max"] = q1, q2
        out["queue_bounded"] = q2 <= max(1.5 * q1, q1 + 50)
    else:  # a run too short to have two halves
        out["memory_bounded"] = out["queue_bounded"] = True
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))] if ordered else 0.0


def summarize(
    args: argparse.Namespace,
    load: Load,
    acc: Accounting,
    sampler: Sampler,
    phases: dict[str, float],
    still_open: list[str],
) -> dict[str, Any]:
    """Everything the table shows, and more, for the JSON."""
    jobs = list(load.jobs.values())
    samples = sampler.samples
    peak_rss = max(
        [s["rss_mb"] for s in samples] + [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]
    )
    first_attempt = acc.lateness_s
    return {
        "load_minutes": args.minutes,
        **{f"{k}_s": round(v, 1) for k, v in phases.items()},
        "rate_target_per_s": args.rate,
        "rate_achieved_per_s": round(
            sum(1 for t in jobs if t.kind != "recurring") / max(1.0, phases["load"]), 2
        ),
        "jobs_accepted": len(jobs),
        "accepted_by_kind": dict(sorted(Counter(f"{t.kind}:{t.label}" for t in jobs).items())),
        "rejected": len(load.rejected),
        "cancelled": sum(1 for t in jobs if t.cancelled),
        "cancel_refused": sum(1 for t in jobs if t.cancel_refused and not t.cancelled),
        "run_rows": sum(acc.statuses.values()),
        "runs_executed": acc.executed,
        "runs_by_status": dict(sorted(acc.statuses.items())),
        "skip_reasons": dict(sorted(acc.reasons.items())),
        "dead_lettered": acc.statuses.get("DEAD_LETTER", 0),
        "dead_letter_api_jobs": acc.dead_letter_listed,
        "recurring_ticks_expected": acc.ticks_expected,
        "recurring_ticks_with_row": acc.ticks_found,
        "lateness_first_attempt_p50_s": round(percentile(first_attempt, 50), 3),
        "lateness_first_attempt_p99_s": round(percentile(first_attempt, 99), 3),
        "lateness_first_attempt_max_s": round(max(first_attempt, default=0.0), 3),
        "lateness_first_attempt_mean_s": round(statistics.fmean(first_attempt), 3) if first_attempt else 0.0,
        "first_attempts_over_10_s_late": dict(sorted(Counter(r["label"] for r in acc.latest).items())),
        "not_final_after_drain": len(still_open),
        "losses": len(acc.problems),
        "stuck": len(acc.stuck),
        "on_their_way_under_2_min": len(acc.unfinished),
        "peak_rss_mb": round(peak_rss, 1),
        "moto_tracked_items_end": samples[-1].get("moto_tracked_items") if samples else None,
        **create_latency(load.api.create_latency),
        "max_queue_depth": max((s.get("queue_total", 0) for s in samples), default=0),
        "max_queue_visible": max((s.get("queue_visible", 0) for s in samples), default=0),
        "max_redrive_dlq_depth": max((s.get("dlq_total", 0) for s in samples), default=0),
        "sampler_errors": sampler.errors,
        **bounded(samples, phases["load"]),
    }


def create_latency(latency: list[tuple[float, float]]) -> dict[str, float]:
    """POST /api/jobs p50 over the first and the last minute of the load phase."""
    if not latency:
        return {}
    start, end = latency[0][0], latency[-1][0]
    first = [d for t, d in latency if t < start + 60]
    last = [d for t, d in latency if t >= end - 60]
    return {
        "create_p50_first_minute_s": round(percentile(first, 50), 3),
        "create_p50_last_minute_s": round(percentile(last, 50), 3),
        "create_p99_s": round(percentile([d for _, d in latency], 99), 3),
    }


def table(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary as (metric, value) rows."""
    s = summary
    ok = {True: "bounded", False: "NOT bounded"}
    growth = s.get("rss_growth_second_half_pct", 0.0)
    halves = f"{s.get('queue_first_half_max', '-')} / {s.get('queue_second_half_max', '-')}"
    lateness = [s[f"lateness_first_attempt_{q}_s"] for q in ("p50", "p99", "max")]
    return [
        ("duration", f"load {s['load_s']:.0f} s + drain {s['drain_s']:.0f} s (total {s['total_s']:.0f} s)"),
        (
            "jobs accepted",
            f"{s['jobs_accepted']} (non-recurring ~{s['rate_achieved_per_s']}/s), rejected {s['rejected']}",
        ),
        *[(f"  {k}", str(v)) for k, v in s["accepted_by_kind"].items()],
        ("cancelled", f"{s['cancelled']} (refused 409: {s['cancel_refused']})"),
        ("run rows", str(s["run_rows"])),
        ("runs executed", f"{s['runs_executed']} (handler started)"),
        *[(f"  {k}", str(v)) for k, v in s["runs_by_status"].items()],
        ("skip reasons", ", ".join(f"{k} {v}" for k, v in s["skip_reasons"].items()) or "-"),
        ("dead-lettered", f"{s['dead_lettered']} (jobs in /api/dead-letter: {s['dead_letter_api_jobs']})"),
        (
            "recurring ticks",
            f"{s['recurring_ticks_with_row']} of {s['recurring_ticks_expected']} with a run row",
        ),
        ("lateness p50/p99/max", " / ".join(f"{v:.3f}" for v in lateness) + " s (first attempts)"),
        (
            "first attempts > 10 s late",
            ", ".join(f"{k} {v}" for k, v in s["first_attempts_over_10_s_late"].items()) or "0",
        ),
        ("not final after drain", str(s["not_final_after_drain"])),
        ("losses (0 expected)", str(s["losses"])),
        ("stuck runs (0 expected)", str(s["stuck"])),
        ("on their way (< 2 min late)", str(s["on_their_way_under_2_min"])),
        (
            "POST /api/jobs p50",
            f"{s.get('create_p50_first_minute_s', 0):.3f} s first minute, "
            f"{s.get('create_p50_last_minute_s', 0):.3f} s last minute "
            f"(p99 {s.get('create_p99_s', 0):.3f} s)",
        ),
        (
            "peak RSS",
            f"{s['peak_rss_mb']:.1f} MB (moto DynamoDB items tracked: {s['moto_tracked_items_end']})",
        ),
        (
            "RSS growth, 2nd half",
            f"{growth} % ({ok[s['memory_bounded']]}, limit {MEMORY_GROWTH_LIMIT_PCT:g} %)",
        ),
        (
            "max queue depth",
            f"{s['max_queue_depth']} (visible {s['max_queue_visible']}; "
            f"halves {halves}, {ok[s['queue_bounded']]})",
        ),
        ("max redrive DLQ depth", str(s["max_redrive_dlq_depth"])),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10, help="length of the load phase")
    parser.add_argument("--rate", type=float, default=2.0, help="job creations per second")
    parser.add_argument("--recurring", type=int, default=30, help="recurring jobs in all")
    parser.add_argument("--sleepers", type=int, default=3, help="of which demo.sleep 12 s, every 10 s")
    parser.add_argument("--drain-minutes", type=float, default=3, help="how long to wait for in-flight work")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    config = LocalConfig(api_port=free_port(), tick_seconds=60)
    stack = LocalStack(config).start()
    started = time.monotonic()
    wall_start = utcnow()
    progress: dict[str, Any] = {"phase": "load", "accepted": 0}
    sampler = Sampler(stack, started, progress)
    api = Api(stack.api_url)
    load = Load(api, random.Random(args.seed), args, progress)
    print(
        f"soak: local stack at {stack.api_url} (tick {config.tick_seconds} s, look-ahead "
        f"{stack.config.lookahead_seconds} s); {args.minutes:g} min load at ~{args.rate:g} jobs/s",
        flush=True,
    )
    phases: dict[str, float] = {}
    sampler.start()
    try:
        load.run(args.minutes * 60)
        phases["load"] = time.monotonic() - started
        progress["phase"] = "drain"
        print(f"soak: load phase over after {phases['load']:.0f} s; draining", flush=True)
        still_open = drain(api, load.jobs, args.drain_minutes * 60)
        phases["drain"] = time.monotonic() - started - phases["load"]
        progress["phase"] = "account"
        print(f"soak: accounting for {len(load.jobs)} jobs", flush=True)
        acc = account(api, load.jobs)
        sampler.sample()
    finally:
        sampler.stop()
        stack.stop()
    phases["total"] = time.monotonic() - started

    summary = summarize(args, load, acc, sampler, phases, still_open)
    rows = table(summary)
    print(f"\nSoak on the local stack ({wall_start:%Y-%m-%d %H:%M} UTC, dispatcher tick 60 s)\n")
    width = max(len(k) for k, _ in rows)
    print(f"{'metric':<{width}}  value")
    print("-" * (width + 64))
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    for title, found in (("LOSSES", acc.problems), ("STUCK", acc.stuck), ("ON THEIR WAY", acc.unfinished)):
        if found:
            print(f"\n{title}:")
            for p in found[:40]:
                print(f"  {p.job_id} [{p.label}] {p.reason}  {p.detail}")
            if len(found) > 40:
                print(f"  ... {len(found) - 40} more in the JSON")
    if still_open:
        print(f"\nnot final after the drain: {', '.join(still_open[:20])}")

    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "soak.json"
    report = {
        "generated_at": utcnow().isoformat(),
        "args": vars(args),
        "summary": summary,
        "table": [{"metric": k.strip(), "value": v} for k, v in rows],
        "losses": [asdict(p) for p in acc.problems],
        "stuck": [asdict(p) for p in acc.stuck],
        "on_their_way": [asdict(p) for p in acc.unfinished],
        "late_first_attempts_over_10_s": sorted(acc.latest, key=lambda r: -float(r["late_s"])),
        "not_final_after_drain": still_open,
        "rejected": load.rejected[:50],
        "samples": sampler.samples,
        "jobs": [asdict(t) for t in load.jobs.values()],
    }
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwritten to {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")
    if acc.problems or acc.stuck:
        sys.exit(1)
    if not (summary["memory_bounded"] and summary["queue_bounded"]):
        sys.exit(2)


if __name__ == "__main__":
    main()
