"""What every benchmark table shares: percentiles, text tables, and the JSON files under bench/results/."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile by nearest rank on the sorted values (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, align: str | None = None) -> str:
    """A plain text table; `align` is one character per column, "<" or ">" (default: first left)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    align = align or "<" + ">" * (len(headers) - 1)

    def line(values: Sequence[str]) -> str:
        return "  ".join(f"{v:{a}{w}}" for v, a, w in zip(values, align, widths, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def machine() -> dict[str, Any]:
    """Where a result was measured: the numbers only mean something next to this."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count(),
        "load_avg_1m": round(load[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "commit": commit(),
    }


def commit() -> str:
    """HEAD of the working tree, with "+dirty" when the core library has uncommitted changes."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
        return out.stdout.strip()

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    return f"{sha}+dirty" if git("status", "--porcelain", "--", "layers", "functions") else sha


def write(name: str, results: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json (with when and where it was measured); returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    body = {"generated_at": datetime.now(UTC).isoformat(timespec="seconds"), **results}
    out.write_text(json.dumps(body, indent=2) + "\n")
    return out


def say(line: str) -> None:
    """Progress goes to stderr, so stdout holds only the tables."""
    print(line, file=sys.stderr, flush=True)
