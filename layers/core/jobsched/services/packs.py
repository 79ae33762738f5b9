"""Packed one-offs as the API sees them (jobsched.domain.packs): views, the first touch's copy-out, and
a listing's packs expanded into their jobs.

A packed job has no item of its own until something but its run touches it. The API's JobStore is
wrapped (MaterializingJobStore) so that a read of one by id copies it out first: every service
behind the API (get, edit, pause, resume, cancel, delete, run-now, replay, a run's cancel, a new
dependant naming it) then works on an ordinary job item, and the packed worker defers to that item
from then on (the copy-out flags the run row, which a packed start refuses). A listing reads without
writing: a pack's cursor item stands for its jobs, built here from the definitions and their rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobsched.domain import times
from jobsched.domain.listing import JobFilter, ListOrder
from jobsched.domain.models import Execution, Job
from jobsched.domain.packs import PackEntry, expired, parse_packed
from jobsched.errors import TransientStoreError
from jobsched.ports import Clock, JobStore, PackStore, RunStore

# A copy-out conditions on the run row as read; a run that moves meanwhile (it starts, it ends) makes
# it read again. More than this many moves in a row is a store that keeps failing: a 503.
MATERIALIZE_TRIES = 5


@dataclass
class PackedJobs:
    """Read, copy out and list packed jobs."""

    jobs: JobStore
    runs: RunStore
    packs: PackStore
    clock: Clock

    def materialize(self, job_id: str) -> Job | None:
        """The job's item, copied out of its pack first if it has none (None: no such job).

        The item is the job as its run row leaves it (domain.packs.PackedDefinition.job): SCHEDULED
        with its tick pending while the run has not started (the due index then holds it too, and
        the dispatcher's message and the pack's meet at the run row: one run), COMPLETED or FAILED
        after its run, SCHEDULED while it runs or waits for a retry."""
        for _ in range(MATERIALIZE_TRIES):
            job = self.jobs.get_job(job_id)
            if job is not None:
                return job
            parsed = parse_packed(job_id)
            pack = self.packs.get_pack(parsed[0]) if parsed else None
            definition = pack.definition(job_id) if pack else None
            if definition is None:
                return None
            sf = times.stored(definition.run_at)
            row = self.runs.get(job_id, sf)
            now = times.truncate_ms(self.clock.now())
            if expired(definition, row, now=now):
                return None  # its history expired with its row: gone, not SCHEDULED again
            job = definition.job(row=row, packed=False).model_copy(update={"updated_at": now})
            if self.packs.materialize(job, row=row, scheduled_for=sf):
                return self.jobs.get_job(job_id) or job
        raise TransientStoreError(f"job {job_id} kept changing while it was copied out of its batch; retry")

    def view(self, job_id: str) -> Job | None:
        """The job as a read without a write sees it: its item, or a packed job's definition and run
        row (what the listing shows; None: no such job)."""
        job = self.jobs.get_job(job_id)
        parsed = parse_packed(job_id)
        if job is not None or parsed is None:
            return job
        pack = self.packs.get_pack(parsed[0])
        definition = pack.definition(job_id) if pack is not None else None
        if definition is None:
            return None
        row = self.runs.get(job_id, times.stored(definition.run_at))
        return None if expired(definition, row, now=self.clock.now()) else definition.job(row=row)

    def foreign(self, job_id: str, tenant: str) -> bool:
        """Whether `job_id` is a packed job with no item of its own that is not `tenant`'s (or not
        there at all): asked before a read by id, so that another tenant's request copies nothing out
        (it answers 404 as for any job of another tenant). An id with an item is the caller's to check."""
        parsed = parse_packed(job_id)
        if parsed is None or self.jobs.get_job(job_id) is not None:
            return False
        pack = self.packs.get_pack(parsed[0])  # consistent: a read just after the 201 finds it
        definition = pack.definition(job_id) if pack is not None else None
        return definition is None or definition.tenant != tenant

    def expand(
        self, entry: PackEntry, *, where: JobFilter, order: ListOrder, after: int = -1
    ) -> list[tuple[int, Job, Execution | None]]:
        """The pack's jobs that match `where`, each with its place in the pack's order and its run (one
        read of the pack, one BatchGetItem per 100 runs, both eventually consistent): the pack's own
        order ("created"), or run_at order ("next_run": only the jobs its cursor has not handed over).
        The place is the job's in that order among all the pack's jobs, so a page that continues after
        place `after` is not shifted by a job copied out (left out here: its own item is in the index),
        a filter's change, or the cursor's move between two pages."""
        pack = self.packs.get_pack(entry.pack_id, consistent=False)
        if pack is None:
            return []
        ordered = list(pack.definitions)
        if order == "next_run":
            ordered.sort(key=lambda d: (d.run_at, d.job_id))
        cursor = entry.next_run_at
        placed = [
            (place, d)
            for place, d in enumerate(ordered)
            if place > after and (order != "next_run" or (cursor is not None and d.run_at >= cursor))
        ]
        rows = self.runs.get_many([(d.job_id, times.stored(d.run_at)) for _, d in placed])
        now = self.clock.now()
        out: list[tuple[int, Job, Execution | None]] = []
        for place, d in placed:
            row = rows.get((d.job_id, times.stored(d.run_at)))
            if (row is not None and row.materialized) or expired(d, row, now=now):
                continue
            job = d.job(row=row)
            if where.matches(job):
                out.append((place, job, row))
        return out

    def count(self, entries: Sequence[PackEntry], *, where: JobFilter) -> dict[str, int]:
        """The packs' jobs matching `where` (its status aside) per status."""
        anywhere = where.model_copy(update={"status": None})
        counts: dict[str, int] = {}
        for entry in entries:
            for _, job, _ in self.expand(entry, where=anywhere, order="created"):
                counts[job.status.value] = counts.get(job.status.value, 0) + 1
        return counts


class MaterializingJobStore:
    """The API's JobStore: a packed job read by id (get_job, get_jobs) is copied out first; every other
    call is the wrapped store's. (A delegate rather than a subclass: the wrapped store is either
    adapter, DynamoDB's or the in-memory one.)"""

    _inner: JobStore
    _packed: PackedJobs

    def __init__(self, inner: JobStore, packed: PackedJobs) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_packed", packed)

    # Transparent to everything but the reads by id: an attribute set or deleted on it (a setting, a
    # test's monkeypatch) is the wrapped store's.
    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._inner, name)

    def get_job(self, job_id: str) -> Job | None:
        job = self._inner.get_job(job_id)
        if job is None and parse_packed(job_id) is not None:
            return self._packed.materialize(job_id)
        return job

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        found = self._inner.get_jobs(job_ids)
        for job_id in job_ids:
            if job_id not in found and parse_packed(job_id) is not None:
                job = self._packed.materialize(job_id)
                if job is not None:
                    found[job_id] = job
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
