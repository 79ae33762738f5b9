"""Worker-pool placers racing on real threads against moto_server (thread-safe, unlike in-process
moto): the reservation's compare-and-set on the worker's version never oversubscribes it."""

from __future__ import annotations

import boto3

from jobsched import resources
from jobsched.adapters.dynamodb.workers import WorkerStore
from tests.contract.test_worker_store import race_placers


def test_racing_placers_on_moto_server_never_oversubscribe_a_worker(endpoint: str) -> None:
    client = boto3.client("dynamodb", endpoint_url=endpoint)
    made = resources.create_local_resources(
        prefix="race", dynamodb=client, sqs=boto3.client("sqs", endpoint_url=endpoint)
    )
    race_placers(WorkerStore(client=client, table=made[resources.WORKERS_TABLE.logical_id]))
