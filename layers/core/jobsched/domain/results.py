"""What the job services answer: domain records, which the API turns into its views.

jobsched.api.views renders each of them as the wire format (jobsched.api.models); the services
never build a response body, so a change to the API's shape touches the API alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobsched.domain import times
from jobsched.domain.models import Execution, Job
from jobsched.domain.records import DeadLetter
from jobsched.domain.status import JobStatus, RunStatus


@dataclass(frozen=True, slots=True)
class Submitted:
    """A job accepted by submit (an idempotent repeat answers the first submit's)."""

    job_id: str
    status: JobStatus
    next_run_at: datetime | None

    def stored(self) -> dict[str, Any]:
        """The form kept with the Idempotency-Key (the 201 body a repeat answers, as it always was)."""
        return {
            "job_id": self.job_id,
            "status": self.status.value,
            "next_run_at": times.iso(self.next_run_at) if self.next_run_at else None,
        }

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> Submitted:
        """The record `stored()` wrote."""
        next_run_at = stored.get("next_run_at")
        return cls(
            job_id=str(stored["job_id"]),
            status=JobStatus(stored["status"]),
            next_run_at=datetime.fromisoformat(next_run_at) if next_run_at else None,
        )


@dataclass(frozen=True, slots=True)
class JobDetail:
    """A job, its newest runs (newest first), and its next firing (not the dispatcher's cursor)."""

    job: Job
    runs: list[Execution]
    next_run_at: datetime | None


@dataclass(frozen=True, slots=True)
class Control:
    """Where a job stands after a cancel, pause, resume or run-now (run_id: the run a run-now made)."""

    job_id: str
    status: JobStatus
    next_run_at: datetime | None = None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Backfill:
    """What a backfill did: runs created now, ticks that already had a run, and their spread."""

    job_id: str
    ticks: int
    created: int
    existing: int
    first: datetime | None
    last: datetime | None
    spread_seconds: int


@dataclass(frozen=True, slots=True)
class RunPage:
    """A page of a job's runs, newest first; next_cursor is None on the last page."""

    items: list[Execution]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """A page of a tenant's dead letters, newest first; next_cursor is None on the last page."""

    items: list[DeadLetter]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Replay:
    """A replay started for a dead-lettered run: its new status."""

    run_id: str
    job_id: str
    status: RunStatus


@dataclass(frozen=True, slots=True)
class GraphPeriod:
    """One period of the DAG ("once", or the root tick's ISO time) and each node's run status in it."""

    period: str
    status: dict[str, RunStatus]


@dataclass(frozen=True, slots=True)
class Graph:
    """The DAG around a job: its nodes (by job id), edges (upstream, dependant), recent periods."""

    job_id: str
    nodes: list[Job]
    edges: list[tuple[str, str]]
    periods: list[GraphPeriod]
    truncated: bool
    """The graph reached MAX_GRAPH_NODES jobs: some node shown has an edge to a job left out."""
