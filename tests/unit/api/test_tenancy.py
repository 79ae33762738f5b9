"""Tenancy: one middleware resolves the caller's tenant per request, and a bad setting fails closed.

Requests go through the resolver as API Gateway REST proxy events, over the services on the fakes.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched import constants as c
from jobsched.api import build_app
from jobsched.local import events
from jobsched.local.lambdas import LambdaContext
from tests.unit.services.conftest import T0, World

ROLE_A = "arn:aws:sts::111111111111:assumed-role/team-a/session"
ROLE_B = "arn:aws:sts::222222222222:assumed-role/team-b/session"
ONE_OFF = {"type": "one_off", "handler": "demo.echo", "run_at": (T0 + timedelta(hours=1)).isoformat()}


def api(world: World, source: str) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source=source)


def call(
    app: APIGatewayRestResolver,
    method: str,
    path: str,
    *,
    principal: str | None = None,
    headers: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """One request; `principal` is the IAM principal API Gateway puts on a SigV4-signed call."""
    event = events.api_gateway_event(
        method,
        path,
        {"Content-Type": "application/json", **(headers or {})},
        json.dumps(body).encode() if body else None,
    )
    if principal is not None:
        event["requestContext"]["identity"]["userArn"] = principal
    answer = app.resolve(event, LambdaContext("jobsched-api"))
    return answer["statusCode"], json.loads(answer["body"])


@pytest.mark.parametrize("source", ["IAM ", "bogus", "", "Header", "iam,header"])
def test_an_unknown_tenant_source_fails_when_the_api_is_built_not_open(world: World, source: str) -> None:
    # Given a tenant source that is neither "iam" nor "header" (a typo, a stray space, a wrong case)
    # When the API is built with it, then it refuses to start, naming the setting, instead of
    # trusting the X-Tenant header a caller can set
    with pytest.raises(ValueError, match=c.TENANT_SOURCE_ENV):
        api(world, source)


def test_with_iam_the_tenant_is_the_signed_principal_and_x_tenant_is_ignored(world: World) -> None:
    # Given the API on AWS (tenant from IAM) and a job created by principal A claiming X-Tenant: B's
    app = api(world, "iam")
    status, created = call(
        app,
        "POST",
        "/api/jobs",
        principal=ROLE_A,
        headers={c.TENANT_HEADER: "222222222222:role/team-b"},
        body=ONE_OFF,
    )
    assert status == 201
    # Then the job is A's, whatever the header said
    stored = world.jobs.get_job(created["job_id"])
    assert stored is not None and stored.tenant == "111111111111:role/team-a"
    # and principal B does not see it, even naming A in X-Tenant
    path = f"/api/jobs/{created['job_id']}"
    assert call(app, "GET", path, principal=ROLE_B, headers={c.TENANT_HEADER: stored.tenant})[0] == 404
    assert call(app, "GET", path, principal=ROLE_A)[0] == 200


def test_with_header_the_tenant_is_x_tenant(world: World) -> None:
    # Given the local stack's API (tenant from the X-Tenant header)
    app = api(world, "header")
    # When tenant t1 creates a job
    status, created = call(app, "POST", "/api/jobs", headers={c.TENANT_HEADER: "t1"}, body=ONE_OFF)
    # Then it is t1's: t1 sees it, t2 does not
    assert status == 201
    stored = world.jobs.get_job(created["job_id"])
    assert stored is not None and stored.tenant == "t1"
    path = f"/api/jobs/{created['job_id']}"
    assert call(app, "GET", path, headers={"x-tenant": "t1"})[0] == 200
    assert call(app, "GET", path, headers={c.TENANT_HEADER: "t2"})[0] == 404


@pytest.mark.parametrize(
    ("source", "principal", "headers", "field"),
    [
        ("header", None, {c.TENANT_HEADER: "bad tenant!"}, c.TENANT_HEADER),
        ("header", None, {c.TENANT_HEADER: "x" * 129}, c.TENANT_HEADER),
        ("iam", None, {c.TENANT_HEADER: "t1"}, "IAM principal"),
        ("iam", "arn:aws:iam::not-an-account:user/x", {}, "IAM principal"),
    ],
    ids=["header-bad-characters", "header-too-long", "iam-no-principal", "iam-malformed-principal"],
)
def test_an_invalid_tenant_is_a_400_naming_where_it_came_from_and_nothing_is_written(
    world: World, source: str, principal: str | None, headers: dict[str, str], field: str
) -> None:
    # Given a request whose tenant cannot be resolved
    app = api(world, source)
    # When it asks to create a job
    status, body = call(app, "POST", "/api/jobs", principal=principal, headers=headers, body=ONE_OFF)
    # Then it is a 400 naming the header (or the missing IAM principal), and no job was stored
    assert status == 400 and body["error"]["code"] == "validation_error"
    assert field in body["error"]["message"]
    assert world.jobs.jobs == {}


def test_a_tenant_does_not_outlive_its_request(world: World) -> None:
    # Given a request signed by principal A that succeeded
    app = api(world, "iam")
    assert call(app, "GET", "/api/dead-letter", principal=ROLE_A)[0] == 200
    # When the next request carries no principal, then it is refused: A's tenant did not stay behind
    status, body = call(app, "GET", "/api/dead-letter")
    assert status == 400 and "IAM principal" in body["error"]["message"]


@pytest.mark.parametrize("path", ["/api/health", "/api/openapi.json"])
def test_health_and_the_openapi_document_need_no_tenant(world: World, path: str) -> None:
    # Given the API on AWS, when an unsigned request asks for the health check or the document,
    # then it is answered: neither reads a tenant's data
    assert call(api(world, "iam"), "GET", path)[0] == 200


PRINCIPAL_FORMS = [
    ("arn:aws:sts::111111111111:assumed-role/team-a/session-1", "111111111111:role/team-a"),
    ("arn:aws:iam::111111111111:user/alice", "111111111111:user/alice"),
    ("arn:aws:iam::111111111111:user/division/team/alice", "111111111111:user/alice"),
    ("arn:aws:sts::111111111111:federated-user/bob", "111111111111:federated-user/bob"),
    ("arn:aws:iam::111111111111:root", "111111111111:root"),
    ("arn:aws-cn:sts::222222222222:assumed-role/team-cn/s", "222222222222:role/team-cn"),
    ("arn:aws-us-gov:iam::333333333333:user/ops/carol", "333333333333:user/carol"),
    ("arn:aws-us-gov:iam::333333333333:root", "333333333333:root"),
]


@pytest.mark.parametrize(("principal", "expected"), PRINCIPAL_FORMS, ids=lambda v: v.split(":")[1])
def test_with_iam_every_principal_form_in_every_partition_is_a_tenant(
    world: World, principal: str, expected: str
) -> None:
    # Given the API on AWS and a request signed by an assumed role, a user (with or without a path),
    # a federated user or an account's root, in the aws, aws-cn or aws-us-gov partition
    app = api(world, "iam")
    # When it creates a job
    status, created = call(app, "POST", "/api/jobs", principal=principal, body=ONE_OFF)
    # Then the job belongs to the principal's account and name (a user's path aside: names are
    # unique in an account whatever the path, and a moved user keeps its jobs)
    assert status == 201, created
    stored = world.jobs.get_job(created["job_id"])
    assert stored is not None and stored.tenant == expected


@pytest.mark.parametrize(
    "principal",
    [
        "arn:aws:sts::111111111111:assumed-role/team-a",  # no session
        "arn:aws:iam::111111111111:group/admins",
        "arn:aws:iam::111111111111:role/team-a",  # a role signs nothing: its sessions do
        "arn:aws:iam::1111111111:root",
        "arn:azure:iam::111111111111:root",
    ],
)
def test_with_iam_what_is_no_signing_principal_is_a_400(world: World, principal: str) -> None:
    # Given the API on AWS, when a request carries an ARN that is no principal a SigV4 call has
    status, body = call(api(world, "iam"), "POST", "/api/jobs", principal=principal, body=ONE_OFF)
    # Then it is refused naming the principal, and nothing is written
    assert status == 400 and "IAM principal" in body["error"]["message"]
    assert world.jobs.jobs == {}


@pytest.mark.parametrize(
    "identity",
    [{"userArn": arn} for arn, _ in PRINCIPAL_FORMS] + [{"accessKey": "AKIAIOSFODNN7EXAMPLE"}],
    ids=lambda i: next(iter(i.values())).split(":")[-1][:24],
)
def test_header_mode_refuses_every_request_that_carries_an_iam_principal(
    world: World, identity: dict[str, str]
) -> None:
    # Given an API built to trust X-Tenant (the local stack's mode) and deployed behind IAM auth
    # by mistake, and a signed request naming another tenant in X-Tenant
    app = api(world, "header")
    event = events.api_gateway_event(
        "POST",
        "/api/jobs",
        {"Content-Type": "application/json", c.TENANT_HEADER: "victim"},
        json.dumps(ONE_OFF).encode(),
    )
    event["requestContext"]["identity"].update(identity)
    # When it creates a job
    answer = app.resolve(event, LambdaContext("jobsched-api"))
    # Then it is a 400 naming the principal and the setting, and nothing was stored for anyone
    body = json.loads(answer["body"])
    assert answer["statusCode"] == 400 and "IAM principal" in body["error"]["message"]
    assert c.TENANT_SOURCE_ENV in body["error"]["message"]
    assert world.jobs.jobs == {}
