"""Per-tenant limits: a job's concurrency key and the operator-set tenant quota (pure value objects).

A concurrency key is scoped to its tenant: two tenants' keys named "db" never share slots. A quota is
set by an operator (`jobsched admin quota`, straight to the quotas table) and never through the
tenant API; a tenant without one has DEFAULT_QUOTA.
"""

from __future__ import annotations

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


def key_wait_seconds(waits: int) -> int:
    """The delay before a run's `waits`-th look at its full key (1-based): 1, 2, 4, ... up to 30 s."""
    return int(min(MAX_KEY_WAIT_SECONDS, FIRST_KEY_WAIT_SECONDS * 2 ** min(max(0, waits - 1), 8)))


def wait_reason(concurrency: Concurrency) -> str:
    """What a run's history says while (and after) it waited for its key."""
    return f"waited for concurrency key {concurrency.key!r} (limit {concurrency.limit})"


class Quota(BaseModel):
    """What one tenant may use; every field has a default (docs/quotas.md), an operator overrides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_jobs: int = Field(default=10_000, ge=0, le=10_000_000)
    """Jobs the tenant may hold that are not finished (SCHEDULED or PAUSED); a create over it is a 429."""
    max_concurrent_runs: int = Field(default=100, ge=1, le=100_000)
    """The tenant's runs at once (run time: an excess run waits, it is never dropped)."""
    max_runs_per_second: int = Field(default=50, ge=1, le=100_000)
    """The tenant's run starts per second (run time: an excess run waits, it is never dropped)."""
    min_cron_interval_seconds: int = Field(default=1, ge=1, le=86_400)
    """The shortest gap between two ticks of a recurring job; a create or edit under it is a 429."""
    backfill_ticks_per_day: int = Field(default=100_000, ge=0, le=100_000_000)
    """Ticks one backfill request may ask for (a day's budget per request); over it is a 429."""


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
