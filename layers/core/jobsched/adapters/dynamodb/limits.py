"""Tenant limits in DynamoDB: concurrency-key holder sets and daily budgets (the limits table), and
operator-set quotas (the quotas table).

A key's item: PK "TENANT#<tenant>", SK "KEY#<key>", `holders` a map holder -> expiry (stored time),
and `version`. The item is per (tenant, key), never per job, because the limit is across every job
that shares the key; the tenant leads the key so no tenant can name another's. A holder set with
expiries, not a counter: a counter cannot tell a dead holder's slot from a live one's.

Acquiring is read, then a put conditional on the version read (optimistic concurrency): DynamoDB
cannot count a map's live entries in a condition, so the count is made on the read copy and the
version makes the write lose if anyone changed the set in between:

    worker A: read v7 {x, y}, limit 3 ─> put {x, y, A} if version = 7 ─> applied (v8)
    worker B: read v7 {x, y}, limit 3 ─> put {x, y, B} if version = 7 ─> refused: read v8 {x, y, A}
                                                                          ─> full: False
    a dead holder's expiry passed ─> the next acquirer's put leaves it out: its slot is free again

Every write (renewal, release) bumps the version too, so a stale acquirer can never write back an
expiry or a holder that changed after its read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import aws_call
from jobsched.adapters.dynamodb.codec import dec, enc
from jobsched.adapters.dynamodb.conditions import DYNAMODB, any_of, conditional
from jobsched.domain import times
from jobsched.domain.limits import Quota

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Optimistic tries per acquire: each lost try means another holder changed the set; past these the
# key is contended beyond use and the caller waits as for a full key (the run is delayed, not lost).
ACQUIRE_TRIES = 8
BUDGET_DAYS = 2  # a day's budget item expires after this (TTL)


def tenant_pk(tenant: str) -> str:
    return f"TENANT#{tenant}"


@dataclass
class DynamoDBLimitStore:
    """LimitStore on the limits table."""

    client: DynamoDBClient
    table: str

    def _key(self, tenant: str, sk: str) -> dict[str, Any]:
        return {"PK": enc(tenant_pk(tenant)), "SK": enc(sk)}

    def _read(self, tenant: str, key: str) -> tuple[int, dict[str, datetime]]:
        with aws_call(DYNAMODB):
            out = self.client.get_item(
                TableName=self.table, Key=self._key(tenant, f"KEY#{key}"), ConsistentRead=True
            )
        item = dec(out.get("Item") or {})
        holders = {h: times.parse_stored(u) for h, u in item.get("holders", {}).items()}
        return int(item.get("version", 0)), holders

    def acquire(
        self, tenant: str, key: str, *, holder: str, limit: int, until: datetime, now: datetime
    ) -> bool:
        for _ in range(ACQUIRE_TRIES):
            version, holders = self._read(tenant, key)
            live = {h: u for h, u in holders.items() if u >= now}
            if holder not in live and len(live) >= limit:
                return False
            live[holder] = until
            values: dict[str, Any] = {":v": enc(version)}
            applied, _ = conditional(
                self.client.put_item,
                TableName=self.table,
                Item={
                    **self._key(tenant, f"KEY#{key}"),
                    "holders": {"M": {h: enc(times.stored(u)) for h, u in live.items()}},
                    "version": enc(version + 1),
                },
                # Nobody changed the set since the read: absent (version 0), or still at version v.
                ConditionExpression=any_of("attribute_not_exists(PK)", "version = :v"),
                ExpressionAttributeValues=values,
            )
            if applied:
                return True
        return False

    def extend(self, tenant: str, key: str, *, holder: str, until: datetime) -> bool:
        applied, _ = conditional(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(tenant, f"KEY#{key}"),
            UpdateExpression="SET holders.#h = :u ADD version :one",
            ConditionExpression="attribute_exists(holders.#h)",
            ExpressionAttributeNames={"#h": holder},
            ExpressionAttributeValues={":u": enc(times.stored(until)), ":one": enc(1)},
        )
        return applied

    def release(self, tenant: str, key: str, *, holder: str) -> None:
        conditional(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(tenant, f"KEY#{key}"),
            UpdateExpression="REMOVE holders.#h ADD version :one",
            ConditionExpression="attribute_exists(holders.#h)",
            ExpressionAttributeNames={"#h": holder},
            ExpressionAttributeValues={":one": enc(1)},
        )

    def holders(self, tenant: str, key: str, *, now: datetime) -> dict[str, datetime]:
        return {h: u for h, u in self._read(tenant, key)[1].items() if u >= now}

    def take_budget(self, tenant: str, name: str, *, day: str, amount: int, limit: int) -> bool:
        if amount > limit:
            return False
        start = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
        expires = int(start.timestamp()) + BUDGET_DAYS * 86_400
        applied, _ = conditional(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(tenant, f"BUDGET#{name}#{day}"),
            UpdateExpression="ADD used :n SET expires_at = :exp",
            # The total after this request stays within the limit: used + n <= limit.
            ConditionExpression=any_of("attribute_not_exists(used)", "used <= :room"),
            ExpressionAttributeValues={":n": enc(amount), ":room": enc(limit - amount), ":exp": enc(expires)},
        )
        return applied


@dataclass
class DynamoDBQuotaStore:
    """QuotaStore on the quotas table: PK "TENANT#<tenant>", SK "QUOTA", the overrides as JSON."""

    client: DynamoDBClient
    table: str

    def get_quota(self, tenant: str) -> Quota | None:
        with aws_call(DYNAMODB):
            out = self.client.get_item(
                TableName=self.table, Key={"PK": enc(tenant_pk(tenant)), "SK": enc("QUOTA")}
            )
        item = out.get("Item")
        return Quota.model_validate_json(dec(item)["quota"]) if item else None

    def put_quota(self, tenant: str, quota: Quota) -> None:
        with aws_call(DYNAMODB):
            self.client.put_item(
                TableName=self.table,
                Item={
                    "PK": enc(tenant_pk(tenant)),
                    "SK": enc("QUOTA"),
                    "tenant": enc(tenant),
                    # Only the overrides: a field left at its default follows the defaults of the
                    # release that reads it.
                    "quota": enc(quota.model_dump_json(exclude_defaults=True)),
                },
            )

    def list_quotas(self) -> dict[str, Quota]:
        # An operator's listing over a table of one small item per tenant with a quota: a Scan.
        out: dict[str, Quota] = {}
        kwargs: dict[str, Any] = {"TableName": self.table}
        while True:
            with aws_call(DYNAMODB):
                page = self.client.scan(**kwargs)
            for raw in page.get("Items", []):
                item = dec(raw)
                out[item["tenant"]] = Quota.model_validate_json(item["quota"])
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
