"""`jobsched admin quota set|get|list`: an operator's tenant quotas, written straight to the quotas table.

With the operator's own AWS credentials (the environment's, as boto3 finds them; AWS_ENDPOINT_URL or
--endpoint-url for the local stack's embedded AWS), never through the API: no tenant request can set
a quota, and no function of the stack may write the table (jobsched.resources.QUOTAS_TABLE).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from jobsched import constants as c
from jobsched import resources
from jobsched.domain.limits import DEFAULT_QUOTA, Quota

# (flag, Quota field) of `admin quota set`.
QUOTA_FLAGS = (
    ("--max-jobs", "max_jobs"),
    ("--max-concurrent-runs", "max_concurrent_runs"),
    ("--max-runs-per-second", "max_runs_per_second"),
    ("--min-cron-interval", "min_cron_interval_seconds"),
    ("--backfill-ticks-per-day", "backfill_ticks_per_day"),
    ("--max-fargate-cpu", "max_fargate_cpu"),
)


def add_admin(sub: Any) -> None:
    """The `admin` command group."""
    admin = sub.add_parser("admin", help="operator commands, with AWS credentials (not the API)")
    groups = admin.add_subparsers(dest="admin_command", required=True)
    quota = groups.add_parser("quota", help="tenant quotas (docs/quotas.md)")
    actions = quota.add_subparsers(dest="quota_action", required=True)
    for name, help_ in (
        ("set", "set a tenant's quota (the fields not given keep their value)"),
        ("get", "a tenant's quota in effect"),
        ("list", "every tenant with a quota set"),
    ):
        p = actions.add_parser(name, help=help_)
        p.add_argument("--table", help=f"the quotas table (${c.QUOTAS_TABLE_ENV}, or <prefix>-quotas)")
        p.add_argument("--prefix", help=f"the local stack's resource prefix (${c.RESOURCE_PREFIX_ENV})")
        p.add_argument("--endpoint-url", help="an AWS endpoint (the local stack's embedded AWS)")
        if name != "list":
            p.add_argument("--tenant", required=True, help="the tenant")
        if name == "set":
            for flag, field in QUOTA_FLAGS:
                default = getattr(DEFAULT_QUOTA, field)
                p.add_argument(flag, dest=field, type=int, help=f"{field} (default {default})")
        p.set_defaults(func=cmd_quota)


def _store(args: argparse.Namespace) -> Any:
    import boto3

    from jobsched.adapters.dynamodb.limits import DynamoDBQuotaStore

    table = args.table or os.environ.get(c.QUOTAS_TABLE_ENV)
    if not table:
        from jobsched.local.stack import DEFAULT_PREFIX

        prefix = args.prefix or os.environ.get(c.RESOURCE_PREFIX_ENV) or DEFAULT_PREFIX
        table = resources.physical_name(prefix, resources.QUOTAS_TABLE)
    kwargs = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    return DynamoDBQuotaStore(client=boto3.client("dynamodb", **kwargs), table=table)


def _shown(tenant: str, quota: Quota, *, set_: bool) -> dict[str, Any]:
    return {"tenant": tenant, "source": "set" if set_ else "default", **quota.model_dump()}


def cmd_quota(args: argparse.Namespace) -> int:
    """set, get or list quotas; prints JSON."""
    store = _store(args)
    if args.quota_action == "list":
        listed = [_shown(t, q, set_=True) for t, q in sorted(store.list_quotas().items())]
        print(json.dumps({"items": listed}, indent=2))
        return 0
    current = store.get_quota(args.tenant)
    if args.quota_action == "get":
        print(json.dumps(_shown(args.tenant, current or DEFAULT_QUOTA, set_=current is not None), indent=2))
        return 0
    changes = {field: getattr(args, field) for _, field in QUOTA_FLAGS if getattr(args, field) is not None}
    try:
        quota = Quota.model_validate({**(current or DEFAULT_QUOTA).model_dump(), **changes})
    except ValueError as exc:
        print(f"jobsched: {exc}")
        return 2
    store.put_quota(args.tenant, quota)
    print(json.dumps(_shown(args.tenant, quota, set_=True), indent=2))
    return 0
