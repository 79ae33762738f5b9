"""The operator's commands: list, stats, logs [--follow], runs [--watch], actions, and backfill's progress."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from rich.markup import escape

from jobsched.cli import render
from jobsched.cli.http import Answer, request

# A run that will not change any more (jobsched.domain.status.TERMINAL, and a skipped tick).
FINISHED = frozenset({"SUCCEEDED", "DEAD_LETTER", "CANCELLED", "SKIPPED"})


class Failed(Exception):
    """An answer that is an error: main() prints it (as JSON, as the API gave it) and exits 1."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.text)
        self.answer = answer


def get(args: argparse.Namespace, path: str, query: Mapping[str, Any] | None = None) -> Any:
    """GET path?query; the JSON body, or Failed."""
    given = {k: str(v) for k, v in (query or {}).items() if v not in (None, "", False)}
    answer = request(args, "GET", path + ("?" + urllib.parse.urlencode(given) if given else ""))
    if not answer.ok:
        raise Failed(answer)
    return answer.body


def sleep(args: argparse.Namespace) -> None:
    """Wait --interval seconds between two polls (a command-line pause, never a test's)."""
    time.sleep(max(0.0, float(args.interval)))


# -- list ---------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    """GET /api/jobs with its filters, following next_cursor with --all."""
    query = {
        "status": args.status,
        "type": args.type,
        "name_prefix": args.name_prefix,
        "target": args.target,
        "tag": args.tag,
        "order": args.order,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    page = get(args, "/api/jobs", query)
    items, cursor = list(page["items"]), page.get("next_cursor")
    while args.all and cursor:
        page = get(args, "/api/jobs", {**query, "cursor": cursor})
        items.extend(page["items"])
        cursor = page.get("next_cursor")
    shown = {"items": items, "next_cursor": cursor}
    render.show(args, shown, jobs_table(items))
    if cursor and not render.wants_json(args):
        render.console().print(f"more: --cursor {cursor}")
    return 0


def _schedule(item: Mapping[str, Any]) -> str:
    schedule = item.get("schedule") or {}
    if schedule.get("cron_expr"):
        zone = schedule.get("timezone") or "UTC"
        return f"{schedule['cron_expr']} ({zone})"
    if schedule.get("depends_on"):
        return "after " + ",".join(schedule["depends_on"])
    return render.when(schedule.get("run_at")) or "-"


def jobs_table(items: list[dict[str, Any]]) -> Any:
    rows = []
    for item in items:
        last = item.get("last_run") or {}
        rows.append(
            (
                item["job_id"],
                item.get("name"),
                item["type"],
                item["status"],
                _schedule(item),
                render.when(item.get("next_run_at")),
                last.get("status"),
            )
        )
    columns = ("JOB", "NAME", "TYPE", "STATUS", "SCHEDULE", "NEXT RUN", "LAST RUN")
    return render.table(f"{len(items)} job(s)", columns, rows)


# -- stats --------------------------------------------------------------------------------------------
def cmd_stats(args: argparse.Namespace) -> int:
    """GET /api/jobs/{id}/stats?since=."""
    stats = get(args, f"/api/jobs/{args.job_id}/stats", {"since": args.since})
    if not render.wants_json(args):
        since = f" since {render.when(stats['since'])}" if stats.get("since") else ""
        render.console().print(f"job {stats['job_id']}{since}: {stats['runs']} run(s)", highlight=False)
    render.show(args, stats, *stats_tables(stats))
    return 0


def stats_tables(stats: Mapping[str, Any]) -> list[Any]:
    rate = stats.get("success_rate")
    summary = render.table(
        None,
        ("RUNS", "SUCCESS RATE", *(s for s in sorted(stats["by_status"]))),
        [
            (
                stats["runs"],
                "-" if rate is None else f"{rate:.1%}",
                *(stats["by_status"][s] for s in sorted(stats["by_status"])),
            )
        ],
    )
    timings = render.table(
        None,
        ("ms", "p50", "p95", "p99", "max"),
        [
            (name, *(stats[key].get(p) for p in ("p50", "p95", "p99", "max")))
            for name, key in (("lateness", "lateness_ms"), ("duration", "duration_ms"))
        ],
    )
    return [summary, timings]


# -- logs ---------------------------------------------------------------------------------------------
def cmd_logs(args: argparse.Namespace) -> int:
    """GET /api/runs/{id}/logs; --follow polls with next_cursor until the run has finished.

    The run's status is asked after a page with no new line; once it has finished, one more page
    is read at once (lines written just before the end), and the first empty page after it ends.
    """
    cursor = args.cursor
    as_json = render.wants_json(args)
    out = render.console()
    finished = False
    while True:
        page = get(args, f"/api/runs/{args.run_id}/logs", {"cursor": cursor})
        if as_json and not args.follow:
            render.print_json(page)
            return 0
        lines = page.get("lines") or []
        for line in lines:
            if as_json:  # one JSON object a line (jq -c friendly)
                print(json.dumps(line, ensure_ascii=False), flush=True)
            else:
                at = render.when(line.get("at"))
                out.print(f"[dim]{at}[/dim]  {escape(str(line.get('message', '')))}", highlight=False)
        cursor = page.get("next_cursor") or cursor
        if not args.follow:
            if page.get("console_url") and not as_json:
                out.print(f"[dim]console: {page['console_url']}[/dim]")
            return 0
        if finished and not lines:
            return 0
        if not lines:
            finished = _finished(args)
        if not finished:
            sleep(args)


def _finished(args: argparse.Namespace) -> bool:
    """The run is in a state that writes no more log lines (asked after a page with none)."""
    run = get(args, f"/api/runs/{args.run_id}")
    return run.get("status") in FINISHED


# -- runs ---------------------------------------------------------------------------------------------
def runs_query(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "limit": args.limit,
        "cursor": args.cursor,
        "status": args.status,
        "from": args.start,
        "to": args.end,
    }


def runs_table(job_id: str, items: list[dict[str, Any]]) -> Any:
    rows = [
        (
            r["run_id"],
            r["kind"],
            r["status"],
            render.when(r["scheduled_for"]),
            r.get("attempts"),
            render.when(r.get("started_at")),
            r.get("lateness_ms"),
            r.get("duration_ms"),
            (r.get("error") or {}).get("type") if isinstance(r.get("error"), dict) else r.get("error"),
        )
        for r in items
    ]
    columns = ("RUN", "KIND", "STATUS", "TICK", "ATTEMPTS", "STARTED", "LATE ms", "TOOK ms", "ERROR")
    return render.table(f"runs of {job_id}, newest first", columns, rows)


def cmd_runs(args: argparse.Namespace) -> int:
    """GET /api/jobs/{id}/runs; --watch: a live table, refreshed every --interval seconds."""
    path = f"/api/jobs/{args.job_id}/runs"
    if not args.watch:
        page = get(args, path, runs_query(args))
        render.show(args, page, runs_table(args.job_id, page["items"]))
        return 0
    if render.wants_json(args):  # one JSON page a line, each poll
        for n in _polls(args):
            print(json.dumps(get(args, path, runs_query(args)), ensure_ascii=False), flush=True)
            if n:
                sleep(args)
        return 0
    from rich.live import Live

    with Live(runs_table(args.job_id, []), console=render.console(), auto_refresh=False) as live:
        for n in _polls(args):
            live.update(runs_table(args.job_id, get(args, path, runs_query(args))["items"]), refresh=True)
            if n:
                sleep(args)
    return 0


def _polls(args: argparse.Namespace) -> Any:
    """Poll numbers, counting down to 0 (the last) with --iterations, else forever (Ctrl-C ends it)."""
    if args.iterations is not None:
        yield from range(args.iterations - 1, -1, -1)
        return
    while True:
        yield 1


# -- long work: backfill and bulk actions ----------------------------------------------------------------
def follow_operation(args: argparse.Namespace, operation_id: str, *, total: int, what: str) -> dict[str, Any]:
    """Poll GET /api/operations/{id} until it is no longer RUNNING, with a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    path = f"/api/operations/{operation_id}"
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=render.console(stderr=True), transient=False) as progress:
        task = progress.add_task(what, total=total)
        while True:
            operation: dict[str, Any] = get(args, path)
            progress.update(task, completed=operation["done"])
            if operation["status"] != "RUNNING":
                return operation
            sleep(args)


def accepted(
    args: argparse.Namespace, answer: Answer, *, what: str, shown: Callable[[dict[str, Any]], list[Any]]
) -> int:
    """Show an accepted backfill or bulk action: at once, or after following its operation."""
    if not answer.ok:
        raise Failed(answer)
    body: dict[str, Any] = answer.body
    if body.get("status") == "RUNNING" and body.get("operation_id") and not args.no_wait:
        total = int(body.get("ticks") or body.get("total") or 0)
        body = follow_operation(args, body["operation_id"], total=total, what=what)
    render.show(args, body, *shown(body))
    return 0 if body.get("status") != "FAILED" else 1


def operation_tables(body: Mapping[str, Any]) -> list[Any]:
    keys = (
        "operation_id",
        "kind",
        "status",
        "job_id",
        "action",
        "total",
        "ticks",
        "done",
        "created",
        "existing",
        "failed",
        "succeeded",
        "error",
    )
    tables = [render.table(None, ("field", "value"), [(k, body[k]) for k in keys if k in body])]
    items = body.get("items") or []
    if items:
        rows = [
            (
                i["job_id"],
                "ok" if i["ok"] else "failed",
                i.get("status"),
                i.get("run_id"),
                (i.get("error") or {}).get("message"),
            )
            for i in items
        ]
        tables.append(render.table("per job", ("JOB", "RESULT", "STATUS", "RUN", "ERROR"), rows))
    return tables


def cmd_backfill(args: argparse.Namespace) -> int:
    """POST /api/jobs/{id}/backfill, then its operation's progress until done (unless --no-wait)."""
    answer = request(args, "POST", f"/api/jobs/{args.job_id}/backfill", {"from": args.start, "to": args.end})
    return accepted(args, answer, what=f"backfill {args.job_id}", shown=operation_tables)


def cmd_actions(args: argparse.Namespace) -> int:
    """POST /api/jobs/actions on the named jobs or on a filter, then its progress (unless --no-wait)."""
    body: dict[str, Any] = {"action": args.action}
    where = {
        k: getattr(args, k) for k in ("status", "type", "name_prefix", "target", "tag") if getattr(args, k)
    }
    if args.job_ids:
        if where:
            print("jobsched: name jobs or filter them, not both", file=sys.stderr)
            return 2
        body["job_ids"] = args.job_ids
    else:
        body["filter"] = where
    answer = request(args, "POST", "/api/jobs/actions", body)
    return accepted(args, answer, what=f"{args.action} jobs", shown=operation_tables)


def add_filter_flags(p: argparse.ArgumentParser) -> None:
    """The listing's filters (GET /api/jobs), shared by list and actions."""
    p.add_argument("--status", help="SCHEDULED, PAUSED, COMPLETED, FAILED or CANCELLED")
    p.add_argument("--type", help="one_off, recurring or dependent")
    p.add_argument("--name-prefix")
    p.add_argument("--target", help="target type: python, http, lambda, ...")
    p.add_argument("--tag", help="key:value")
