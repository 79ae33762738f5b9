"""Fargate vCPU reservations: the vCPU a run reserves before its Fargate task starts, and against what.

Fargate's On-Demand vCPU quota is per account and Region (Service Quotas "Fargate On-Demand vCPU
resource count", L-3032A538). A RunTask past it fails; two dispatchers or workers racing for the last
vCPU would both try and one would fail after paying for the call. So a run reserves its placed size's
CPU against every scope it counts toward first: the account (settings.fargate_vcpu_quota) and, when
an operator set it, its tenant (Quota.max_fargate_cpu). A run that cannot reserve waits queued.

Counted in ECS CPU units (1024 = 1 vCPU), the unit `resources.cpu` and FARGATE_SIZES use, so a
0.25 vCPU task counts 256 and the counter stays an integer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# AWS's default applied quota for a new account is 6 vCPU (the quota is raised on request, and
# accounts that existed before the vCPU-based quotas of 2022 often have more). 6 is the safe default:
# an operator with a raised quota sets JOBSCHED_FARGATE_VCPU_QUOTA (or `-c fargate_vcpu_quota=N`).
DEFAULT_FARGATE_VCPU_QUOTA = 6
CPU_UNITS_PER_VCPU = 1024
ACCOUNT_SCOPE = "account"
# A reservation outlives its run's timeout by this much (a lease's worth of slack) before it lapses.
LAPSE_SLACK_SECONDS = 60
# A run with no timeout of its own lapses after the longest timeout a job may set (12 h).
MAX_RUN_SECONDS = 43_200


def tenant_scope(tenant: str) -> str:
    """The scope of one tenant's cap ("tenant#" + tenant: no tenant can name the account scope)."""
    return f"tenant#{tenant}"


class Scope(BaseModel):
    """One counter a reservation takes from: its name and its limit, in CPU units."""

    model_config = ConfigDict(frozen=True)

    name: str
    """ACCOUNT_SCOPE or tenant_scope(tenant)."""
    limit: int = Field(ge=0)
    """CPU units the scope may have reserved at once."""


def scopes(account_vcpu: int, tenant: str, tenant_cpu: int | None) -> tuple[Scope, ...]:
    """The scopes a run of `tenant` reserves from: the account's quota, then the tenant's cap if set."""
    out = [Scope(name=ACCOUNT_SCOPE, limit=account_vcpu * CPU_UNITS_PER_VCPU)]
    if tenant_cpu is not None:
        out.append(Scope(name=tenant_scope(tenant), limit=tenant_cpu))
    return tuple(out)


def wait_reason(full: Scope) -> str:
    """What a run's history says while (and after) it waited for Fargate capacity."""
    vcpu = full.limit / CPU_UNITS_PER_VCPU
    if full.name == ACCOUNT_SCOPE:
        return f"waited for Fargate capacity: the account's vCPU quota ({vcpu:g} vCPU) is reserved"
    return (
        "waited for Fargate capacity: the tenant's quota max_fargate_cpu "
        f"({full.limit} CPU units) is reserved"
    )
