"""Shard leases (jobs table): one dispatcher pass per shard at a time, and where it stopped."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobsched.adapters.dynamodb.codec import dec, enc
from jobsched.adapters.dynamodb.conditions import conditional
from jobsched.domain import times
from jobsched.domain.records import ShardLease

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class ShardLeases:
    """The shard-lease items of the jobs table (a base of JobStore: the same table and client)."""

    client: DynamoDBClient
    table: str

    def acquire_shard(
        self, shard: int, *, owner: str, now: datetime, lease_seconds: int
    ) -> ShardLease | None:
        """Lease a shard if it is unclaimed, expired, or already ours; None if another holds it."""
        applied, result = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(f"SHARD#{shard}"), "SK": enc("LEASE")},
            UpdateExpression="SET lease_owner = :me, lease_until = :until",
            # Unclaimed, expired, or ours (a pass that re-enters after a crash of its own).
            ConditionExpression=(
                "attribute_not_exists(lease_owner) OR lease_until < :now OR lease_owner = :me"
            ),
            ExpressionAttributeValues={
                ":me": enc(owner),
                ":now": enc(times.stored(now)),
                ":until": enc(times.stored(now + timedelta(seconds=lease_seconds))),
            },
            ReturnValues="ALL_NEW",
        )
        if not applied:
            return None
        item = dec(result)
        return ShardLease(shard=shard, owner=owner, watermark=item.get("watermark"))

    def release_shard(self, lease: ShardLease, *, watermark: str) -> bool:
        """Record the drained watermark and give the lease up; False if the lease was lost meanwhile."""
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(f"SHARD#{lease.shard}"), "SK": enc("LEASE")},
            UpdateExpression="SET watermark = :wm REMOVE lease_owner, lease_until",
            ConditionExpression="lease_owner = :me",
            ExpressionAttributeValues={":wm": enc(watermark), ":me": enc(lease.owner)},
        )[0]
