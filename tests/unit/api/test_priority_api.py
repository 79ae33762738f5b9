"""A job's `priority` (high | normal | low): accepted on create, answered in the job, stored only when
not normal, a 400 for any other value."""

from __future__ import annotations

import json

import pytest

from jobsched.adapters.dynamodb.codec import job_from_item, job_to_item
from tests.unit.api.test_seed_api import ONE_OFF, A, api
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import World

RECURRING = {"type": "recurring", "handler": "demo.echo", "cron_expr": "*/5 * * * *"}


@pytest.mark.parametrize("body", [ONE_OFF, RECURRING], ids=["one_off", "recurring"])
@pytest.mark.parametrize("priority", ["high", "low"])
def test_a_job_created_with_a_priority_answers_it(
    world: World, body: dict[str, object], priority: str
) -> None:
    # Given a job posted with a priority
    app = api(world)
    status, created = call(app, "POST", "/api/jobs", headers=A, body={**body, "priority": priority})
    assert status == 201, created
    # When it is read back, then it answers that priority
    status, job = call(app, "GET", f"/api/jobs/{created['job_id']}", headers=A)
    assert status == 200 and job["priority"] == priority


def test_a_job_without_a_priority_is_normal(world: World) -> None:
    app = api(world)
    _, created = call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)
    _, job = call(app, "GET", f"/api/jobs/{created['job_id']}", headers=A)
    assert job["priority"] == "normal"


@pytest.mark.parametrize("bad", ["urgent", "HIGH", "", 1, None])
def test_a_priority_other_than_high_normal_or_low_is_a_400_naming_the_field(
    world: World, bad: object
) -> None:
    status, answer = call(api(world), "POST", "/api/jobs", headers=A, body={**ONE_OFF, "priority": bad})
    assert status == 400, answer
    assert "priority" in answer["error"]["message"]


def test_priority_is_stored_only_when_not_normal(world: World) -> None:
    # Given a normal and a high job as the API stores them
    app = api(world)
    _, normal = call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)
    _, high = call(app, "POST", "/api/jobs", headers=A, body={**ONE_OFF, "priority": "high"})
    stored = {k: world.jobs.get_job(v["job_id"]) for k, v in {"normal": normal, "high": high}.items()}
    # When each is encoded as its DynamoDB item
    items = {k: job_to_item(j, shard_count=2) for k, j in stored.items() if j is not None}
    # Then the normal job's item names no priority (its size is unchanged), the high one's does,
    # inside the policy the due index projects; and the item reads back with its priority
    assert "priority" not in json.loads(items["normal"]["policy"]["S"])
    assert json.loads(items["high"]["policy"]["S"]) == {"priority": "high"}
    assert job_from_item(items["high"]).policy.priority == "high"
