"""The operator's API in the template: the listing indexes, and the API's link to the worker's logs."""

from __future__ import annotations

from typing import Any

import pytest

from jobsched import constants as c
from jobsched import resources
from tests.infra.synth import Synth
from tests.infra.test_stack import synth

__all__ = ["synth"]


def _index(synth: Synth, name: str) -> dict[str, Any]:
    table = synth.resource(resources.JOBS_TABLE.logical_id)["Properties"]
    (index,) = (i for i in table["GlobalSecondaryIndexes"] if i["IndexName"] == name)
    return index  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("spec", "sort_key"),
    [(resources.TENANT_JOBS_INDEX, "created_at"), (resources.TENANT_NEXT_RUN_INDEX, "next_run_at")],
    ids=lambda v: getattr(v, "name", v),
)
def test_it_builds_the_listing_indexes_per_tenant_with_a_projection_no_run_rewrites(
    synth: Synth, spec: resources.IndexSpec, sort_key: str
) -> None:
    index = _index(synth, spec.name)
    assert index["KeySchema"] == [
        {"AttributeName": "tenant", "KeyType": "HASH"},
        {"AttributeName": sort_key, "KeyType": "RANGE"},
    ]
    projected = set(index["Projection"]["NonKeyAttributes"])
    # (pack_count: a packed batch's cursor item stands for that many jobs, jobsched.domain.packs; no job
    # item carries it, and a cursor item's is written once)
    assert projected == {"job_id", "status", "type", "name", "tags", "target_type", "pack_count"}
    # Nothing a tick or a run writes on the job (markers, counters, the due key) is projected
    assert not projected & {"dispatched", "active_run", "active_until", "running", "due_key", "payload"}


def test_it_tells_the_api_the_workers_log_group(synth: Synth) -> None:
    api = synth.resource(synth.logical_id(synth.function("api")))["Properties"]["Environment"]["Variables"]
    worker_logs = synth.logical_id(synth.function("worker").node.scope.log_group)  # type: ignore[union-attr]
    assert api[c.WORKER_LOG_GROUP_ENV] == {"Ref": worker_logs}
