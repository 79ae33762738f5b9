"""Composition of the external worker pools (jobsched.services.workers) for the functions that
serve them: the api (the worker API) and the worker (which hands worker-pool runs to their pool)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobsched.adapters.dynamodb.workers import WorkerStore
from jobsched.services.workers import WorkerPools

if TYPE_CHECKING:
    from jobsched.wiring import Services


def worker_pools(services: Services, *, table: str) -> WorkerPools | None:
    """The pools on the workers table `table`, beside the services' own stores; None without a table
    (a deployment that has not created it yet: worker-pool jobs then fail visibly, never silently)."""
    if not table:
        return None
    client = services.jobs.client  # type: ignore[attr-defined]  # the DynamoDB JobStore's client
    return WorkerPools(
        workers=WorkerStore(client=client, table=table),
        jobs=services.jobs,
        runs=services.runs,
        clock=services.clock,
        failures=services.failures,
        dag=services.dag,
        markers=services.worker,  # the slot and key slots its worker function took before the hand-off
    )


def attach(services: Services, *, table: str) -> WorkerPools | None:
    """worker_pools(), and the worker's hand-off of worker-pool runs to it."""
    pools = worker_pools(services, table=table)
    if pools is not None:
        services.worker.hand_off = pools.hand_off
        services.worker.pool_holds = pools.still_holds
    return pools
