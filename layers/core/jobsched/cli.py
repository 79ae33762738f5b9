"""The `jobsched` command line: the local stack, the API client, and cron previews."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from jobsched import constants as c


def _api_url(args: argparse.Namespace) -> str:
    url = args.api_url or os.environ.get(c.API_URL_ENV) or f"http://127.0.0.1:{c.DEFAULT_API_PORT}"
    return str(url).rstrip("/")


def _signed_headers(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> dict[str, str]:
    """SigV4-sign a request for an IAM-authorized API Gateway (credentials from the boto3 chain)."""
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    session = boto3.session.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise SystemExit("jobsched: --sigv4 needs AWS credentials (environment, profile or role)")
    request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
    SigV4Auth(
        credentials.get_frozen_credentials(), "execute-api", session.region_name or "us-east-1"
    ).add_auth(request)
    return dict(request.headers.items())


def call(
    args: argparse.Namespace,
    method: str,
    path: str,
    payload: Any = None,
    headers: dict[str, str] | None = None,
) -> int:
    """Send one API request, print the JSON answer, return a shell exit code."""
    url = _api_url(args) + path
    body = json.dumps(payload).encode() if payload is not None else None
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if getattr(args, "tenant", None):
        hdrs[c.TENANT_HEADER] = args.tenant
    sign = args.sigv4 or ".execute-api." in url
    if sign:
        hdrs = _signed_headers(method, url, body, hdrs)
    request = urllib.request.Request(url, data=body, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text, status = response.read().decode(), response.status
    except urllib.error.HTTPError as err:
        text, status = err.read().decode(), err.code
    except urllib.error.URLError as err:
        print(f"jobsched: cannot reach {url}: {err.reason}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(json.loads(text), indent=2))
    except json.JSONDecodeError:
        print(text)
    return 0 if status < 400 else 1


def cmd_local(args: argparse.Namespace) -> int:
    """Run the local stack until interrupted."""
    from jobsched.local.stack import serve_forever

    serve_forever()
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    """POST /api/jobs."""
    body: dict[str, Any] = json.loads(args.json) if args.json else {}
    if args.handler:
        body["handler"] = args.handler
    if args.payload:
        body["payload"] = json.loads(args.payload)
    if args.depends_on:
        body.update(type="dependent", depends_on=args.depends_on.split(","))
    if args.name:
        body["name"] = args.name
    if args.cron:
        body.update(type="recurring", cron_expr=args.cron)
    if args.run_at:
        body.update(type="one_off", run_at=args.run_at)
    if args.timezone:
        body["timezone"] = args.timezone
    if args.max_attempts:
        body["max_attempts"] = args.max_attempts
    key = args.idempotency_key or str(uuid.uuid4())
    return call(args, "POST", "/api/jobs", body, {c.IDEMPOTENCY_HEADER: key})


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


def cmd_edit(args: argparse.Namespace) -> int:
    """PATCH /api/jobs/{id}."""
    body: dict[str, Any] = json.loads(args.json) if args.json else {}
    for flag, field in (
        ("cron", "cron_expr"),
        ("timezone", "timezone"),
        ("overlap", "overlap_policy"),
        ("catchup", "catchup"),
    ):
        if getattr(args, flag):
            body[field] = getattr(args, flag)
    if args.payload:
        body["payload"] = json.loads(args.payload)
    if args.jitter is not None:
        body["jitter_seconds"] = args.jitter
    return call(args, "PATCH", f"/api/jobs/{args.job_id}", body)


def cmd_backfill(args: argparse.Namespace) -> int:
    """POST /api/jobs/{id}/backfill."""
    return call(args, "POST", f"/api/jobs/{args.job_id}/backfill", {"from": args.start, "to": args.end})


def cmd_runs(args: argparse.Namespace) -> int:
    """GET /api/jobs/{id}/runs."""
    query = {"limit": str(args.limit)}
    for key in ("cursor", "status"):
        if getattr(args, key):
            query[key] = getattr(args, key)
    if args.start:
        query["from"] = args.start
    if args.end:
        query["to"] = args.end
    return call(args, "GET", f"/api/jobs/{args.job_id}/runs?" + urllib.parse.urlencode(query))


def cmd_graph(args: argparse.Namespace) -> int:
    """GET /api/jobs/{id}/graph, printed as a tree of edges and a status table per period."""
    if args.json:
        return call(args, "GET", f"/api/jobs/{args.job_id}/graph")
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = call(args, "GET", f"/api/jobs/{args.job_id}/graph")
    if code != 0:
        print(buffer.getvalue(), end="")
        return code
    graph = json.loads(buffer.getvalue())
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
    from jobsched.domain import times

    try:
        schedule = cron.parse(args.expr, args.tz)
        after = datetime.fromisoformat(args.after) if args.after else datetime.now(UTC)
        if after.tzinfo is None:
            raise cron.CronError("--after must carry a UTC offset, e.g. 2026-11-30T00:00:00+00:00")
    except (cron.CronError, ValueError) as exc:
        print(f"jobsched: {exc}", file=sys.stderr)
        return 2
    for _ in range(args.n):
        after = schedule.next_after(after)
        print(times.iso(after) if args.utc else after.astimezone(ZoneInfo(schedule.timezone)).isoformat())
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser."""
    top = argparse.ArgumentParser(prog="jobsched", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)

    def client(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("--api-url", help=f"API base URL (default ${c.API_URL_ENV} or http://127.0.0.1:8080)")
        p.add_argument("--tenant", help="X-Tenant header (local stack only)")
        p.add_argument("--sigv4", action="store_true", help="SigV4-sign (automatic for execute-api URLs)")
        return p

    sub.add_parser("local", help="run the local stack (what `make run` starts)").set_defaults(func=cmd_local)

    p = client("submit", "create a job")
    p.add_argument("--handler")
    p.add_argument("--payload", help="JSON object")
    p.add_argument("--cron", help="cron expression (recurring job)")
    p.add_argument("--run-at", help="ISO-8601 time with offset (one-off job)")
    p.add_argument("--timezone")
    p.add_argument("--max-attempts", type=int)
    p.add_argument("--idempotency-key")
    p.add_argument("--depends-on", help="comma-separated upstream job ids (a dependent job)")
    p.add_argument("--name")
    p.add_argument("--json", help="the whole request body as JSON (flags override its fields)")
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
    p.add_argument("--cron")
    p.add_argument("--timezone")
    p.add_argument("--payload", help="JSON object")
    p.add_argument("--overlap", choices=["skip", "buffer_one", "allow"])
    p.add_argument("--catchup", choices=["one", "none", "all"])
    p.add_argument("--jitter", type=int, help="jitter_seconds")
    p.add_argument("--json", help="the PATCH body as JSON (flags override its fields)")
    p.set_defaults(func=cmd_edit)

    p = client("backfill", "create the runs of every past tick in [from, to) that has none")
    p.add_argument("job_id")
    p.add_argument("--from", dest="start", required=True, help="ISO-8601 with offset")
    p.add_argument("--to", dest="end", required=True, help="ISO-8601 with offset")
    p.set_defaults(func=cmd_backfill)

    p = client("runs", "a job's run history, newest first")
    p.add_argument("job_id")
    p.add_argument("--from", dest="start")
    p.add_argument("--to", dest="end")
    p.add_argument("--status")
    p.add_argument("--cursor")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_runs)

    p = client("graph", "show the DAG around a job and its recent periods")
    p.add_argument("job_id")
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
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `jobsched` script."""
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
