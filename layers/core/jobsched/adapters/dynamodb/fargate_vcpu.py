"""Fargate vCPU reservations in DynamoDB (the Fargate vCPU table): a counter per scope, a record per run.

    counter:  PK "SCOPE#<scope>", SK "USED",  `used` (CPU units reserved now)
    record:   PK "RESERVATIONS", SK "RUN#<run>",  `cpu`, `scopes` (names), `until` (stored time)

One counter item per scope, because the limit is on the scope's sum: its condition is the rule
itself (used + need <= limit), checked by DynamoDB in the write. The records share one partition so
that the lapsed ones can be found with one Query; it holds at most one item per running Fargate run
(the account quota over the smallest size: 24 at 6 vCPU, 16,000 at 4,000 vCPU), far below what one
partition serves, and it is read only when a scope is full.

A reservation is one transaction, all scopes or none:

    reserve r, 512 units, scopes (account 6144, tenant#t 1024):
        Update SCOPE#account  ADD used 512  if used <= 6144 - 512 (or absent)
        Update SCOPE#tenant#t ADD used 512  if used <= 1024 - 512 (or absent)
        Put    RUN#r          {cpu, scopes, until}  if absent
    refused on a counter      -> that scope is full: nothing was written
    refused on the record     -> r holds one already (a redelivery): renew its until, reserved

A release reads the record, then one transaction: Delete RUN#r if it is still there (a second
release, or a sweep racing it, loses here, so no counter is decremented twice), and ADD used -cpu on
each of its scopes, if used >= cpu (never below zero).

    worker A: release r ─> tx(delete RUN#r if exists, used -= 512) ─> applied
    sweeper:  release r ─> tx(delete RUN#r if exists, used -= 512) ─> refused: nothing changes

A reservation whose run died unreleased lapses at `until` (its run's timeout plus slack: its task
has been stopped by then): the next reserver that finds a scope full releases the lapsed records
(the same idempotent release) and tries once more. No TTL: a TTL deletion would drop the record
without giving its units back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import Refused, aws_call
from jobsched.adapters.dynamodb.codec import dec, enc
from jobsched.adapters.dynamodb.conditions import DYNAMODB, any_of, conditional
from jobsched.domain import times
from jobsched.domain.fargate_vcpu import Scope

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

RECORDS_PK = "RESERVATIONS"


@dataclass
class DynamoDBFargateVcpuStore:
    """FargateVcpuStore on the Fargate vCPU table (see the module docstring for its items)."""

    client: DynamoDBClient
    table: str

    @staticmethod
    def _counter(scope: str) -> dict[str, Any]:
        return {"PK": enc(f"SCOPE#{scope}"), "SK": enc("USED")}

    @staticmethod
    def _record(run: str) -> dict[str, Any]:
        return {"PK": enc(RECORDS_PK), "SK": enc(f"RUN#{run}")}

    def reserve(
        self, run: str, *, cpu: int, scopes: Sequence[Scope], until: datetime, now: datetime
    ) -> Scope | None:
        full = self._try(run, cpu, scopes, until)
        if full is None:
            return None
        lapsed = [r for r, u in self.reservations().items() if u < now]
        for other in lapsed:
            self.release(other)
        return self._try(run, cpu, scopes, until) if lapsed else full

    def _try(self, run: str, cpu: int, scopes: Sequence[Scope], until: datetime) -> Scope | None:
        for scope in scopes:
            if cpu > scope.limit:
                return scope
        items: list[Any] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": self._counter(scope.name),
                    "UpdateExpression": "ADD used :need",
                    # used + need <= limit, written as used <= limit - need (no arithmetic in conditions)
                    "ConditionExpression": any_of("attribute_not_exists(used)", "used <= :room"),
                    "ExpressionAttributeValues": {":need": enc(cpu), ":room": enc(scope.limit - cpu)},
                }
            }
            for scope in scopes
        ]
        items.append(
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        **self._record(run),
                        "cpu": enc(cpu),
                        "scopes": {"L": [enc(s.name) for s in scopes]},
                        "until": enc(times.stored(until)),
                    },
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            }
        )
        try:
            with aws_call(DYNAMODB):
                self.client.transact_write_items(TransactItems=items)
            return None
        except Refused as exc:
            reasons = exc.reasons
            refused = [i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
            if refused and refused[0] < len(scopes):
                return scopes[refused[0]]
            if not reasons or refused == [len(scopes)]:
                # Only the record refused: this run holds a reservation already (a redelivery).
                renewed, _ = conditional(
                    self.client.update_item,
                    TableName=self.table,
                    Key=self._record(run),
                    UpdateExpression="SET #u = :u",
                    ConditionExpression="attribute_exists(PK)",
                    ExpressionAttributeNames={"#u": "until"},
                    ExpressionAttributeValues={":u": enc(times.stored(until))},
                )
                if renewed:
                    return None
            raise

    def release(self, run: str) -> bool:
        with aws_call(DYNAMODB):
            out = self.client.get_item(TableName=self.table, Key=self._record(run), ConsistentRead=True)
        if "Item" not in out:
            return False
        record = dec(out["Item"])
        cpu = int(record["cpu"])
        items: list[Any] = [
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": self._record(run),
                    # Still there: the first release of it wins, every later one changes nothing.
                    "ConditionExpression": "attribute_exists(PK)",
                }
            },
            *(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": self._counter(str(name)),
                        "UpdateExpression": "ADD used :minus",
                        # Never below zero: used - cpu >= 0.
                        "ConditionExpression": "used >= :cpu",
                        "ExpressionAttributeValues": {":minus": enc(-cpu), ":cpu": enc(cpu)},
                    }
                }
                for name in record["scopes"]
            ),
        ]
        try:
            with aws_call(DYNAMODB):
                self.client.transact_write_items(TransactItems=items)
        except Refused:
            return False
        return True

    def used(self, scope: str) -> int:
        with aws_call(DYNAMODB):
            out = self.client.get_item(TableName=self.table, Key=self._counter(scope), ConsistentRead=True)
        return int(dec(out.get("Item") or {}).get("used", 0))

    def reservations(self) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": {":pk": enc(RECORDS_PK)},
            "ConsistentRead": True,
        }
        while True:
            with aws_call(DYNAMODB):
                page = self.client.query(**kwargs)
            for raw in page.get("Items", []):
                item = dec(raw)
                out[str(item["SK"]).removeprefix("RUN#")] = times.parse_stored(item["until"])
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
