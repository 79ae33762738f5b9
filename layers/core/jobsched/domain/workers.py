"""External workers of a pool, their holds on runs, and the pool's queue of waiting runs (pure).

A worker's item is the one place its capacity is accounted: every hold (a reservation, or a run
the worker confirmed by its ack) is written on it with a compare-and-set on its version, so the
free capacity a placer computes (capacity minus holds) is exact for the version it read, and two
placers that read the same version cannot both add a hold (ports.WorkerStore.reserve).

Timeline of one run on a pool, and where each crash leaves it:

    dispatch ─> run row PENDING ─> queue entry (tenant, pool, enqueued_at, run)
    placer   ─> reserve on worker W (CAS on W.version)   crash: queued and held; the next pass
             ─> drop the queue entry                      sees the hold and drops the entry
    W: poll  ─> answers its reserved runs
    W: ack   ─> run LEASED (owner W), hold confirmed     no ack in RESERVATION_SECONDS: the
                                                          placer re-queues it, then releases it
    W: started / heartbeat / finished ─> RUNNING ─> SUCCEEDED|FAILED, then the hold is released
    W silent for DEAD_AFTER_SECONDS ─> W is DEAD, its holds released in the same write, its
             confirmed runs re-queued (idempotent jobs) or LOST; W's later reports are refused
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from jobsched.domain.placement import Resources, Slot

HEARTBEAT_SECONDS = 10
"""How often a worker heartbeats."""
MISSED_HEARTBEATS = 3
DEAD_AFTER_SECONDS = HEARTBEAT_SECONDS * MISSED_HEARTBEATS
"""A worker with no heartbeat for this long (three missed: 30 s) is dead."""
RESERVATION_SECONDS = 15
"""A reservation the worker has not acknowledged within this long is released and re-placed."""
MAX_POLL_WAIT_SECONDS = 20
"""The longest one long-poll waits for work (an API Gateway call must answer within 29 s)."""
MAX_LABELS = 20


def pool_key_holder(scheduled_for: str) -> str:
    """A worker-pool run's holder in its concurrency keys' sets: the run alone, no message, so the
    pool that renews and releases it and every message of the run (a retry's) name the same one."""
    return f"{scheduled_for}#pool"

WorkerStatus = Literal["ALIVE", "DEAD"]
HoldState = Literal["reserved", "confirmed"]

Labels = dict[str, str]


class Hold(BaseModel):
    """A run's claim on a worker's capacity: reserved by a placer, confirmed by the worker's ack."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    job_id: str
    scheduled_for: str
    """The run's tick, stored form (a run-row key)."""
    resources: Resources
    state: HoldState = "reserved"
    until: datetime
    """A reservation's deadline for the ack (a confirmed hold lasts while its worker lives)."""
    enqueued_at: datetime
    """When the run joined the pool's queue: it rejoins at the same place if the hold is released."""
    labels: Labels = Field(default_factory=dict)


class Worker(BaseModel):
    """A registered worker: who it belongs to, what it has, what it holds, when it last spoke."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: str
    tenant: str
    pool: str
    capacity: Resources
    labels: Labels = Field(default_factory=dict)
    status: WorkerStatus = "ALIVE"
    registered_at: datetime
    last_heartbeat: datetime
    reported_free: Resources | None = None
    """What the worker said it has free at its last heartbeat (informative: placement counts holds)."""
    reported_runs: dict[str, str] = Field(default_factory=dict)
    """The runs the worker said it holds at its last heartbeat, and their states."""
    holds: dict[str, Hold] = Field(default_factory=dict)
    version: int = 1

    def used(self) -> Resources:
        """What every hold takes, summed."""
        used = Resources()
        for hold in self.holds.values():
            used = used.plus(hold.resources)
        return used

    def free(self) -> Resources:
        """Capacity minus every hold: what a placer may still reserve."""
        used = self.used()
        return Resources(
            cpu=max(0, self.capacity.cpu - used.cpu),
            memory_mib=max(0, self.capacity.memory_mib - used.memory_mib),
            gpus=max(0, self.capacity.gpus - used.gpus),
        )

    def slot(self) -> Slot:
        """This worker as placement sees it."""
        return Slot(self.worker_id, self.free(), self.labels)

    def is_late(self, now: datetime) -> bool:
        """Whether it missed three heartbeats by `now` (still ALIVE until someone marks it dead)."""
        return now - self.last_heartbeat > timedelta(seconds=DEAD_AFTER_SECONDS)


class QueuedRun(BaseModel):
    """A worker-pool run waiting for a worker, in its pool's queue (oldest first by enqueued_at)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str
    pool: str
    run_id: str
    job_id: str
    scheduled_for: str
    resources: Resources
    labels: Labels = Field(default_factory=dict)
    enqueued_at: datetime
