"""How the command line shows an answer: rich tables on a terminal, JSON when asked or piped.

rich is the `cli` extra (pip install 'jobsched[cli]'; `make install` has it): the Lambda layer
ships the runtime dependencies only, and no function imports this package.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

STATUS_STYLES = {
    "SUCCEEDED": "green",
    "SCHEDULED": "green",
    "COMPLETED": "green",
    "RUNNING": "cyan",
    "LEASED": "cyan",
    "PENDING": "yellow",
    "PAUSED": "yellow",
    "FAILED": "red",
    "DEAD_LETTER": "bold red",
    "UPSTREAM_FAILED": "red",
    "CANCELLED": "dim",
    "SKIPPED": "dim",
    "LOST": "magenta",
}


def wants_json(args: argparse.Namespace) -> bool:
    """--output json, or no --output and stdout is not a terminal (a pipe, a file, a script)."""
    output = getattr(args, "output", None)
    if output is not None:
        return bool(output == "json")
    return not sys.stdout.isatty()


def console(*, stderr: bool = False) -> Console:
    """A console on the current stdout (or stderr, for progress), made when asked: tests swap stdout."""
    return Console(file=sys.stderr if stderr else sys.stdout, highlight=False, soft_wrap=False)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def status(value: Any) -> str:
    text = "" if value is None else str(value)
    style = STATUS_STYLES.get(text)
    return f"[{style}]{text}[/{style}]" if style else text


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False) if value else "-"
    return str(value)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A table with these columns; a cell that is a status is coloured."""
    shown = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_edge=False, pad_edge=False)
    for column in columns:
        # Ids and instants whole on one line: a narrow terminal shortens the other cells first.
        shown.add_column(column, no_wrap=True, overflow="ellipsis", min_width=min(len(column), 12))
    for row in rows:
        cells = (status(v) if isinstance(v, str) and v in STATUS_STYLES else escape(_cell(v)) for v in row)
        shown.add_row(*cells)
    return shown


def record(title: str | None, value: Mapping[str, Any]) -> list[Table]:
    """An object as a field/value table, then one table per list of objects in it (recent runs...)."""
    scalars = [(k, v) for k, v in value.items() if not (isinstance(v, list) and v and isinstance(v[0], dict))]
    tables = [table(title, ("field", "value"), scalars)]
    for key, items in value.items():
        if isinstance(items, list) and items and isinstance(items[0], dict):
            columns = list(dict.fromkeys(k for item in items for k in item))
            tables.append(table(key, columns, ([item.get(k) for k in columns] for item in items)))
    return tables


def show(args: argparse.Namespace, value: Any, *tables: Table) -> None:
    """JSON, or the tables (an object with no table of its own is shown as a record)."""
    if wants_json(args):
        print_json(value)
        return
    out = console()
    if not tables and isinstance(value, Mapping):
        tables = tuple(record(None, value))
    for shown in tables:
        out.print(shown)


def when(value: str | None) -> str | None:
    """An API timestamp to the second, UTC as Z: 2026-12-02 01:02:03Z (another offset stays)."""
    if not value:
        return None
    head, _, rest = value.partition(".")
    offset = rest[3:] if rest[:3].isdigit() else rest
    if "T" not in head:
        return value
    return head.replace("T", " ") + ("Z" if offset in ("+00:00", "Z") else offset)
