"""RunStore in memory: one Execution per (job_id, scheduled_for), moved along the legal edges only.

The same conditions as the DynamoDB RunStore (adapters/dynamodb/runs.py), evaluated on the row
under one lock; `_move` is the one legal-edge check, as `_transition` is there.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobsched.domain import times
from jobsched.domain.keys import job_pk, run_id_for, run_sk
from jobsched.domain.models import AttemptRecord, Execution, RunError
from jobsched.domain.records import AttemptEnd, Cursor, DeadLetter, Lease, NewRun, Transition
from jobsched.domain.status import HELD, MAY_START, UNSTARTED_RECORDS, RunStatus, check_path, sources_of

Key = tuple[str, str]  # (job_id, stored scheduled_for)


@dataclass
class MemoryRunStore:
    """Run rows; `dead_letter` plays the failure workflow's DeadLetter step (not part of the port)."""

    rows: dict[Key, Execution] = field(default_factory=dict)
    # The dead-letter index: (dl_key, dl_sk) per dead-lettered row, as the failure workflow writes it.
    dead: dict[Key, tuple[str, str, datetime]] = field(default_factory=dict)
    # The DAG workflow's wait records (job_id, period) -> (outstanding, upstream runs counted).
    waits: dict[Key, tuple[int, frozenset[str]]] = field(default_factory=dict)
    # Waits counted per run row (note_wait), as the DynamoDB row's `waits` attribute.
    wait_counts: dict[Key, int] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def put_pending(
        self,
        *,
        job_id: str,
        tenant: str,
        scheduled_for: datetime,
        now: datetime,
        skipped: str | None = None,
        kind: str = "scheduled",
    ) -> Transition:
        """Create the run row PENDING (or SKIPPED with a reason) at most once per firing."""
        key = (job_id, times.stored(scheduled_for))
        with self._lock:
            if key in self.rows:
                return Transition(applied=False, row=self.rows[key])
            row = Execution(
                run_id=run_id_for(job_id, scheduled_for),
                job_id=job_id,
                tenant=tenant,
                scheduled_for=times.parse_stored(key[1]),
                status=RunStatus.SKIPPED if skipped else RunStatus.PENDING,
                attempt=0,
                kind=kind,
                reason=skipped or None,
                created_at=now,
            )
            self.rows[key] = row
            return Transition(applied=True, row=row)

    def get(self, job_id: str, scheduled_for: datetime | str, *, consistent: bool = True) -> Execution | None:
        """The run of one firing, or None (always consistent)."""
        sf = scheduled_for if isinstance(scheduled_for, str) else times.stored(scheduled_for)
        with self._lock:
            return self.rows.get((job_id, sf))

    def get_many(self, keys: Sequence[tuple[str, str]]) -> dict[Key, Execution]:
        """The rows of `keys` that exist."""
        with self._lock:
            return {k: self.rows[k] for k in keys if k in self.rows}

    # -- the run's edges ------------------------------------------------------------------------
    def _move(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        target: RunStatus,
        now: datetime,
        owner: str | None = None,
        changes: dict[str, Any] | None = None,
        increment_attempt: bool = False,
        takeover_expired_lease: bool = False,
        create: NewRun | None = None,
        append: AttemptEnd | None = None,
        first_attempt_only: bool = False,
        via: Sequence[RunStatus] = (),
        supersede_unstarted: bool = False,
        unflagged: bool = False,
    ) -> Transition:
        first = via[0] if via else target
        for source in sources_of(first):
            check_path(source, *via, target)
        key = (job_id, scheduled_for)
        with self._lock:
            row = self.rows.get(key)
            at_a_source = (
                row is not None
                and row.status in sources_of(first)
                and (owner is None or first == RunStatus.LEASED or row.lease_owner == owner)
                and (not first_attempt_only or row.attempt == 0)
            )
            lease_lapsed = (
                takeover_expired_lease
                and row is not None
                and row.status in HELD
                and row.lease_until is not None
                and row.lease_until < now
            )
            absent = create is not None and row is None
            unstarted = (
                supersede_unstarted
                and row is not None
                and row.status in UNSTARTED_RECORDS
                and row.attempt == 0
            )
            if not (at_a_source or lease_lapsed or absent or unstarted):
                return Transition(applied=False, row=row)
            if unflagged and row is not None and row.materialized:
                return Transition(applied=False, row=row)
            base = row or self._created(create)  # type: ignore[arg-type]
            update: dict[str, Any] = {"status": target, **(changes or {})}
            if increment_attempt:
                update["attempt"] = base.attempt + 1
            if append is not None:
                update["attempts"] = [*base.attempts, _attempt_record(append)]
            if target == RunStatus.SUCCEEDED:
                update["error"] = None  # a success ends the run's failure story
            self.rows[key] = base.model_copy(update=update)
            return Transition(applied=True, previous=row)

    @staticmethod
    def _created(new: NewRun) -> Execution:
        scheduled_for = times.parse_stored(new.scheduled_for)
        return Execution(
            run_id=run_id_for(new.job_id, scheduled_for),
            job_id=new.job_id,
            tenant=new.tenant,
            scheduled_for=scheduled_for,
            status=RunStatus.PENDING,
            kind=new.kind,
        )

    def claim(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        lease: Lease,
        now: datetime,
        create: NewRun | None = None,
        packed: bool = False,
    ) -> Transition:
        """PENDING (a lapsed lease, or no row with `create`) -> LEASED, attempt + 1; `packed`: not a
        row flagged materialized."""
        return self._move(
            job_id,
            scheduled_for,
            target=RunStatus.LEASED,
            now=now,
            changes=_lease_changes(lease),
            increment_attempt=True,
            takeover_expired_lease=True,
            create=create,
            unflagged=packed,
        )

    def start(self, job_id: str, scheduled_for: str, *, owner: str, now: datetime) -> Transition:
        """LEASED -> RUNNING by the lease owner."""
        return self._move(
            job_id, scheduled_for, target=RunStatus.RUNNING, now=now, owner=owner, changes={"started_at": now}
        )

    def record(self, job_id: str, scheduled_for: str, *, owner: str, end: AttemptEnd) -> Transition:
        """RUNNING -> SUCCEEDED|FAILED by the lease owner."""
        return self._move(
            job_id,
            scheduled_for,
            target=end.status,
            now=end.finished_at,
            owner=owner,
            changes=_end_changes(end),
            append=end,
        )

    def persist_running(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        lease: Lease,
        started_at: datetime,
        now: datetime,
        create: NewRun,
        packed: bool = False,
    ) -> Transition:
        """PENDING (or no row) -> LEASED -> RUNNING in one write, attempt + 1; `packed`: not a row
        flagged materialized."""
        return self._move(
            job_id,
            scheduled_for,
            target=RunStatus.RUNNING,
            via=(RunStatus.LEASED,),
            now=now,
            changes={**_lease_changes(lease), "started_at": started_at},
            increment_attempt=True,
            create=create,
            unflagged=packed,
        )

    def record_unleased(
        self, job_id: str, scheduled_for: str, *, worker: str, end: AttemptEnd, create: NewRun
    ) -> Transition:
        """PENDING (or no row) -> LEASED -> RUNNING -> SUCCEEDED|FAILED in one write, attempt + 1."""
        return self._move(
            job_id,
            scheduled_for,
            target=end.status,
            via=(RunStatus.LEASED, RunStatus.RUNNING),
            now=end.finished_at,
            changes={"worker": worker, "started_at": end.started_at, **_end_changes(end)},
            increment_attempt=True,
            create=create,
            append=end,
            supersede_unstarted=True,
        )

    def skip(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        reason: str,
        now: datetime,
        create: NewRun,
        first_attempt_only: bool = True,
    ) -> Transition:
        """PENDING (or no row) -> SKIPPED, by default only before any attempt."""
        return self._move(
            job_id,
            scheduled_for,
            target=RunStatus.SKIPPED,
            now=now,
            changes={"reason": reason},
            first_attempt_only=first_attempt_only,
            create=create,
        )

    def note_wait(
        self, job_id: str, scheduled_for: str, *, reason: str, now: datetime, create: NewRun
    ) -> int | None:
        """A run that may still start (or no row: created) keeps `reason` and counts the wait;
        None when it is over (nothing written)."""
        key = (job_id, scheduled_for)
        with self._lock:
            row = self.rows.get(key)
            if row is not None and row.status not in MAY_START:
                return None
            base = row or self._created(create).model_copy(update={"created_at": now})
            self.rows[key] = base.model_copy(update={"reason": reason})
            self.wait_counts[key] = self.wait_counts.get(key, 0) + 1
            return self.wait_counts[key]

    def cancel(
        self, job_id: str, scheduled_for: str, *, now: datetime, create: NewRun | None = None
    ) -> Transition:
        """PENDING (or no row, with `create`, or held under an expired lease) -> CANCELLED."""
        return self._move(
            job_id,
            scheduled_for,
            target=RunStatus.CANCELLED,
            now=now,
            create=create,
            takeover_expired_lease=True,
        )

    def lose(
        self, job_id: str, scheduled_for: str, *, owner: str, now: datetime, error: tuple[str, str]
    ) -> Transition:
        """LEASED|RUNNING -> LOST by the lease owner."""
        return self._move(
            job_id,
            scheduled_for,
            target=RunStatus.LOST,
            now=now,
            owner=owner,
            changes={"error": RunError(type=error[0], message=error[1])},
        )

    def extend_lease(self, *, job_id: str, scheduled_for: str, owner: str, until: datetime) -> bool:
        """Push a held run's lease to `until` if `owner` holds it."""
        key = (job_id, scheduled_for)
        with self._lock:
            row = self.rows.get(key)
            if row is None or row.lease_owner != owner or row.status not in HELD:
                return False
            self.rows[key] = row.model_copy(update={"lease_until": until})
            return True

    def save_progress(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        owner: str,
        now: datetime,
        progress: str | None = None,
        checkpoint: str | None = None,
    ) -> bool:
        """Keep a held run's progress and/or checkpoint if `owner` holds its lease."""
        key = (job_id, scheduled_for)
        update: dict[str, Any] = {}
        if progress is not None:
            update.update(progress=json.loads(progress), progress_at=now)
        if checkpoint is not None:
            update.update(checkpoint=json.loads(checkpoint), checkpoint_at=now)
        with self._lock:
            row = self.rows.get(key)
            if row is None or row.lease_owner != owner or row.status not in HELD:
                return False
            self.rows[key] = row.model_copy(update=update)
            return True

    def note_task(self, job_id: str, scheduled_for: str, *, owner: str, task_arn: str) -> bool:
        """Add a task to a held run's ecs_tasks if `owner` holds its lease and it is not there yet."""
        key = (job_id, scheduled_for)
        with self._lock:
            row = self.rows.get(key)
            if row is None or row.lease_owner != owner or row.status not in HELD:
                return False
            if task_arn in row.ecs_tasks:
                return False
            self.rows[key] = row.model_copy(update={"ecs_tasks": [*row.ecs_tasks, task_arn]})
            return True

    def request_cancel(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        now: datetime,
        pending_too: bool = False,
        create: NewRun | None = None,
    ) -> Transition:
        """Mark a held (or, with pending_too, PENDING) run cancel-requested; refused otherwise."""
        key = (job_id, scheduled_for)
        allowed = {*HELD, RunStatus.PENDING} if pending_too else set(HELD)
        with self._lock:
            row = self.rows.get(key)
            if row is None and create is not None and pending_too:
                row = self._created(create).model_copy(update={"created_at": now})
            if row is None or row.status not in allowed:
                return Transition(applied=False, row=row.model_copy(deep=True) if row else None)
            new = row.model_copy(update={"cancel_requested_at": row.cancel_requested_at or now})
            self.rows[key] = new
            return Transition(applied=True, row=new.model_copy(deep=True), previous=row.model_copy(deep=True))

    def fail_stuck(
        self,
        *,
        job_id: str,
        scheduled_for: str,
        tenant: str,
        now: datetime,
        error_type: str,
        error_message: str,
    ) -> Execution | None:
        """A run its workers never finished -> FAILED (created if absent); None if it is past that."""
        check_path(RunStatus.PENDING, RunStatus.LEASED, RunStatus.RUNNING, RunStatus.FAILED)
        key = (job_id, scheduled_for)
        with self._lock:
            row = self.rows.get(key)
            if row is not None and row.status not in (RunStatus.PENDING, RunStatus.LEASED, RunStatus.RUNNING):
                return None
            base = row or self._created(NewRun(job_id, tenant, scheduled_for))
            error = RunError(type=error_type, message=error_message)
            record = AttemptRecord(attempt=0, finished_at=now, outcome=error_type, error=error)
            failed = base.model_copy(
                update={
                    "status": RunStatus.FAILED,
                    "error": error,
                    "finished_at": now,
                    "attempts": [*base.attempts, record],
                }
            )
            self.rows[key] = failed
            return failed

    # -- reads ------------------------------------------------------------------------------------
    def dead_letters(
        self, *, dl_key: str, start: Cursor | None, limit: int, job_id: str | None
    ) -> tuple[list[DeadLetter], Cursor | None]:
        """Dead letters of `dl_key`, newest dead first, `limit` a page."""
        with self._lock:
            entries = sorted(
                ((sk, key) for key, (k, sk, _) in self.dead.items() if k == dl_key),
                reverse=True,
            )
            after = start["dl_sk"]["S"] if start else None
            page: list[DeadLetter] = []
            for sk, key in entries:
                if after is not None and sk >= after:
                    continue
                row, dead_at = self.rows[key], self.dead[key][2]
                if job_id and row.job_id != job_id:
                    continue
                page.append(
                    DeadLetter(
                        job_id=row.job_id,
                        run_id=row.run_id,
                        scheduled_for=row.scheduled_for,
                        dead_at=dead_at,
                        attempt=row.attempt,
                        error_type=row.error.type if row.error else None,
                        error_message=row.error.message if row.error else None,
                    )
                )
                if len(page) == limit:
                    # As DynamoDB does, a full page has a cursor even when nothing follows it.
                    return page, _dl_cursor(dl_key, sk, key)
            return page, None

    def dead_letter(self, job_id: str, scheduled_for: str, *, dl_key: str, dead_at: datetime) -> None:
        """FAILED -> DEAD_LETTER with its index entry: what the failure workflow's step writes."""
        key = (job_id, scheduled_for)
        with self._lock:
            self.rows[key] = self.rows[key].model_copy(update={"status": RunStatus.DEAD_LETTER})
            self.dead[key] = (dl_key, f"{times.stored(dead_at)}#{self.rows[key].run_id}", dead_at)

    # -- the workflows' own writes (asl.py): on AWS the state machines write the runs table directly,
    # so these are no part of the RunStore port; a simulated workflow (tests/sim/workflows.py) calls them.
    def rearm(self, job_id: str, scheduled_for: str, *, attempt: int) -> bool:
        """Rearm: FAILED (or PENDING: a retry of its own write) at `attempt` -> PENDING, the lease
        removed; False (nothing written) otherwise."""
        check_path(RunStatus.FAILED, RunStatus.PENDING)
        cleared: dict[str, Any] = {"status": RunStatus.PENDING, "lease_owner": None}
        cleared.update(lease_until=None, lease_message=None)
        rearmable = (RunStatus.FAILED, RunStatus.PENDING)
        return self._workflow_write(
            (job_id, scheduled_for),
            lambda r: r is not None and r.status in rearmable and r.attempt == attempt,
            cleared,
        )

    def dead_letter_failed(
        self, job_id: str, scheduled_for: str, *, attempt: int, dl_key: str, dl_sk: str, dead_at: datetime
    ) -> bool:
        """DeadLetter: FAILED (or DEAD_LETTER: a retry of its own write) at `attempt` -> DEAD_LETTER
        with its index entry; False otherwise."""
        check_path(RunStatus.FAILED, RunStatus.DEAD_LETTER)
        key = (job_id, scheduled_for)
        dead = (RunStatus.FAILED, RunStatus.DEAD_LETTER)
        with self._lock:
            if not self._workflow_write(
                key,
                lambda r: r is not None and r.status in dead and r.attempt == attempt,
                {"status": RunStatus.DEAD_LETTER},
            ):
                return False
            self.dead[key] = (dl_key, dl_sk, dead_at)
            return True

    def replay_rearm(self, job_id: str, scheduled_for: str, *, replays: int) -> bool:
        """ReplayRearm: DEAD_LETTER (or PENDING at attempt 0 of series `replays`: a retry of its own
        write) -> PENDING, attempt 0, series `replays`, out of the dead-letter index."""
        check_path(RunStatus.DEAD_LETTER, RunStatus.PENDING)
        key = (job_id, scheduled_for)

        def rearmable(r: Execution | None) -> bool:
            own = r is not None and (r.status, r.attempt, r.replays) == (RunStatus.PENDING, 0, replays)
            return own or (r is not None and r.status == RunStatus.DEAD_LETTER)

        with self._lock:
            changes: dict[str, Any] = {
                "status": RunStatus.PENDING,
                "attempt": 0,
                "replays": replays,
                "lease_owner": None,
                "lease_until": None,
                "lease_message": None,
            }
            if not self._workflow_write(key, rearmable, changes):
                return False
            self.dead.pop(key, None)
            return True

    def mark_upstream_failed(self, created: NewRun, *, reason: str, now: datetime) -> bool:
        """MarkUpstreamFailed: a dependant's run born UPSTREAM_FAILED, only if it has no row yet."""
        key = (created.job_id, created.scheduled_for)
        with self._lock:
            if key in self.rows:
                return False
            self.rows[key] = Execution(
                run_id=run_id_for(created.job_id, times.parse_stored(created.scheduled_for)),
                job_id=created.job_id,
                tenant=created.tenant,
                scheduled_for=times.parse_stored(created.scheduled_for),
                status=RunStatus.UPSTREAM_FAILED,
                kind="dependant",
                reason=reason,
                created_at=now,
            )
            return True

    def release_dependant(
        self, job_id: str, scheduled_for: str, *, run_id: str, tenant: str, now: datetime
    ) -> bool:
        """Release: the dependant's run PENDING (born, or re-armed from UPSTREAM_FAILED); else False."""
        check_path(RunStatus.UPSTREAM_FAILED, RunStatus.PENDING)
        key = (job_id, scheduled_for)
        with self._lock:
            row = self.rows.get(key)
            if row is not None and row.status != RunStatus.UPSTREAM_FAILED:
                return False
            base = row or Execution(
                run_id=run_id,
                job_id=job_id,
                tenant=tenant,
                scheduled_for=times.parse_stored(scheduled_for),
                status=RunStatus.PENDING,
                created_at=now,
            )
            self.rows[key] = base.model_copy(
                update={"status": RunStatus.PENDING, "attempt": 0, "kind": "dependant", "reason": None}
            )
            return True

    def count_upstream(self, job_id: str, period: str, *, fan_in: int, upstream_run: str) -> int | None:
        """Count: the dependant's outstanding upstreams of `period` (fan_in - 1 the first time), once
        per upstream run; the count after, or None (nothing written) if that run was counted."""
        with self._lock:
            outstanding, counted = self.waits.get((job_id, period), (fan_in, frozenset()))
            if upstream_run in counted:
                return None
            self.waits[(job_id, period)] = (outstanding - 1, counted | {upstream_run})
            return outstanding - 1

    def _workflow_write(
        self, key: Key, condition: Callable[[Execution | None], bool], changes: dict[str, Any]
    ) -> bool:
        with self._lock:
            row = self.rows.get(key)
            if row is None or not condition(row):
                return False
            self.rows[key] = row.model_copy(update=changes)
            return True

    def recent(self, job_id: str, *, limit: int) -> list[Execution]:
        """The job's newest `limit` runs, newest first."""
        return self._of(job_id)[:limit]

    def history(
        self,
        job_id: str,
        *,
        start: datetime | None,
        end: datetime | None,
        status: str | None,
        limit: int,
        cursor: Cursor | None,
        kind: str | None = None,
    ) -> tuple[list[Execution], Cursor | None]:
        """Runs with start <= scheduled_for < end, newest first, filtered, `limit` a page."""
        after = cursor["SK"]["S"] if cursor else None
        page: list[Execution] = []
        for row in self._of(job_id):
            sk = run_sk(times.stored(row.scheduled_for))
            if after is not None and sk >= after:
                continue
            if (start and row.scheduled_for < start) or (end and row.scheduled_for >= end):
                continue
            if (status and row.status.value != status) or (kind and row.kind != kind):
                continue
            page.append(row)
            if len(page) == limit:
                return page, {"PK": {"S": job_pk(job_id)}, "SK": {"S": sk}}
        return page, None

    def since(self, job_id: str, *, after: datetime) -> list[Execution]:
        """Every run of the job scheduled after `after`, oldest first."""
        return [r for r in reversed(self._of(job_id)) if r.scheduled_for > after]

    def _of(self, job_id: str) -> list[Execution]:
        with self._lock:
            rows = [r for (j, _), r in self.rows.items() if j == job_id]
        return sorted(rows, key=lambda r: r.scheduled_for, reverse=True)


def _lease_changes(lease: Lease) -> dict[str, Any]:
    return {
        "lease_owner": lease.owner,
        "lease_message": lease.message,
        "lease_until": lease.until,
        "worker": lease.worker,
    }


def _end_changes(end: AttemptEnd) -> dict[str, Any]:
    changes: dict[str, Any] = {"finished_at": end.finished_at, "duration_ms": end.duration_ms}
    if end.error is None:
        changes["result"] = json.loads(end.result if end.result is not None else "null")
    else:
        changes["error"] = RunError(type=end.error[0], message=end.error[1])
    return changes


def _attempt_record(end: AttemptEnd) -> AttemptRecord:
    return AttemptRecord(
        attempt=end.attempt,
        started_at=end.started_at,
        finished_at=end.finished_at,
        outcome=end.status.value,
        error=RunError(type=end.error[0], message=end.error[1]) if end.error else None,
        worker=end.worker,
    )


def _dl_cursor(dl_key: str, dl_sk: str, key: Key) -> Cursor:
    return {
        "dl_key": {"S": dl_key},
        "dl_sk": {"S": dl_sk},
        "PK": {"S": job_pk(key[0])},
        "SK": {"S": run_sk(key[1])},
    }
