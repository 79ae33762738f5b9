"""Per-tenant limits: a job's concurrency key and the operator-set tenant quota (pure value objects).

A concurrency key is scoped to its tenant: two tenants' keys named "db" never share slots. A quota is
set by an operator (`jobsched admin quota`, straight to the quotas table) and never through the
tenant API; a tenant without one has DEFAULT_QUOTA.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from jobsched.errors import JobschedError

KEY_PATTERN = r"^[A-Za-z0-9_.:/-]{1,64}$"
MAX_KEY_LIMIT = 1000
# How long a run that found its key full waits before it looks again: doubled per wait, to this cap.
FIRST_KEY_WAIT_SECONDS = 1
MAX_KEY_WAIT_SECONDS = 30


class Concurrency(BaseModel):
    """At most `limit` runs of `key` at once across every job of the tenant that names it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(pattern=KEY_PATTERN)
    """The key's name, scoped to the tenant: letters, digits and `_.:/-`, 1 to 64 characters."""
    limit: int = Field(ge=1, le=MAX_KEY_LIMIT)
    """Runs of the key that may run at once; the jobs sharing a key should name the same limit
    (each run is admitted against its own job's limit)."""


TENANT_KEY = "*runs"
"""The tenant-wide concurrency key that max_concurrent_runs is held as: "*" is outside KEY_PATTERN,
so no job can name it, and it never shares slots with a key of the tenant's jobs."""


def key_wait_seconds(waits: int) -> int:
    """The delay before a run's `waits`-th look at its full key (1-based): 1, 2, 4, ... up to 30 s."""
    return int(min(MAX_KEY_WAIT_SECONDS, FIRST_KEY_WAIT_SECONDS * 2 ** min(max(0, waits - 1), 8)))


def wait_reason(concurrency: Concurrency) -> str:
    """What a run's history says while (and after) it waited for its key."""
    return f"waited for concurrency key {concurrency.key!r} (limit {concurrency.limit})"


def tenant_wait_reason(limit: int) -> str:
    """What a run's history says while (and after) it waited for its tenant's max_concurrent_runs."""
    return f"waited for the tenant's quota max_concurrent_runs (limit {limit})"


def rate_slots(seconds: Sequence[int], *, rate: int, shard: int = 0, shards: int = 1) -> list[int]:
    """The second each of one tenant's runs may start at, so that at most `rate` start per second.

    `seconds`: the Unix seconds the runs are due on, in hand-over order; the answer is in the same
    order, each at or after its own second. Shards divide the rate by slots, not by seconds: second
    t holds the tenant's slots t*rate .. t*rate + rate - 1, and shard i takes the slots i, i + shards,
    i + 2*shards, ... of them, so the shards side by side never start more than `rate` in a second
    (and a rate below the shard count still lets each shard start one every few seconds). Within a
    shard, runs take the free slots in the order they are due (hand-over order breaks ties).
    """
    order = sorted(range(len(seconds)), key=lambda i: (seconds[i], i))
    out = [0] * len(seconds)
    last = -1  # the last slot this shard gave out
    for i in order:
        slot = max(seconds[i] * rate, last + 1)
        slot += (shard - slot) % shards  # this shard's next slot at or after it
        last = slot
        out[i] = slot // rate
    return out


class Quota(BaseModel):
    """What one tenant may use; every field has a default (docs/quotas.md), an operator overrides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_jobs: int = Field(default=10_000, ge=0, le=10_000_000)
    """Jobs the tenant may hold that are not finished (SCHEDULED or PAUSED); a create over it is a 429."""
    max_concurrent_runs: int = Field(default=100, ge=1, le=100_000)
    """The tenant's runs at once (run time: an excess run waits, it is never dropped). Enforced for
    tenants whose quota an operator set; the others share the fleet's own limit (docs/quotas.md: the
    slot it takes would cost every tenant's runs three limits-table calls)."""
    max_runs_per_second: int = Field(default=50, ge=1, le=100_000)
    """The tenant's run starts per second (run time: the dispatcher delays an excess run to a later
    second, it is never dropped)."""
    min_cron_interval_seconds: int = Field(default=1, ge=1, le=86_400)
    """The shortest gap between two ticks of a recurring job; a create or edit under it is a 429."""
    backfill_ticks_per_day: int = Field(default=100_000, ge=0, le=100_000_000)
    """Ticks the tenant's backfills may plan per UTC day, counted when planned; a request past the
    day's budget is a 429 and plans nothing."""
    max_fargate_cpu: int | None = Field(default=None, ge=256, le=100_000 * 1024)
    """Fargate CPU units (1024 = 1 vCPU) the tenant's runs may have reserved at once, within the
    account's quota (jobsched.domain.fargate_vcpu); None: no cap of its own. An excess run waits queued."""


DEFAULT_QUOTA = Quota()
QUOTA_NAMES = tuple(Quota.model_fields)


class QuotaExceeded(JobschedError):
    """A request over one of the tenant's quotas: 429, naming the quota and its limit."""

    status = 429
    code = "quota_exceeded"

    def __init__(self, quota: str, limit: int, message: str) -> None:
        super().__init__(message, field=quota)
        self.quota = quota
        self.limit = limit
