"""DynamoDB adapters: the jobs table (jobs, idempotency records, the due index, start markers,
shard leases) and the runs table, one module per idea; this package re-exports what other code imports.

    codec.py       the stored form (the only module that reads {"S": ...} maps)
    conditions.py  the conditional-write call and the named sub-condition grammar
    jobs.py        JobStore: definitions, the due index, the start markers (slot and count)
    leases.py      shard leases (a base of JobStore: the same table)
    runs.py        RunStore: one row per firing, moved along the legal edges
"""

from __future__ import annotations

from jobsched.adapters.dynamodb.codec import (
    INLINE_PAYLOAD_BYTES,
    PAYLOAD_CACHE_ENTRIES,
    execution_from_item,
    job_from_item,
    job_items,
    job_to_item,
)
from jobsched.adapters.dynamodb.jobs import IDEMPOTENCY_HOURS, JobStore
from jobsched.adapters.dynamodb.runs import RunStore
from jobsched.domain.keys import due_key_for, job_pk, parse_run_id, run_id_for, run_sk
from jobsched.domain.records import RUN_HISTORY_DAYS, DuePage, ShardLease, Transition

__all__ = [
    "IDEMPOTENCY_HOURS",
    "INLINE_PAYLOAD_BYTES",
    "PAYLOAD_CACHE_ENTRIES",
    "RUN_HISTORY_DAYS",
    "DuePage",
    "JobStore",
    "RunStore",
    "ShardLease",
    "Transition",
    "due_key_for",
    "execution_from_item",
    "job_from_item",
    "job_items",
    "job_pk",
    "job_to_item",
    "parse_run_id",
    "run_id_for",
    "run_sk",
]
