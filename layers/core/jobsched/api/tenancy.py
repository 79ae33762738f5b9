"""Who is calling: one middleware resolves the caller's tenant once per request, and fails closed.

    request ──> powertools' request validation (a bad body is a 400 before anyone asks who calls)
            ──> tenancy: "iam"    -> the SigV4-signed IAM principal (X-Tenant is ignored)
                         "header" -> X-Tenant (the local stack), DEFAULT_TENANT when absent;
                                     refused (400) when the request carries an IAM principal
                         invalid  -> 400 naming the header or Authorization; the route never runs
            ──> route: reads tenant(app), i.e. app.context["tenant"]

The source is checked when the resolver is built: any value but "iam" or "header" (a typo such as
"IAM " or "bogus" included) raises there, so a misconfigured API never starts instead of trusting a
header a caller can set (issue 17). And header mode refuses any request that carries an IAM
principal: only API Gateway's IAM authorizer puts one there, so such a request reached a deployed
API that was misconfigured to trust X-Tenant, and answering it would let a signed caller name any
tenant. powertools clears app.context after every request, so a tenant
never leaks into the next one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal, get_args

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

from jobsched import constants as c
from jobsched.errors import ValidationFailed

TenantSource = Literal["iam", "header"]
TENANT_SOURCES: tuple[str, ...] = get_args(TenantSource)
UNTENANTED_ROUTES = frozenset({"/api/health", "/api/openapi.json"})
"""Routes that read no tenant's data, so they answer without one (a health check needs no principal)."""

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=,-]{0,127}$")
# Every principal a SigV4 call can be signed by, in any partition (aws, aws-cn, aws-us-gov, ...):
#   arn:<p>:sts::<account>:assumed-role/<role>/<session>  -> <account>:role/<role> (all its sessions)
#   arn:<p>:iam::<account>:user[/<path>]/<name>           -> <account>:user/<name> (names are unique
#                                                            in an account whatever the path)
#   arn:<p>:sts::<account>:federated-user/<name>          -> <account>:federated-user/<name>
#   arn:<p>:iam::<account>:root                           -> <account>:root
_PRINCIPAL = re.compile(
    r"^arn:aws(?:-[a-z]+)*:(?:sts::(?P<sts>\d{12}):(?:assumed-role/(?P<role>[\w+=,.@-]{1,64})/[\w+=,.@-]+"
    r"|federated-user/(?P<federated>[\w+=,.@-]{2,32}))"
    r"|iam::(?P<iam>\d{12}):(?:user/(?:[\x21-\x7e]*/)?(?P<user>[\w+=,.@-]{1,64})|(?P<root>root)))$"
)

Middleware = Callable[[APIGatewayRestResolver, NextMiddleware], Response[Any]]


def checked_source(source: str) -> TenantSource:
    """`source` if it names a tenant source; else ValueError naming the setting."""
    if source not in TENANT_SOURCES:
        raise ValueError(
            f"{c.TENANT_SOURCE_ENV} (tenant_source) must be one of {', '.join(TENANT_SOURCES)}; "
            f"got {source!r}"
        )
    return source  # type: ignore[return-value]  # checked against the Literal's values just above


def from_principal(app: APIGatewayRestResolver) -> str:
    """The tenant of the IAM principal that signed the request: "<account>:<kind>[/<name>]"."""
    arn = (app.current_event.request_context.identity.user_arn or "").strip()
    match = _PRINCIPAL.match(arn)
    if not match:
        raise ValidationFailed("the request carries no IAM principal", field="Authorization")
    found = match.groupdict()
    account = found["sts"] or found["iam"]
    if found["role"]:
        return f"{account}:role/{found['role']}"
    if found["federated"]:
        return f"{account}:federated-user/{found['federated']}"
    return f"{account}:user/{found['user']}" if found["user"] else f"{account}:root"


def carries_principal(app: APIGatewayRestResolver) -> bool:
    """Whether API Gateway's IAM authorizer put a caller on the request (any of its identity fields)."""
    identity = app.current_event.request_context.identity
    return any(
        (value or "").strip()
        for value in (identity.user_arn, identity.access_key, identity.caller, identity.user)
    )


def from_header(app: APIGatewayRestResolver) -> str:
    """The tenant the X-Tenant header names (any case), DEFAULT_TENANT without one.

    Refused on a request that carries an IAM principal: header mode is for the local stack only.
    """
    if carries_principal(app):
        raise ValidationFailed(
            f"the request carries an IAM principal, which {c.TENANT_SOURCE_ENV}=header never trusts: "
            f"an API behind IAM auth takes its tenant from the principal ({c.TENANT_SOURCE_ENV}=iam)",
            field="Authorization",
        )
    headers = app.current_event.headers or {}
    named = headers.get(c.TENANT_HEADER) or next(
        (v for k, v in headers.items() if k.lower() == c.TENANT_HEADER.lower()), None
    )
    tenant = (named or c.DEFAULT_TENANT).strip()
    if not _TENANT.match(tenant):
        raise ValidationFailed(
            f"{c.TENANT_HEADER}: must be 1..128 of [A-Za-z0-9._:/@+=,-]", field=c.TENANT_HEADER
        )
    return tenant


def tenancy(source: str) -> Middleware:
    """The middleware that puts the caller's tenant on app.context["tenant"]; raises on a bad source."""
    resolve = from_principal if checked_source(source) == "iam" else from_header

    def resolve_tenant(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response[Any]:
        if app.request.route not in UNTENANTED_ROUTES:
            app.context["tenant"] = resolve(app)
        return next_middleware(app)

    return resolve_tenant


def tenant(app: APIGatewayRestResolver) -> str:
    """The current request's tenant, as the tenancy middleware resolved it."""
    resolved = app.context.get("tenant")
    if not isinstance(resolved, str):
        # A route outside UNTENANTED_ROUTES always has one: this is a wiring bug, not bad input.
        raise RuntimeError("no tenant on this request: is the tenancy middleware installed?")
    return resolved
