"""A tenant's jobs as a list, and actions on many of them at once.

The listing reads the tenant's listing index (JobStore.list_jobs: never a scan) and, for each job of
the page, its newest run (one Query of at most one item on the job's run partition): last_run is
read, not kept on the job item, so no run's hot path pays a write for it; a page of N jobs costs N
small reads, at most MAX_LIST_PAGE.

A bulk action runs synchronously over at most MAX_LIST_PAGE jobs (a filter that matches more is a
400: narrow it), each through the same service call as its single-job route, and answers one
result per job: a failure of one job is its result, not the request's. A crash halfway leaves the
first jobs done and the rest untouched; each action is idempotent (pause, resume and cancel of a
job already there answer success), so the caller repeats the request (run_now queues another run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import ValidationError as PydanticValidationError

from jobsched.domain import cursors
from jobsched.domain.listing import MAX_COUNT_READ, MAX_LIST_PAGE, JobFilter, ListOrder, StatusCounts
from jobsched.domain.models import Execution, Job
from jobsched.domain.packs import PackEntry
from jobsched.domain.records import Cursor
from jobsched.domain.results import Control
from jobsched.domain.status import JobStatus
from jobsched.errors import JobschedError, ValidationFailed
from jobsched.ports import JobStore, RunStore
from jobsched.services.jobs import JobService, next_run_shown
from jobsched.services.packs import PackedJobs
from jobsched.services.schedule import ScheduleService

BulkAction = Literal["pause", "resume", "cancel", "run_now"]

_CURSOR_KEYS: dict[str, set[str]] = {
    "created": {"PK", "SK", "tenant", "created_at"},
    "next_run": {"PK", "SK", "tenant", "next_run_at"},
}
# A page cut inside a pack's jobs (services/packs.py) continues at that pack: the index key before it
# (or the partition's start) and how many of its jobs were answered already.
_SKIP = "skip"
_PACK = "pack"
_FROM_START = {"tenant", "SK", _PACK, _SKIP}


@dataclass(frozen=True, slots=True)
class ListedJob:
    """One job of a listing page, with its next firing and newest run."""

    job: Job
    next_run_at: datetime | None
    last_run: Execution | None


@dataclass(frozen=True, slots=True)
class ListedPage:
    """A listing page; `items_read` is what the index read cost, in items."""

    items: list[ListedJob]
    next_cursor: str | None
    items_read: int


@dataclass(frozen=True, slots=True)
class BulkItem:
    """What one job of a bulk action came to: its control record, or the error it met."""

    job_id: str
    control: Control | None = None
    error: JobschedError | None = None


@dataclass
class Catalog:
    """List a tenant's jobs; act on many of them."""

    job_service: JobService
    schedule: ScheduleService

    @property
    def jobs(self) -> JobStore:
        return self.job_service.jobs

    @property
    def runs(self) -> RunStore:
        return self.job_service.runs

    @property
    def packed(self) -> PackedJobs | None:
        """Packed one-offs (services/packs.py): a pack's cursor item in the listing stands for its jobs."""
        return self.job_service.packed

    def list_jobs(
        self, *, tenant: str, where: JobFilter, order: ListOrder, cursor: str | None, limit: int
    ) -> ListedPage:
        """A page of the tenant's jobs matching `where`, and the cursor of the next page.

        A page cut inside a pack's jobs continues at that pack: its cursor is the index key before the
        pack (or the partition's start), the pack's id, and the place of the last job answered in the
        pack's order (services/packs.py PackedJobs.expand); the next page skips the jobs up to that
        place in that pack only."""
        start, resume = self._decode(cursor, tenant=tenant, order=order)
        page = self.jobs.list_jobs(tenant, order=order, where=where, cursor=start, limit=limit)
        now = self.job_service.clock.now()
        items: list[ListedJob] = []
        next_cursor = cursors.encode(page.cursor) if page.cursor else None
        for i, entry in enumerate(page.entries):
            if isinstance(entry, Job):
                found: list[tuple[int, Job, Execution | None, bool]] = [(0, entry, None, False)]
            else:
                after = resume[1] if resume is not None and resume[0] == entry.pack_id else -1
                resume = None if after >= 0 else resume  # once: the pack it names
                found = [
                    (p, j, r, True) for p, j, r in self._expand(entry, where=where, order=order, after=after)
                ]
            cut = False
            for place, job, row, packed in found:
                if len(items) == limit:
                    before = page.before[i] if page.before is not None else None
                    if packed:
                        assert isinstance(entry, PackEntry)
                        next_cursor = self._encode(before, tenant=tenant, pack=(entry.pack_id, place - 1))
                    else:
                        next_cursor = self._encode(before, tenant=tenant, pack=None)
                    cut = True
                    break
                last_run = row if packed else next(iter(self.runs.recent(job.job_id, limit=1)), None)
                items.append(ListedJob(job=job, next_run_at=next_run_shown(job, now=now), last_run=last_run))
            if cut:
                break
        return ListedPage(items=items, next_cursor=next_cursor, items_read=page.items_read)

    def _expand(
        self, entry: PackEntry, *, where: JobFilter, order: ListOrder, after: int = -1
    ) -> list[tuple[int, Job, Execution | None]]:
        if self.packed is None:
            return []
        return self.packed.expand(entry, where=where, order=order, after=after)

    @staticmethod
    def _encode(before: Cursor | None, *, tenant: str, pack: tuple[str, int] | None) -> str:
        """A cursor after `before` (None: the partition's start), in `pack` after its place, if given."""
        if before is not None and pack is None:
            return cursors.encode(before)
        where = before if before is not None else {"tenant": {"S": tenant}, "SK": {"S": "META"}}
        name, place = pack if pack is not None else ("", -1)
        return cursors.encode({**where, _PACK: {"S": name}, _SKIP: {"S": str(place)}})

    @staticmethod
    def _decode(
        cursor: str | None, *, tenant: str, order: ListOrder
    ) -> tuple[Cursor | None, tuple[str, int] | None]:
        """The index key a cursor continues after (None: the partition's start), and the pack it stops
        in with the place of its last job answered; a 400 for a cursor this API did not issue."""
        if not cursor:
            return None, None
        pinned = {"tenant": tenant, "SK": "META"}
        shapes = (_CURSOR_KEYS[order], _CURSOR_KEYS[order] | {_PACK, _SKIP}, _FROM_START)
        for i, keys in enumerate(shapes):
            try:
                key = cursors.decode(cursor, keys=keys, pinned=pinned)
            except ValidationFailed:
                if i == len(shapes) - 1:
                    raise
                continue
            if _SKIP not in key:
                return key, None
            raw, pack = key.pop(_SKIP)["S"], key.pop(_PACK)["S"]
            try:
                place = int(raw) if raw.isascii() else None
            except ValueError:
                place = None
            if place is None or not -1 <= place < 10_000:
                raise ValidationFailed("cursor: not a cursor this API issued", field="cursor")
            return (None if keys == _FROM_START else key), ((pack, place) if pack else None)
        raise AssertionError("unreachable")  # pragma: no cover

    def count_jobs(self, *, tenant: str, where: JobFilter) -> StatusCounts:
        """The tenant's jobs matching `where` (status aside) per status, over at most MAX_COUNT_READ
        index items: one bounded read of the caller's partition, never a scan (and each pack met,
        expanded: its definitions and runs read)."""
        counted = self.jobs.count_by_status(tenant, where=where, stop_at=MAX_COUNT_READ)
        if not counted.packs or self.packed is None:
            return counted
        counts = dict(counted.counts)
        for status, n in self.packed.count(counted.packs, where=where).items():
            counts[status] = counts.get(status, 0) + n
        return StatusCounts(counts=counts, complete=counted.complete, items_read=counted.items_read)

    def act(
        self, action: BulkAction, *, tenant: str, job_ids: list[str] | None, where: JobFilter | None
    ) -> list[BulkItem]:
        """Apply `action` to each of `job_ids`, or to every job matching `where` (at most MAX_LIST_PAGE)."""
        if job_ids is None:
            job_ids = self._matching(tenant, where or JobFilter())
        if len(job_ids) > MAX_LIST_PAGE:
            raise ValidationFailed(f"job_ids: at most {MAX_LIST_PAGE} per call", field="job_ids")
        call = self._action(action)
        results: list[BulkItem] = []
        for job_id in dict.fromkeys(job_ids):  # each job once, in the caller's order
            try:
                results.append(BulkItem(job_id=job_id, control=call(job_id, tenant)))
            except JobschedError as exc:  # a 4xx for one job is that job's result
                results.append(BulkItem(job_id=job_id, error=exc))
        return results

    def matching(self, tenant: str, where: JobFilter | None) -> list[str]:
        """The ids of the tenant's jobs matching `where` (a 400 if more than MAX_LIST_PAGE)."""
        return self._matching(tenant, where or JobFilter())

    def _matching(self, tenant: str, where: JobFilter) -> list[str]:
        ids: list[str] = []
        cursor = None
        while True:
            page = self.jobs.list_jobs(
                tenant, order="created", where=where, cursor=cursor, limit=MAX_LIST_PAGE + 1 - len(ids)
            )
            for entry in page.entries:
                if isinstance(entry, Job):
                    ids.append(entry.job_id)
                else:
                    ids.extend(job.job_id for _, job, _ in self._expand(entry, where=where, order="created"))
            cursor = page.cursor
            if len(ids) > MAX_LIST_PAGE:
                raise ValidationFailed(
                    f"filter: matches more than {MAX_LIST_PAGE} jobs; narrow it or name job_ids",
                    field="filter",
                )
            if cursor is None:
                return ids

    def _action(self, action: BulkAction) -> Callable[[str, str], Control]:
        schedule, jobs = self.schedule, self.job_service

        def cancel(job_id: str, tenant: str) -> Control:
            return jobs.cancel(job_id, tenant=tenant)

        calls: dict[str, Callable[[str, str], Control]] = {
            "pause": lambda job_id, tenant: schedule.pause(job_id, tenant=tenant),
            "resume": lambda job_id, tenant: schedule.resume(job_id, tenant=tenant),
            "cancel": cancel,
            "run_now": lambda job_id, tenant: schedule.run_now(job_id, tenant=tenant),
        }
        return calls[action]


def filter_of(
    *,
    status: str | None,
    type_: str | None,
    name_prefix: str | None,
    target: str | None,
    tag: str | None,
) -> JobFilter:
    """The listing's query parameters as a JobFilter; a 400 naming the parameter that is wrong."""
    raw = {"status": status, "type": type_, "name_prefix": name_prefix, "target": target, "tag": tag}
    given = {k: v for k, v in raw.items() if v not in (None, "")}
    if "status" in given and given["status"] not in {s.value for s in JobStatus}:
        raise ValidationFailed(f"status: one of {', '.join(s.value for s in JobStatus)}", field="status")
    try:
        return JobFilter.model_validate(given)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "filter"
        raise ValidationFailed(f"{name}: {first['msg']}", field=name) from None


__all__ = ["BulkAction", "BulkItem", "Catalog", "ListedJob", "ListedPage", "filter_of"]
