"""Concurrency keys and tenant quotas at the API: 400s naming `concurrency.key` / `concurrency.limit`,
and a 429 naming the quota and its limit for a create, an edit or a backfill over the tenant's quota.

Requests go through the resolver as API Gateway REST proxy events, over the services on the fakes.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.adapters.memory import MemoryQuotaStore
from jobsched.api import build_app
from jobsched.domain.limits import Quota
from jobsched.services.limits import TenantQuotas
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}
ONE_OFF = {"type": "one_off", "handler": "demo.echo", "run_at": (T0 + timedelta(hours=1)).isoformat()}
EVERY_MINUTE = {"type": "recurring", "handler": "demo.echo", "cron_expr": "* * * * *"}


def api(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def with_quota(world: World, **quota: Any) -> MemoryQuotaStore:
    """An operator set team-a's quota (the store the API reads, cached as on AWS)."""
    store = MemoryQuotaStore({"team-a": Quota(**quota)})
    assert world.svc.worker.limits is not None
    world.svc.job_service.quotas = TenantQuotas(
        store=store, limits=world.svc.worker.limits, clock=world.clock
    )
    return store


@pytest.mark.parametrize(
    ("concurrency", "field"),
    [
        ({"key": "", "limit": 2}, "concurrency.key"),
        ({"key": "has space", "limit": 2}, "concurrency.key"),
        ({"key": "k" * 65, "limit": 2}, "concurrency.key"),
        ({"limit": 2}, "concurrency.key"),
        ({"key": "db", "limit": 0}, "concurrency.limit"),
        ({"key": "db", "limit": 1001}, "concurrency.limit"),
        ({"key": "db"}, "concurrency.limit"),
        ({"key": "db", "limit": 2, "extra": 1}, "concurrency.extra"),
    ],
)
def test_a_malformed_concurrency_is_a_400_naming_its_field(
    world: World, concurrency: Any, field: str
) -> None:
    status, answer = call(
        api(world), "POST", "/api/jobs", headers=A, body={**ONE_OFF, "concurrency": concurrency}
    )
    assert status == 400, answer
    assert answer["error"]["message"].startswith(f"{field}:"), answer
    assert world.jobs.jobs == {}


def test_a_jobs_concurrency_reads_back_can_be_edited_and_cleared(world: World) -> None:
    app = api(world)
    status, created = call(
        app, "POST", "/api/jobs", headers=A, body={**ONE_OFF, "concurrency": {"key": "db", "limit": 3}}
    )
    assert status == 201, created
    path = f"/api/jobs/{created['job_id']}"
    assert call(app, "GET", path, headers=A)[1]["concurrency"] == {"key": "db", "limit": 3}
    status, edited = call(app, "PATCH", path, headers=A, body={"concurrency": {"key": "api", "limit": 1}})
    assert status == 200 and edited["concurrency"] == {"key": "api", "limit": 1}, edited
    status, cleared = call(app, "PATCH", path, headers=A, body={"concurrency": None})
    assert status == 200 and cleared["concurrency"] is None, cleared


def test_a_create_over_max_jobs_is_a_429_naming_the_quota_and_its_limit(world: World) -> None:
    # Given team-a may hold 2 jobs, and holds 2
    with_quota(world, max_jobs=2)
    app = api(world)
    for _ in range(2):
        assert call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)[0] == 201
    # When it creates a third
    status, answer = call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)
    # Then it is a 429 naming the quota and its limit, and nothing is stored
    assert status == 429, answer
    assert answer["quota"] == "max_jobs" and answer["limit"] == 2
    assert answer["error"]["code"] == "quota_exceeded" and "max_jobs" in answer["error"]["message"]
    assert len(world.jobs.jobs) == 2
    # And another tenant, at the defaults, is not held to team-a's quota
    assert call(app, "POST", "/api/jobs", headers=B, body=ONE_OFF)[0] == 201


def test_a_cancelled_job_frees_its_place_in_max_jobs(world: World) -> None:
    with_quota(world, max_jobs=1)
    app = api(world)
    _, first = call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)
    assert call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)[0] == 429
    assert call(app, "DELETE", f"/api/jobs/{first['job_id']}", headers=A)[0] == 200
    assert call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)[0] == 201


def test_a_create_retried_with_its_idempotency_key_at_the_quota_answers_as_the_first(world: World) -> None:
    with_quota(world, max_jobs=1)
    app = api(world)
    keyed = {**A, "Idempotency-Key": "once"}
    status, first = call(app, "POST", "/api/jobs", headers=keyed, body=ONE_OFF)
    assert status == 201
    status, again = call(app, "POST", "/api/jobs", headers=keyed, body=ONE_OFF)
    assert status == 201 and again["job_id"] == first["job_id"], again


def test_a_schedule_more_frequent_than_min_cron_interval_is_a_429_on_create_and_on_edit(world: World) -> None:
    with_quota(world, min_cron_interval_seconds=300)
    app = api(world)
    status, answer = call(app, "POST", "/api/jobs", headers=A, body=EVERY_MINUTE)
    assert status == 429 and answer["quota"] == "min_cron_interval_seconds" and answer["limit"] == 300, answer
    status, created = call(
        app, "POST", "/api/jobs", headers=A, body={**EVERY_MINUTE, "cron_expr": "*/5 * * * *"}
    )
    assert status == 201, created
    status, answer = call(
        app, "PATCH", f"/api/jobs/{created['job_id']}", headers=A, body={"cron_expr": "*/2 * * * *"}
    )
    assert status == 429 and answer["quota"] == "min_cron_interval_seconds", answer


def test_backfills_past_the_days_tick_budget_are_a_429(world: World) -> None:
    # Given team-a may backfill 90 ticks a day and an hourly job
    with_quota(world, backfill_ticks_per_day=90)
    app = api(world)
    _, job = call(app, "POST", "/api/jobs", headers=A, body={**EVERY_MINUTE, "cron_expr": "* * * * *"})
    path = f"/api/jobs/{job['job_id']}/backfill"

    def backfill(minutes: int, start: int) -> tuple[int, dict[str, Any]]:
        frm = T0 - timedelta(hours=5) + timedelta(minutes=start)
        body = {"from": frm.isoformat(), "to": (frm + timedelta(minutes=minutes)).isoformat()}
        return call(app, "POST", path, headers=A, body=body)

    # When it backfills 60 ticks, then 60 more the same day
    assert backfill(60, 0)[0] == 202
    status, answer = backfill(60, 60)
    # Then the second is over the day's 90: a 429 naming the quota; 30 more still fit
    assert status == 429 and answer["quota"] == "backfill_ticks_per_day" and answer["limit"] == 90, answer
    assert backfill(30, 120)[0] == 202


def test_a_quota_is_read_once_per_ttl_not_once_per_request(world: World) -> None:
    # Given a store that counts its reads
    store = with_quota(world, max_jobs=100)
    reads: list[str] = []
    original = store.get_quota

    def counted(tenant: str) -> Quota | None:
        reads.append(tenant)
        return original(tenant)

    store.get_quota = counted  # type: ignore[method-assign]
    app = api(world)
    # When the tenant creates 5 jobs within the TTL, and one after it
    for _ in range(5):
        assert call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)[0] == 201
    world.clock.advance(31)
    assert call(app, "POST", "/api/jobs", headers=A, body=ONE_OFF)[0] == 201
    # Then the quota was read twice: once per TTL
    assert reads == ["team-a", "team-a"]


def test_a_request_without_concurrency_hashes_as_it_did_before_the_field_existed() -> None:
    # Given the digest main computed for this body before `concurrency` existed
    import hashlib
    import json

    from jobsched.domain.commands import CreateJobRequest
    from jobsched.services.jobs import request_hash

    request = CreateJobRequest.model_validate(ONE_OFF)
    before = request.model_dump(mode="json")
    before.pop("concurrency")
    digest = hashlib.sha256(json.dumps(before, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    # Then an Idempotency-Key retried across the upgrade still matches its record
    assert request_hash(request) == digest
