"""Packed one-offs in the jobs table (jobsched.domain.packs, ports.PackStore).

Two items per pack, under PK "PACK#<pack id>":
- DEFS: the definitions, immutable: a zlib-compressed JSON list (DynamoDB bills a write by the item's
  size, and a batch of reminders compresses several times), with the tenant, creation and the batch's
  digest. Read by the dispatcher once per hand-over window, and by a materialization.
- META: the cursor. `next_run_at` and `due_key` (the due index) while jobs are left to hand over,
  `tenant` and `created_at` (the listing index: it stands for the pack's jobs there), `pack_count`,
  and `status` SCHEDULED until the last job is handed over, then COMPLETED (max_jobs counts a pack's
  jobs as live until then: JobStore.count_jobs).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from jobsched.adapters.aws import Refused, aws_call
from jobsched.adapters.dynamodb.codec import enc, job_items
from jobsched.adapters.dynamodb.conditions import DYNAMODB, conditional
from jobsched.adapters.dynamodb.runs import pending_item
from jobsched.domain import times
from jobsched.domain.keys import due_key_for, job_pk, run_sk
from jobsched.domain.models import Execution, Job
from jobsched.domain.packs import PACK_TYPE, Pack, PackedDefinition, pack_entry_id
from jobsched.domain.status import JobStatus
from jobsched.errors import TransientStoreError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def pack_pk(pack_id: str) -> str:
    return f"PACK#{pack_id}"


def encode_definitions(definitions: tuple[PackedDefinition, ...]) -> bytes:
    """The definitions as stored: compact JSON (defaults left out), zlib-compressed."""
    raw = json.dumps([d.compact() for d in definitions], separators=(",", ":"))
    return zlib.compress(raw.encode(), 6)


def decode_definitions(blob: bytes) -> tuple[PackedDefinition, ...]:
    return tuple(PackedDefinition.model_validate(d) for d in json.loads(zlib.decompress(blob)))


@dataclass
class PackStore:
    """Packs and their cursors in the jobs table; materializations also write the runs table."""

    client: DynamoDBClient
    table: str
    runs_table: str
    shard_count: int

    def put_pack(self, pack: Pack, *, now: datetime) -> Pack | None:
        """The definitions (if absent), then the cursor (if absent): see ports.PackStore."""
        item = {
            "PK": enc(pack_pk(pack.pack_id)),
            "SK": enc("DEFS"),
            # Not `tenant` and `created_at`: those are the listing index's keys, and this item (KBs)
            # must stay out of it; only the small cursor item is listed.
            "pack_tenant": enc(pack.tenant),
            "pack_created_at": enc(times.stored(pack.created_at)),
            "request_hash": enc(pack.request_hash),
            "count": enc(len(pack.definitions)),
            "defs": {"B": encode_definitions(pack.definitions)},
        }
        applied, old = conditional(
            self.client.put_item,
            TableName=self.table,
            Item=item,
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        stored = None if applied else self._pack(old) or self.get_pack(pack.pack_id)
        kept = stored or pack
        first = kept.first_due()
        cursor = {
            "PK": enc(pack_pk(pack.pack_id)),
            "SK": enc("META"),
            "job_id": enc(pack_entry_id(pack.pack_id)),
            "tenant": enc(kept.tenant),
            "type": enc(PACK_TYPE),
            "status": enc(JobStatus.SCHEDULED.value),
            "created_at": enc(times.stored(kept.created_at)),
            "pack_count": enc(len(kept.definitions)),
            "next_run_at": enc(times.stored(first)),
            "due_key": enc(
                due_key_for(pack_entry_id(pack.pack_id), first, written=now, shards=self.shard_count)
            ),
        }
        conditional(
            self.client.put_item,
            TableName=self.table,
            Item=cursor,
            ConditionExpression="attribute_not_exists(PK)",
        )
        return stored

    def get_pack(self, pack_id: str, *, consistent: bool = True) -> Pack | None:
        with aws_call(DYNAMODB):
            out = self.client.get_item(
                TableName=self.table,
                Key={"PK": enc(pack_pk(pack_id)), "SK": enc("DEFS")},
                ConsistentRead=consistent,
            )
        return self._pack(out.get("Item"))

    @staticmethod
    def _pack(raw: dict[str, Any] | None) -> Pack | None:
        if not raw or "defs" not in raw:
            return None
        blob = raw["defs"]["B"]
        return Pack(
            pack_id=raw["PK"]["S"].removeprefix("PACK#"),
            tenant=raw["pack_tenant"]["S"],
            created_at=times.parse_stored(raw["pack_created_at"]["S"]),
            request_hash=raw["request_hash"]["S"],
            definitions=decode_definitions(bytes(blob)),
        )

    def move_cursor(
        self, pack_id: str, *, expected: datetime, next_run_at: datetime | None, now: datetime
    ) -> bool:
        """Compare-and-set the cursor from `expected` to `next_run_at` (None: out of the due index)."""
        values: dict[str, Any] = {":expected": enc(times.stored(expected)), ":now": enc(times.stored(now))}
        if next_run_at is None:
            update = "SET #s = :done, updated_at = :now REMOVE next_run_at, due_key"
            values[":done"] = enc(JobStatus.COMPLETED.value)
        else:
            update = "SET next_run_at = :next, due_key = :due, updated_at = :now"
            values[":next"] = enc(times.stored(next_run_at))
            values[":due"] = enc(
                due_key_for(pack_entry_id(pack_id), next_run_at, written=now, shards=self.shard_count)
            )
        applied, _ = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(pack_pk(pack_id)), "SK": enc("META")},
            UpdateExpression=update,
            ConditionExpression="next_run_at = :expected",
            ExpressionAttributeValues=values,
            **({"ExpressionAttributeNames": {"#s": "status"}} if next_run_at is None else {}),
        )
        return applied

    def materialize(self, job: Job, *, row: Execution | None, scheduled_for: str) -> bool:
        """The job item (with its payload item, if stored apart: put first, alone, as a create does)
        and the run row's flag in one transaction: see ports.PackStore."""
        job_item, stored_apart = job_items(
            job.model_copy(update={"packed": False}), shard_count=self.shard_count
        )
        if stored_apart:
            with aws_call(DYNAMODB):
                self.client.put_item(TableName=self.table, Item=stored_apart)
        put_job: dict[str, Any] = {
            "Put": {
                "TableName": self.table,
                "Item": job_item,
                "ConditionExpression": "attribute_not_exists(PK)",
            }
        }
        if row is None:
            run_item = pending_item(
                job_id=job.job_id,
                tenant=job.tenant,
                scheduled_for=times.parse_stored(scheduled_for),
                now=job.updated_at,
            )
            run_item["materialized"] = enc(1)
            flag: dict[str, Any] = {
                "Put": {
                    "TableName": self.runs_table,
                    "Item": run_item,
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            }
        else:
            names = {"#s": "status", "#mat": "materialized"}  # a reserved word: by its alias
            values: dict[str, Any] = {
                ":one": enc(1),
                ":status": enc(row.status.value),
                ":attempt": enc(row.attempt),
            }
            condition = "#s = :status AND attempt = :attempt"
            if row.lease_owner is None:
                condition += " AND attribute_not_exists(lease_owner)"
            else:
                values[":owner"] = enc(row.lease_owner)
                condition += " AND lease_owner = :owner"
            flag = {
                "Update": {
                    "TableName": self.runs_table,
                    "Key": {"PK": enc(job_pk(job.job_id)), "SK": enc(run_sk(scheduled_for))},
                    "UpdateExpression": "SET #mat = :one",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            }
        try:
            with aws_call(DYNAMODB):
                self.client.transact_write_items(TransactItems=cast(Any, [put_job, flag]))
        except Refused as exc:
            if any(r.get("Code") == "ConditionalCheckFailed" for r in exc.reasons):
                return False
            raise TransientStoreError("a packed job's copy-out was cancelled; retry") from exc
        return True


__all__ = ["PackStore", "decode_definitions", "encode_definitions", "pack_pk"]
