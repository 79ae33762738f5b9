"""The run (execution) state machine: forward-only, along the legal edges only.

    PENDING ──> LEASED ──> RUNNING ──> SUCCEEDED
       │  ^        │          │  └───> FAILED ──> DEAD_LETTER ──> PENDING (operator replay)
       │  └────────┴──────────┘           │
       │     lease lost (crash)           └──> PENDING (retry, after backoff)
       │           └──────────┴──> LOST (lease lost on a job declared idempotent: false)
       ├──> CANCELLED (its job was cancelled before the run was leased)
       └──> SKIPPED (overlap policy, starting deadline, paused job; missed ticks are born SKIPPED)

    CANCELLED | SKIPPED (no attempt) ══> SUCCEEDED | FAILED: the run's own late outcome, see
    UNSTARTED_RECORDS (not an edge anyone else may take)

Every transition is written as a DynamoDB conditional update whose condition is "the stored
status is one of the legal sources of the target" (plus the lease owner where one is held), so
two processes racing on one run cannot both win, and a stale process cannot move a run back.
"""

from __future__ import annotations

from enum import StrEnum
from itertools import pairwise


class RunStatus(StrEnum):
    """Where one run (one firing of a job) stands."""

    PENDING = "PENDING"
    LEASED = "LEASED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    DEAD_LETTER = "DEAD_LETTER"
    CANCELLED = "CANCELLED"
    LOST = "LOST"
    SKIPPED = "SKIPPED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"


class JobStatus(StrEnum):
    """Where a job definition stands."""

    SCHEDULED = "SCHEDULED"
    COMPLETED = "COMPLETED"
    # The one run a one-off (or a dependant of a one-off chain) lives for was dead-lettered: the
    # job's end, as COMPLETED is a success's. A replay of that run makes it SCHEDULED again.
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PAUSED = "PAUSED"


LEGAL_EDGES: frozenset[tuple[RunStatus, RunStatus]] = frozenset(
    {
        (RunStatus.PENDING, RunStatus.LEASED),
        (RunStatus.LEASED, RunStatus.RUNNING),
        (RunStatus.RUNNING, RunStatus.SUCCEEDED),
        (RunStatus.RUNNING, RunStatus.FAILED),
        # Crash recovery: the holder stopped renewing, its message became visible again.
        (RunStatus.LEASED, RunStatus.PENDING),
        (RunStatus.RUNNING, RunStatus.PENDING),
        (RunStatus.FAILED, RunStatus.PENDING),
        (RunStatus.FAILED, RunStatus.DEAD_LETTER),
        (RunStatus.PENDING, RunStatus.CANCELLED),
        # An operator's replay starts a fresh attempt series for a dead-lettered run.
        (RunStatus.DEAD_LETTER, RunStatus.PENDING),
        # A non-idempotent job's run whose worker died is not re-run blindly: an operator decides.
        (RunStatus.LEASED, RunStatus.LOST),
        (RunStatus.RUNNING, RunStatus.LOST),
        # A tick that must not start: its previous run still holds the job (overlap policy
        # "skip"), its starting deadline passed, or its job is paused. Missed ticks are written
        # SKIPPED directly, with their reason.
        (RunStatus.PENDING, RunStatus.SKIPPED),
        # A dependant's run whose upstream was dead-lettered is born UPSTREAM_FAILED; when the
        # upstream is replayed to success, the release re-arms it.
        (RunStatus.UPSTREAM_FAILED, RunStatus.PENDING),
    }
)

# Records that a run never started (written with attempt 0) which the run's own outcome replaces:
# a fast-path handler ran while its worker stalled past every lease (no heartbeat, not even the
# first one that persists RUNNING), so the fleet took it for dead, and a redelivery found the next
# tick in the slot (SKIPPED) or a cancel found nothing running (CANCELLED). The handler did run: a
# run that executed is recorded as executed (RunStore.record_unleased); the record's `reason` stays,
# what the fleet took the run for (a row's reason also keeps a run's waits: it is never cleared). No
# claim, start or cancel moves out of them: only the record of an attempt that already ran.
UNSTARTED_RECORDS: frozenset[RunStatus] = frozenset({RunStatus.CANCELLED, RunStatus.SKIPPED})

TERMINAL: frozenset[RunStatus] = frozenset({RunStatus.SUCCEEDED, RunStatus.DEAD_LETTER, RunStatus.CANCELLED})
HELD: frozenset[RunStatus] = frozenset({RunStatus.LEASED, RunStatus.RUNNING})


class IllegalTransition(ValueError):
    """A transition that is not an edge of the run state machine."""


def sources_of(target: RunStatus) -> frozenset[RunStatus]:
    """Every status a run may move to `target` from."""
    return frozenset(src for src, dst in LEGAL_EDGES if dst == target)


def check_path(*path: RunStatus) -> None:
    """Raise IllegalTransition unless each consecutive pair of `path` is a legal edge."""
    for src, dst in pairwise(path):
        if (src, dst) not in LEGAL_EDGES:
            raise IllegalTransition(f"illegal run transition {src} -> {dst}")


def is_legal(src: RunStatus, dst: RunStatus) -> bool:
    """Whether src -> dst is an edge of the state machine."""
    return (src, dst) in LEGAL_EDGES

# The runs that may still start, so a wait for a key is counted on them (RunStore.note_wait): the
# rest are over for a waiting copy of their message (a replay or a release sends a message of its own).
MAY_START: frozenset[RunStatus] = frozenset(
    {RunStatus.PENDING, RunStatus.LEASED, RunStatus.RUNNING, RunStatus.FAILED}
)
