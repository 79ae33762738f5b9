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
from jobsched.domain.results import Control
from jobsched.domain.status import JobStatus
from jobsched.errors import JobschedError, ValidationFailed
from jobsched.ports import JobStore, RunStore
from jobsched.services.jobs import JobService, next_run_shown
from jobsched.services.schedule import ScheduleService

BulkAction = Literal["pause", "resume", "cancel", "run_now"]

_CURSOR_KEYS: dict[str, set[str]] = {
    "created": {"PK", "SK", "tenant", "created_at"},
    "next_run": {"PK", "SK", "tenant", "next_run_at"},
}


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

    def list_jobs(
        self, *, tenant: str, where: JobFilter, order: ListOrder, cursor: str | None, limit: int
    ) -> ListedPage:
        """A page of the tenant's jobs matching `where`, and the cursor of the next page."""
        start = None
        if cursor:
            start = cursors.decode(cursor, keys=_CURSOR_KEYS[order], pinned={"tenant": tenant, "SK": "META"})
        page = self.jobs.list_jobs(tenant, order=order, where=where, cursor=start, limit=limit)
        now = self.job_service.clock.now()
        items = [
            ListedJob(
                job=job,
                next_run_at=next_run_shown(job, now=now),
                last_run=next(iter(self.runs.recent(job.job_id, limit=1)), None),
            )
            for job in page.jobs
        ]
        return ListedPage(
            items=items,
            next_cursor=cursors.encode(page.cursor) if page.cursor else None,
            items_read=page.items_read,
        )

    def count_jobs(self, *, tenant: str, where: JobFilter) -> StatusCounts:
        """The tenant's jobs matching `where` (status aside) per status, over at most MAX_COUNT_READ
        index items: one bounded read of the caller's partition, never a scan."""
        return self.jobs.count_by_status(tenant, where=where, stop_at=MAX_COUNT_READ)

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
            ids.extend(j.job_id for j in page.jobs)
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
