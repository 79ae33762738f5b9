"""ports.WorkerStore in memory: workers and pool queues in dicts behind one lock."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from jobsched.domain.keys import pool_queue_pk, pool_queue_sk
from jobsched.domain.placement import Resources
from jobsched.domain.records import Cursor
from jobsched.domain.workers import Hold, QueuedRun, Worker


@dataclass
class MemoryWorkerStore:
    """jobsched.ports.WorkerStore on dicts; every method is atomic, as one conditional write is."""

    workers: dict[tuple[str, str], Worker] = field(default_factory=dict)
    queues: dict[tuple[str, str], dict[tuple[datetime, str], QueuedRun]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def register(self, worker: Worker) -> bool:
        with self._lock:
            if (worker.tenant, worker.worker_id) in self.workers:
                return False
            self.workers[(worker.tenant, worker.worker_id)] = worker
            return True

    def get_worker(self, tenant: str, worker_id: str) -> Worker | None:
        with self._lock:
            return self.workers.get((tenant, worker_id))

    def list_workers(self, tenant: str, *, pool: str | None = None) -> list[Worker]:
        with self._lock:
            found = [
                w for (t, _), w in self.workers.items() if t == tenant and (pool is None or w.pool == pool)
            ]
        return sorted(found, key=lambda w: w.worker_id)

    def heartbeat(
        self, tenant: str, worker_id: str, *, now: datetime, free: Resources | None, runs: Mapping[str, str]
    ) -> Worker | None:
        with self._lock:
            worker = self.workers.get((tenant, worker_id))
            if worker is None or worker.status != "ALIVE":
                return worker
            worker = worker.model_copy(
                update={"last_heartbeat": now, "reported_free": free, "reported_runs": dict(runs)}
            )
            self.workers[(tenant, worker_id)] = worker
            return worker

    def _change(self, tenant: str, worker_id: str, holds: dict[str, Hold]) -> None:
        worker = self.workers[(tenant, worker_id)]
        self.workers[(tenant, worker_id)] = worker.model_copy(
            update={"holds": holds, "version": worker.version + 1}
        )

    def reserve(self, tenant: str, worker_id: str, *, hold: Hold, expected_version: int) -> bool:
        with self._lock:
            worker = self.workers.get((tenant, worker_id))
            if (
                worker is None
                or worker.status != "ALIVE"
                or worker.version != expected_version
                or hold.run_id in worker.holds
            ):
                return False
            self._change(tenant, worker_id, {**worker.holds, hold.run_id: hold})
            return True

    def confirm(self, tenant: str, worker_id: str, *, run_id: str, now: datetime) -> bool:
        with self._lock:
            worker = self.workers.get((tenant, worker_id))
            if worker is None or worker.status != "ALIVE" or run_id not in worker.holds:
                return False
            hold = worker.holds[run_id]
            if hold.state == "confirmed":
                return True
            self._change(
                tenant, worker_id, {**worker.holds, run_id: hold.model_copy(update={"state": "confirmed"})}
            )
            return True

    def release(self, tenant: str, worker_id: str, *, run_id: str, only: Hold | None = None) -> bool:
        with self._lock:
            worker = self.workers.get((tenant, worker_id))
            if worker is None or run_id not in worker.holds:
                return False
            if only is not None and not self._is_that_reservation(worker.holds[run_id], only):
                return False
            self._change(tenant, worker_id, {k: v for k, v in worker.holds.items() if k != run_id})
            return True

    def requeue_lapsed(self, tenant: str, worker_id: str, *, hold: Hold, run: QueuedRun) -> bool:
        with self._lock:  # the lock makes the release and the enqueue one atomic step
            if not self.release(tenant, worker_id, run_id=hold.run_id, only=hold):
                return False
            self.queues.setdefault((run.tenant, run.pool), {})[(run.enqueued_at, run.run_id)] = run
            return True

    @staticmethod
    def _is_that_reservation(held: Hold, hold: Hold) -> bool:
        return held.state == "reserved" and held == hold.model_copy(update={"state": "reserved"})

    def mark_dead(self, tenant: str, worker_id: str, *, expected_version: int) -> Worker | None:
        with self._lock:
            worker = self.workers.get((tenant, worker_id))
            if worker is None or worker.status != "ALIVE" or worker.version != expected_version:
                return None
            self.workers[(tenant, worker_id)] = worker.model_copy(
                update={"status": "DEAD", "holds": {}, "version": worker.version + 1}
            )
            return worker

    def enqueue(self, run: QueuedRun) -> bool:
        with self._lock:
            queue = self.queues.setdefault((run.tenant, run.pool), {})
            key = (run.enqueued_at, run.run_id)
            if key in queue:
                return False
            queue[key] = run
            return True

    def waiting(self, tenant: str, pool: str, *, limit: int) -> list[QueuedRun]:
        with self._lock:
            queue = self.queues.get((tenant, pool), {})
            return [queue[key] for key in sorted(queue)[:limit]]

    def waiting_page(
        self, tenant: str, pool: str, *, start: Cursor | None, limit: int
    ) -> tuple[list[QueuedRun], Cursor | None]:
        after = start["SK"]["S"] if start else ""
        with self._lock:
            queue = self.queues.get((tenant, pool), {})
            keyed = sorted((pool_queue_sk(at, run_id), run) for (at, run_id), run in queue.items())
        page = [(sk, run) for sk, run in keyed if sk > after][:limit]
        if len(page) < limit:
            return [run for _, run in page], None
        # As DynamoDB does, a full page has a cursor even when nothing follows it.
        return [run for _, run in page], {"PK": {"S": pool_queue_pk(tenant, pool)}, "SK": {"S": page[-1][0]}}

    def is_queued(self, run: QueuedRun) -> bool:
        with self._lock:
            return (run.enqueued_at, run.run_id) in self.queues.get((run.tenant, run.pool), {})

    def dequeue(self, run: QueuedRun) -> bool:
        with self._lock:
            return (
                self.queues.get((run.tenant, run.pool), {}).pop((run.enqueued_at, run.run_id), None)
                is not None
            )
