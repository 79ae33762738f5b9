"""The `jobsched` parser and its job commands (submit, get, edit, ...); see jobsched/cli/__init__.py."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from jobsched import constants as c
from jobsched.cli import admin, ops, render
from jobsched.cli import console as console_cli
from jobsched.cli import worker as worker_cli
from jobsched.cli.http import Unreachable, request


def call(
    args: argparse.Namespace,
    method: str,
    path: str,
    payload: Any = None,
    headers: dict[str, str] | None = None,
) -> int:
    """Send one API request, show its answer (JSON, or a table on a terminal), return an exit code."""
    try:
        answer = request(args, method, path, payload, headers)
    except Unreachable as exc:
        print(f"jobsched: {exc}", file=sys.stderr)
        return 2
    if answer.body is None:
        print(answer.text)
    elif answer.ok:
        render.show(args, answer.body)
    else:
        render.print_json(answer.body)  # an error as the API gave it, whatever --output says
    return 0 if answer.ok else 1


def cmd_local(args: argparse.Namespace) -> int:
    """Run the local stack until interrupted."""
    from jobsched.local.stack import serve_forever

    serve_forever()
    return 0


class UsageError(Exception):
    """A command line that cannot make a request; main() prints it and exits with status 2."""


# (flag dest, body field) of the job fields both `submit` and `edit` take.
_JOB_FLAGS = (
    ("handler", "handler"),
    ("target", "target"),
    ("name", "name"),
    ("payload", "payload"),
    ("cron", "cron_expr"),
    ("timezone", "timezone"),
    ("max_attempts", "max_attempts"),
    ("backoff", "backoff"),
    ("timeout", "timeout_seconds"),
    ("overlap", "overlap_policy"),
    ("catchup", "catchup"),
    ("max_catchup", "max_catchup"),
    ("jitter", "jitter_seconds"),
    ("concurrency", "concurrency"),
)
# The flag that says when a job runs, and the type it implies when --type is not given.
_TYPE_OF_FLAG = (
    ("run_at", "--run-at", "one_off"),
    ("cron", "--cron", "recurring"),
    ("depends_on", "--depends-on", "dependent"),
)


def _job_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The body fields the job flags name (a flag not given is left out)."""
    return {field: getattr(args, dest) for dest, field in _JOB_FLAGS if getattr(args, dest) is not None}


def submit_body(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /api/jobs body: --json, overridden by the flags; the type from --type or implied."""
    body: dict[str, Any] = {**(args.json or {}), **_job_fields(args)}
    if args.run_at is not None:
        body["run_at"] = args.run_at
    if args.depends_on is not None:
        body["depends_on"] = [upstream for upstream in args.depends_on.split(",") if upstream]
    implied = {kind: flag for dest, flag, kind in _TYPE_OF_FLAG if getattr(args, dest) is not None}
    if args.type is not None:
        body["type"] = args.type
    elif len(implied) > 1:
        raise UsageError(
            f"submit: {' and '.join(implied.values())} imply different job types; pass --type or one of them"
        )
    elif implied:
        body["type"] = next(iter(implied))
    if "type" not in body:
        raise UsageError(
            "submit: say when the job runs: --run-at (one_off), --cron (recurring), "
            "--depends-on (dependent), or --type"
        )
    return body


def cmd_submit(args: argparse.Namespace) -> int:
    """POST /api/jobs (or, with --file, POST /api/jobs/batch per 100 lines of a JSONL file)."""
    if args.file:
        return submit_file(args)
    body = submit_body(args)
    key = args.idempotency_key or str(uuid.uuid4())
    return call(args, "POST", "/api/jobs", body, {c.IDEMPOTENCY_HEADER: key})


BATCH_SIZE = 100  # POST /api/jobs/batch's limit


def submit_file(args: argparse.Namespace) -> int:
    """Every line of a JSONL file a job (a POST /api/jobs body, optionally with its own
    `idempotency_key`), created 100 a request with a progress bar; a summary and each failed line.

    Each request carries an Idempotency-Key derived from the file's content and the request's place
    in it, so running the same file again (after a crash, a timeout) creates nothing twice; a line's
    own key stays its own. (A batch's key, not a key per line: the API packs a batch's plain
    one-offs into one item, docs/api.md, and a one-off with a key of its own is its own item.)"""
    import hashlib

    with open(args.file, "rb") as f:
        raw = f.read()
    digest = hashlib.sha256(raw).hexdigest()[:16]
    jobs: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(raw.decode().splitlines(), start=1):
        if line.strip():
            jobs.append((number, json.loads(line)))
    created, failed = 0, []
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("submitting"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=render.console(stderr=True), transient=True) as progress:
        task = progress.add_task("submit", total=len(jobs))
        for start in range(0, len(jobs), BATCH_SIZE):
            chunk = jobs[start : start + BATCH_SIZE]
            try:
                key = {c.IDEMPOTENCY_HEADER: f"file-{digest}-{start // BATCH_SIZE}"}
                answer = request(args, "POST", "/api/jobs/batch", {"jobs": [b for _, b in chunk]}, key)
                body, ok = answer.body, answer.ok
            except Unreachable as exc:
                body, ok = {"error": {"code": "unreachable", "message": str(exc)}}, False
            items = body.get("items") if isinstance(body, dict) else None
            if not ok or not isinstance(items, list):
                failed += [{"line": n, "error": body} for n, _ in chunk]
            else:
                for (number, _), item in zip(chunk, items, strict=True):
                    if "error" in item:
                        failed.append({"line": number, "error": item["error"]})
                    else:
                        created += 1
            progress.advance(task, len(chunk))
    print(json.dumps({"created": created, "failed": len(failed), "errors": failed}, indent=2))
    return 0 if not failed else 1


def cmd_get(args: argparse.Namespace) -> int:
    """GET /api/jobs/{id}."""
    return call(args, "GET", f"/api/jobs/{args.job_id}")


def cmd_cancel(args: argparse.Namespace) -> int:
    """DELETE /api/jobs/{id}."""
    return call(args, "DELETE", f"/api/jobs/{args.job_id}")


def cmd_dead_letter(args: argparse.Namespace) -> int:
    """GET /api/dead-letter."""
    query = {"limit": str(args.limit)}
    if args.cursor:
        query["cursor"] = args.cursor
    if args.job_id:
        query["job_id"] = args.job_id
    return call(args, "GET", "/api/dead-letter?" + urllib.parse.urlencode(query))


def cmd_replay(args: argparse.Namespace) -> int:
    """POST /api/dead-letter/{run_id}/replay."""
    key = args.idempotency_key or str(uuid.uuid4())
    return call(args, "POST", f"/api/dead-letter/{args.run_id}/replay", headers={c.IDEMPOTENCY_HEADER: key})


def cmd_control(args: argparse.Namespace) -> int:
    """POST /api/jobs/{id}/pause | resume | run."""
    return call(args, "POST", f"/api/jobs/{args.job_id}/{args.action}")


def edit_body(args: argparse.Namespace) -> dict[str, Any]:
    """The PATCH /api/jobs/{id} body: --json, overridden by the flags."""
    return {**(args.json or {}), **_job_fields(args)}


def cmd_edit(args: argparse.Namespace) -> int:
    """PATCH /api/jobs/{id}."""
    return call(args, "PATCH", f"/api/jobs/{args.job_id}", edit_body(args))


def cmd_graph(args: argparse.Namespace) -> int:
    """GET /api/jobs/{id}/graph[?period=], printed as a tree of edges and a status table per period."""
    path = f"/api/jobs/{args.job_id}/graph"
    if args.period:
        path += "?" + urllib.parse.urlencode({"period": args.period})
    if args.json:
        return call(args, "GET", path)
    graph = ops.get(args, path)
    if args.output == "json":
        render.print_json(graph)
        return 0
    names = {n["job_id"]: n["name"] or n["job_id"] for n in graph["nodes"]}
    for edge in graph["edges"]:
        print(f"{names[edge['upstream']]} -> {names[edge['dependant']]}")
    for period in graph["periods"]:
        print(f"\nperiod {period['period']}")
        for job_id, status in sorted(period["status"].items(), key=lambda kv: names[kv[0]]):
            print(f"  {names[job_id]:<30} {status}")
    return 0


def cmd_cron_next(args: argparse.Namespace) -> int:
    """Print the next N fire times exactly as the dispatcher computes them."""
    from jobsched import cron

    try:
        schedule = cron.parse(args.expr, args.tz)
        after = datetime.fromisoformat(args.after) if args.after else datetime.now(UTC)
        if after.tzinfo is None:
            raise cron.CronError("--after must carry a UTC offset, e.g. 2026-11-30T00:00:00+00:00")
    except (cron.CronError, ValueError) as exc:
        print(f"jobsched: {exc}", file=sys.stderr)
        return 2
    zone = UTC if args.utc else ZoneInfo(schedule.timezone)
    for _ in range(args.n):
        after = schedule.next_after(after)
        # Milliseconds in either zone, as the API shows every timestamp (times.iso).
        print(after.astimezone(zone).isoformat(timespec="milliseconds"))
    return 0


def cmd_capacity(args: argparse.Namespace) -> int:
    """Plan shards, dispatcher and worker concurrency, DynamoDB units and cost per day; simulate the burst."""
    from jobsched.planning import inputs, report, simulate
    from jobsched.planning.plan import plan as make_plan

    per_run = inputs.PerRunCosts()
    if args.costs:
        try:
            with open(args.costs, encoding="utf-8") as handle:
                data = json.load(handle)
            if not isinstance(data, dict):
                raise ValueError("costs: the file must hold a JSON object")
            per_run = inputs.PerRunCosts.from_mapping(data, source=args.costs)
        except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            print(f"jobsched: {exc}", file=sys.stderr)
            return 2
    workload = inputs.Workload(
        jobs=args.jobs,
        burst=args.burst,
        window_s=args.window,
        steady_rate=args.steady_rate,
        spread_s=args.spread,
        handler_ms=args.handler_ms,
        p99_targets_s=tuple(args.p99_target),
    )
    latencies = inputs.Latencies(
        dynamodb_ms=args.dynamodb_ms, sqs_ms=args.sqs_ms, invoke_ms=args.invoke_ms, tail=args.tail
    )
    limits = inputs.Limits(table_quota=args.table_quota, account_concurrency=args.account_concurrency)
    results: list[report.Evaluated] = []
    for shards in args.shards or [None]:
        try:
            plan = make_plan(
                workload,
                shards=shards,
                lookahead_s=args.lookahead,
                parallelism=args.parallelism,
                concurrency=args.concurrency,
                worker_threads=args.worker_threads,
                esm_mode=args.esm,
                per_run=per_run,
                latencies=latencies,
                limits=limits,
            )
        except ValueError as exc:
            print(f"jobsched: {exc}", file=sys.stderr)
            return 2
        sim = None if args.no_simulate else simulate.simulate(plan, seed=args.seed)
        results.append((plan, sim))
    if args.json:
        print(report.as_json(results))
    else:
        print(report.as_text(results))
        if args.lane_runs:
            print(report.lanes_text(results, lane_runs=args.lane_runs, lane=args.lane, seed=args.seed))
    return 0 if all(plan.ok and (sim is None or sim.met) for plan, sim in results) else 1


def _json_object(text: str) -> dict[str, Any]:
    """An argument that is a JSON object (argparse reports anything else as a usage error)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _add_job_flags(p: argparse.ArgumentParser) -> None:
    """The job fields `submit` and `edit` both take (see _JOB_FLAGS)."""
    from typing import get_args

    from jobsched.domain.models import CatchupPolicy, OverlapPolicy

    p.add_argument("--handler", help="a registered handler's dotted name")
    p.add_argument(
        "--target",
        type=_json_object,
        help='JSON target, e.g. {"type": "http", "url": "https://..."} (or --handler)',
    )
    p.add_argument("--name", help="a label")
    p.add_argument("--payload", type=_json_object, help="JSON object")
    p.add_argument("--cron", help="cron expression (recurring job)")
    p.add_argument("--timezone", help="IANA timezone the cron fields are read in (default UTC)")
    p.add_argument("--max-attempts", type=int, help="attempts in all, 1..25")
    p.add_argument(
        "--backoff",
        type=_json_object,
        help="JSON object with initial_seconds, multiplier, max_seconds, jitter (see the API)",
    )
    p.add_argument("--timeout", type=int, help="timeout_seconds of one attempt, 1..43200")
    p.add_argument("--overlap", choices=get_args(OverlapPolicy), help="overlap_policy (recurring)")
    p.add_argument("--catchup", choices=get_args(CatchupPolicy), help="catch-up policy (recurring)")
    p.add_argument("--max-catchup", type=int, help="with --catchup all: how many missed ticks still run")
    p.add_argument("--jitter", type=int, help="jitter_seconds (recurring)")
    p.add_argument(
        "--concurrency",
        type=_concurrency,
        metavar="KEY:LIMIT",
        help="at most LIMIT runs of the tenant's concurrency key KEY at once (docs/api.md)",
    )


def _concurrency(text: str) -> dict[str, Any]:
    """--concurrency KEY:LIMIT as the body's {"key", "limit"} (the API checks both)."""
    key, sep, limit = text.rpartition(":")
    if not sep or not limit.isdigit():
        raise argparse.ArgumentTypeError("must be KEY:LIMIT, e.g. db:2")
    return {"key": key, "limit": int(limit)}


def parser() -> argparse.ArgumentParser:
    """The argument parser."""
    from typing import get_args

    from jobsched.domain.models import JobType

    top = argparse.ArgumentParser(prog="jobsched", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)

    def client(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("--api-url", help=f"API base URL (default ${c.API_URL_ENV} or http://127.0.0.1:8080)")
        p.add_argument("--tenant", help="X-Tenant header (local stack only)")
        p.add_argument("--sigv4", action="store_true", help="SigV4-sign (automatic for execute-api URLs)")
        p.add_argument(
            "--output",
            choices=["table", "json"],
            help="table (the default on a terminal) or json (the default when piped)",
        )
        return p

    def polling(p: argparse.ArgumentParser, default: float) -> None:
        p.add_argument("--interval", type=float, default=default, help=f"seconds between polls ({default})")

    sub.add_parser("local", help="run the local stack (what `make run` starts)").set_defaults(func=cmd_local)

    p = client("submit", "create a job")
    p.add_argument(
        "--type",
        choices=get_args(JobType),
        help="default: implied by --run-at, --cron or --depends-on",
    )
    p.add_argument("--run-at", help="ISO-8601 time with offset (one-off job)")
    p.add_argument("--depends-on", help="comma-separated upstream job ids (a dependent job)")
    _add_job_flags(p)
    p.add_argument("--idempotency-key")
    p.add_argument(
        "--json", type=_json_object, help="the whole request body as JSON (flags override its fields)"
    )
    p.add_argument("--file", help="a JSONL file, a job per line: 100 a request (POST /api/jobs/batch)")
    p.set_defaults(func=cmd_submit)

    p = client("get", "show a job and its recent runs")
    p.add_argument("job_id")
    p.set_defaults(func=cmd_get)

    p = client("cancel", "cancel a job")
    p.add_argument("job_id")
    p.set_defaults(func=cmd_cancel)

    for action, help_ in (
        ("pause", "stop handing a job's ticks over"),
        ("resume", "resume a paused job (missed ticks follow its catch-up policy)"),
        ("run", "run a job now (a manual run, honouring its overlap policy)"),
    ):
        p = client(action, help_)
        p.add_argument("job_id")
        p.set_defaults(func=cmd_control, action=action)

    p = client("edit", "change a job (PATCH)")
    p.add_argument("job_id")
    _add_job_flags(p)
    p.add_argument("--json", type=_json_object, help="the PATCH body as JSON (flags override its fields)")
    p.set_defaults(func=cmd_edit)

    p = client("backfill", "create the runs of every past tick in [from, to) that has none")
    p.add_argument("job_id")
    p.add_argument("--from", dest="start", required=True, help="ISO-8601 with offset")
    p.add_argument("--to", dest="end", required=True, help="ISO-8601 with offset")
    p.add_argument("--no-wait", action="store_true", help="answer once accepted; do not follow progress")
    polling(p, 1.0)
    p.set_defaults(func=ops.cmd_backfill)

    p = client("runs", "a job's run history, newest first (--watch: a live view)")
    p.add_argument("job_id")
    p.add_argument("--from", dest="start")
    p.add_argument("--to", dest="end")
    p.add_argument("--status")
    p.add_argument("--cursor")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--watch", action="store_true", help="refresh every --interval seconds until Ctrl-C")
    p.add_argument("--iterations", type=int, help="with --watch: stop after N refreshes")
    polling(p, 2.0)
    p.set_defaults(func=ops.cmd_runs)

    p = client("list", "the caller's jobs, newest first (GET /api/jobs)")
    ops.add_filter_flags(p)
    p.add_argument("--order", choices=["created", "next_run"], default="created")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--cursor")
    p.add_argument("--all", action="store_true", help="follow next_cursor to the last page")
    p.set_defaults(func=ops.cmd_list)

    p = client("stats", "a job's runs by status, lateness and duration percentiles")
    p.add_argument("job_id")
    p.add_argument("--since", help="ISO-8601 with offset")
    p.set_defaults(func=ops.cmd_stats)

    p = client("logs", "a run's log lines (--follow: until the run has finished)")
    p.add_argument("run_id")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--cursor")
    polling(p, 2.0)
    p.set_defaults(func=ops.cmd_logs)

    p = client("actions", "pause, resume, cancel or run_now many jobs: by id, or by the listing's filter")
    p.add_argument("action", choices=["pause", "resume", "cancel", "run_now"])
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID")
    ops.add_filter_flags(p)
    p.add_argument("--no-wait", action="store_true", help="answer once accepted; do not follow progress")
    polling(p, 1.0)
    p.set_defaults(func=ops.cmd_actions)

    p = client("graph", "show the DAG around a job and its recent periods")
    p.add_argument("job_id")
    p.add_argument(
        "--period", help='only this period: its root tick\'s scheduled_for (ISO-8601 with offset), or "once"'
    )
    p.add_argument("--json", action="store_true", help="print the raw JSON")
    p.set_defaults(func=cmd_graph)

    p = client("dead-letter", "list dead-lettered runs, newest first")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--cursor")
    p.add_argument("--job-id")
    p.set_defaults(func=cmd_dead_letter)

    p = client("replay", "replay a dead-lettered run (a fresh attempt series)")
    p.add_argument("run_id")
    p.add_argument("--idempotency-key", help="default: a new one (repeat it to make a retry safe)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("cron-next", help="print the next N fire times of a cron expression")
    p.add_argument("expr")
    p.add_argument("--tz", default="UTC", help="IANA timezone (default UTC)")
    p.add_argument("--after", help="ISO-8601 instant with offset (default now)")
    p.add_argument("-n", type=int, default=5)
    p.add_argument("--utc", action="store_true", help="print in UTC instead of the schedule's zone")
    p.set_defaults(func=cmd_cron_next)

    p = sub.add_parser(
        "capacity",
        help="plan shards, concurrency, DynamoDB units and cost per day for a burst, and simulate it",
        description="Exit status 1 when the plan exceeds a hard limit or the simulation misses the window.",
    )
    p.add_argument("--jobs", type=int, required=True, help="registered jobs")
    p.add_argument("--burst", type=int, required=True, help="runs due on the same second")
    p.add_argument("--window", type=float, required=True, help="seconds to drain the burst in")
    p.add_argument("--shards", type=int, nargs="+", help="shard counts to evaluate (default: recommended)")
    p.add_argument("--steady-rate", type=float, help="runs/s outside the burst (default: jobs / 10,000)")
    p.add_argument("--spread", type=float, default=0.0, help="jitter spreading the burst over S seconds")
    p.add_argument("--handler-ms", type=float, default=0.0, help="the handlers' own time per run")
    p.add_argument("--costs", help="per-run counts measured by the benchmark (bench/results/costs.json)")
    p.add_argument("--lookahead", type=int, help="JOBSCHED_LOOKAHEAD_SECONDS (default: recommended)")
    p.add_argument(
        "--parallelism", type=int, help="dispatcher calls in flight per shard (default: recommended)"
    )
    p.add_argument("--concurrency", type=int, help="worker concurrency (default: recommended)")
    p.add_argument(
        "--worker-threads",
        type=int,
        default=10,
        help="runs of a batch a worker executes at once (JOBSCHED_WORKER_CONCURRENCY; CDK: 10)",
    )
    p.add_argument("--esm", choices=["standard", "provisioned"], help="event-source mapping mode")
    p.add_argument("--table-quota", type=float, default=40_000.0, help="DynamoDB table-level quota now")
    p.add_argument("--account-concurrency", type=int, default=1_000, help="Lambda account concurrency now")
    p.add_argument("--dynamodb-ms", type=float, default=5.0, help="DynamoDB call latency, p50")
    p.add_argument("--sqs-ms", type=float, default=10.0, help="SQS call latency, p50")
    p.add_argument("--invoke-ms", type=float, default=10.0, help="the mapping's Invoke overhead, p50")
    p.add_argument("--tail", type=float, default=3.0, help="p99 / p50 of every call latency")
    p.add_argument("--p99-target", type=float, nargs="+", default=[1.0, 5.0], help="lateness targets, s")
    p.add_argument("--seed", type=int, default=1, help="the simulation's random seed")
    p.add_argument("--no-simulate", action="store_true", help="the plan only")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--lane-runs", type=int, default=0, help="a lane due with the burst: its runs' lateness, fair or not"
    )
    p.add_argument(
        "--lane", choices=["tenant", "priority"], default="tenant", help="a quiet tenant's runs, or high runs"
    )
    p.set_defaults(func=cmd_capacity)
    admin.add_admin(sub)
    console_cli.add_parser(sub)
    worker_cli.add_parser(client)
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `jobsched` script."""
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (UsageError, Unreachable) as exc:
        print(f"jobsched: {exc}", file=sys.stderr)
        return 2
    except ops.Failed as failed:
        answer = failed.answer
        print(
            json.dumps(answer.body, indent=2, ensure_ascii=False) if answer.body is not None else answer.text
        )
        return 1
    except KeyboardInterrupt:  # the end of a --watch or --follow
        return 130
