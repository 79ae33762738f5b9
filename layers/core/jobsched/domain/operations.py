"""Long API work carried out outside the request: a backfill's ticks, a bulk action's jobs.

An operation is one item that says what to do (`request`), how far it got (`chunk`, the index of
the next chunk to do) and what it came to so far (`done`, `created`, `existing`, `failed`, and a
bulk action's per-job `results`). The work advances one chunk per OperationMessage on the
execution queue (services/operations.py has the timeline); `chunk` is the compare-and-set that
makes each chunk's effects recorded once, whoever delivers its message and however often.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

OperationKind = Literal["backfill", "bulk_action"]
OperationStatus = Literal["RUNNING", "SUCCEEDED", "FAILED"]

BACKFILL_CHUNK = 200
"""Ticks per chunk: 200 conditional writes take about 1-2 s, well inside a Lambda's budget, and a
backfill of at most this many runs inline, in the API request."""
BULK_CHUNK = 20
"""Jobs per chunk of a bulk action (each job is one or two conditional writes); at most this many
run inline."""


class Operation(BaseModel):
    """One long piece of work of one tenant, and its progress."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    operation_id: str
    tenant: str
    kind: OperationKind
    status: OperationStatus = "RUNNING"
    job_id: str | None = None
    """The backfilled job (a bulk action names its jobs in `request`)."""
    request: dict[str, Any]
    """backfill: {"from", "to"} (stored instants); bulk_action: {"action", "job_ids"}."""
    total: int
    """Ticks (backfill) or jobs (bulk action) in all."""
    chunk: int = 0
    """The next chunk to do: chunks [0, chunk) are done and recorded."""
    done: int = 0
    created: int = 0
    existing: int = 0
    """Ticks that had a run already (or whose chunk was done again after a crash: see
    services/operations.py)."""
    failed: int = 0
    sent: int = 0
    """backfill: runs handed to the queue (new ones, and ones found still PENDING)."""
    error: str | None = None
    """Why a FAILED operation stopped (a backfilled job cancelled meanwhile)."""
    results: list[dict[str, Any]] = []
    """bulk_action: one {"job_id", "ok", "status", "run_id", "error"} per job done, in order."""
    created_at: datetime
    updated_at: datetime


class OperationMessage(BaseModel):
    """The execution-queue message that asks a worker to do chunk `chunk` of an operation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    operation_id: str
    chunk: int


def is_operation_message(body: str) -> bool:
    """Whether an execution-queue body is an OperationMessage (else it is a RunMessage)."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and "operation_id" in data
