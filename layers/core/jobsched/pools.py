"""Composition of the external worker pools (jobsched.services.workers) for the functions that
serve them: the api (the worker API) and the worker (which hands worker-pool runs to their pool)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobsched.adapters.dynamodb.workers import WorkerStore
from jobsched.ports import WorkerStore as WorkerStorePort
from jobsched.services.workers import WorkerPools

if TYPE_CHECKING:
    from jobsched.wiring import Services


def pools_over(services: Services, workers: WorkerStorePort) -> WorkerPools:
    """The pools on `workers`, beside the services' own stores."""
    return WorkerPools(
        workers=workers,
        jobs=services.jobs,
        runs=services.runs,
        clock=services.clock,
        failures=services.failures,
        dag=services.dag,
        markers=services.worker,  # the slot and key slots its worker function took before the hand-off
    )


def worker_pools(services: Services, *, table: str) -> WorkerPools | None:
    """The pools on the workers table `table`; None without a table (a deployment that has not
    created it yet: worker-pool jobs then fail visibly, never silently)."""
    if not table:
        return None
    client = services.jobs.client  # type: ignore[attr-defined]  # the DynamoDB JobStore's client
    return pools_over(services, WorkerStore(client=client, table=table))


def connect(services: Services, pools: WorkerPools) -> WorkerPools:
    """The worker's two links to `pools`, always set together: its hand-off of worker-pool runs, and
    its check that a lapsed slot's pool run is still the pool's (else it would take the slot over)."""
    services.worker.hand_off = pools.hand_off
    services.worker.pool_holds = pools.still_holds
    return pools


def attach(services: Services, *, table: str) -> WorkerPools | None:
    """worker_pools(), connected to the services' worker."""
    pools = worker_pools(services, table=table)
    return connect(services, pools) if pools is not None else None
