"""Finding a tenant's jobs: tags, the listing's filter, and the page a listing answers (pure).

The listing is served by two per-tenant indexes of the jobs table (jobsched.resources): newest first,
or by next run. A filter narrows what those index reads answer; it never widens them beyond the
caller's own partition, so the items a listing reads grow with the caller's jobs, never with all jobs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from jobsched.domain.models import Job, JobType
from jobsched.domain.packs import PackEntry
from jobsched.domain.records import Cursor

# Tags: at most 20 per job, keys 1..64 characters of [A-Za-z0-9_.-/@] (no ":": a filter is
# "key:value"), values 0..256 printable characters. They ride on the job item (billed per KB on every
# write of it), so they stay small.
MAX_TAGS = 20
TAG_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.\-/@]{1,64}$")
MAX_TAG_VALUE = 256
# A page of the listing (and the bound of one bulk action).
MAX_LIST_PAGE = 100
# Index items one listing request reads at most while a filter drops them: a sparse match answers a
# short page and a cursor instead of reading the tenant's whole partition in one request.
MAX_LIST_READ = 1000
# Index items one count per status (GET /api/jobs/counts) reads at most. The listing index's items
# are ~100 bytes, so this is about 1 MB read, ~125 eventually consistent read units ($0.000016);
# past it the counts are lower bounds ("N+"), never a longer read.
MAX_COUNT_READ = 10_000

ListOrder = Literal["created", "next_run"]


def checked_tags(tags: dict[str, str]) -> dict[str, str]:
    """`tags` when they keep the limits above; ValueError naming the first one that does not."""
    if len(tags) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    for key, value in tags.items():
        if not TAG_KEY_PATTERN.match(key):
            raise ValueError(f"tag key {key!r}: 1..64 characters of letters, digits and _.-/@")
        if len(value) > MAX_TAG_VALUE or not value.isprintable():
            raise ValueError(f"tag {key!r}: the value is at most {MAX_TAG_VALUE} printable characters")
    return tags


def target_type_of(job: Job) -> str:
    """The type of the job's target, as the listing filters on it ("python", "http", ...)."""
    return job.target.type


class JobFilter(BaseModel):
    """What GET /api/jobs and POST /api/jobs/actions narrow a tenant's jobs by (all given must match)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: str | None = Field(default=None, max_length=32)
    type: JobType | None = None
    name_prefix: str | None = Field(default=None, min_length=1, max_length=200)
    target: str | None = Field(default=None, min_length=1, max_length=32)
    """The target's type (python, http, ...)."""
    tag: str | None = Field(default=None, min_length=2, max_length=330, pattern=r"^[^:]+:.*$")
    """"key:value": the job's tag `key` is `value`."""

    def tag_pair(self) -> tuple[str, str] | None:
        """The tag filter as (key, value), or None."""
        if self.tag is None:
            return None
        key, _, value = self.tag.partition(":")
        return key, value

    def matches(self, job: Job) -> bool:
        """Whether `job` passes every filter given (the in-memory store's and the contract's rule)."""
        pair = self.tag_pair()
        return (
            (self.status is None or job.status.value == self.status)
            and (self.type is None or job.type == self.type)
            and (self.name_prefix is None or (job.name or "").startswith(self.name_prefix))
            and (self.target is None or target_type_of(job) == self.target)
            and (pair is None or job.tags.get(pair[0]) == pair[1])
        )


@dataclass(frozen=True, slots=True)
class JobListing:
    """One page of a tenant's jobs, and what reading it cost."""

    entries: list[Job | PackEntry]
    """The jobs matching the filter, in index order, and the packs met (jobsched.domain.packs): a
    pack's cursor item stands for its jobs, which the store cannot filter (services/packs.py does)."""
    cursor: Cursor | None
    """Where the next page starts (None: no more)."""
    items_read: int = 0
    """Index items the store read for the page (a filter drops some of them): the test of "no scan"."""
    truncated: bool = False
    """The read stopped at MAX_LIST_READ before the page was full: follow the cursor."""
    before: list[Cursor | None] | None = None
    """Per entry, the index key of the item read just before it (None: the start of the partition),
    so that a page cut inside a pack's jobs continues at that pack (services/packs.py)."""

    @property
    def jobs(self) -> list[Job]:
        """The page's job items (packs left out)."""
        return [e for e in self.entries if isinstance(e, Job)]


@dataclass(frozen=True, slots=True)
class StatusCounts:
    """A tenant's jobs by status, counted over at most MAX_COUNT_READ items of its listing index."""

    counts: dict[str, int]
    """Jobs per status value (a status without jobs is absent)."""
    complete: bool
    """False: the count stopped at its bound before the partition ended; each count is a lower bound."""
    items_read: int = 0
    """Index items read (the filter drops some of them)."""
    packs: tuple[PackEntry, ...] = ()
    """The packs met: their jobs are counted by services/packs.py, from their runs."""
