"""ports.WorkerStore on DynamoDB: the workers table, one item per worker and per waiting run.

Keys, and why:
- a worker: ("TENANT#<tenant>", "WORKER#<worker_id>"). Every worker API call names its tenant
  (the caller's identity) and the worker id, so one GetItem finds it, and another tenant's worker
  is simply not there (404). GET /api/workers?pool= is one Query of the tenant's partition (a
  tenant has tens of workers, not millions), filtered by pool: no index to pay for.
- a waiting run: ("POOL#<tenant>#<pool>", "<enqueued_at>#<run_id>"): the pool's queue is one
  partition, range-read oldest first; enqueued_at is fixed-width UTC text, so string order is time
  order, and the run id breaks ties.

A worker item holds its capacity and labels as JSON (`body`, written once), its status, its
`version`, its last heartbeat and what that heartbeat reported, and `holds`: a map run_id ->
{"body": the hold as JSON, "state": "reserved"|"confirmed"}. Each change of holds is one
UpdateItem on a map path and bumps the version. Two placers racing on worker W:

    P1: GetItem W -> version 7, free 4 vCPU       P2: GetItem W -> version 7, free 4 vCPU
    P1: SET holds.r1, version = 8  IF version = 7 AND status = ALIVE        -> applied
                                                  P2: SET holds.r2 ... IF version = 7 -> refused
                                                  P2: GetItem W -> version 8, free 1 vCPU: r2
                                                      goes elsewhere or waits

so the sum of W's holds never exceeds the capacity any placer saw free. A heartbeat does not bump
the version (it changes no hold), so a busy worker's heartbeats never make placers retry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import Refused, aws_call
from jobsched.adapters.dynamodb.codec import dec, enc
from jobsched.adapters.dynamodb.conditions import DYNAMODB, all_of, conditional
from jobsched.domain import times
from jobsched.domain.keys import pool_queue_pk, pool_queue_sk
from jobsched.domain.placement import Resources
from jobsched.domain.records import Cursor
from jobsched.domain.workers import Hold, QueuedRun, Worker

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Named sub-conditions.
IS_ALIVE = "#status = :alive"
AT_VERSION = "version = :v"
HOLDS_RUN = "attribute_exists(holds.#run)"
HOLDS_NO_RUN = "attribute_not_exists(holds.#run)"
IS_RESERVED = "holds.#run.#state = :reserved"
_STATIC = ("worker_id", "tenant", "pool", "capacity", "labels", "registered_at")


def worker_key(tenant: str, worker_id: str) -> dict[str, dict[str, str]]:
    """The key of a worker's item."""
    return {"PK": enc(f"TENANT#{tenant}"), "SK": enc(f"WORKER#{worker_id}")}


def _queue_key(run: QueuedRun) -> dict[str, dict[str, str]]:
    return {
        "PK": enc(pool_queue_pk(run.tenant, run.pool)),
        "SK": enc(pool_queue_sk(run.enqueued_at, run.run_id)),
    }


def _hold_value(hold: Hold) -> dict[str, Any]:
    return {"M": {"body": enc(hold.model_dump_json()), "state": enc(hold.state)}}


def _worker_from(raw: Mapping[str, Any]) -> Worker:
    item = dec(raw)
    static = json.loads(item["body"])
    reported = json.loads(item.get("reported") or "{}")
    holds = {
        run_id: Hold.model_validate_json(value["body"]).model_copy(update={"state": value["state"]})
        for run_id, value in (item.get("holds") or {}).items()
    }
    return Worker.model_validate(
        {
            **static,
            "status": item["status"],
            "version": item["version"],
            "last_heartbeat": times.parse_stored(item["last_heartbeat"]),
            "reported_free": reported.get("free"),
            "reported_runs": reported.get("runs", {}),
            "holds": holds,
        }
    )


@dataclass
class WorkerStore:
    """jobsched.ports.WorkerStore on the workers table `table`, through `client`."""

    client: DynamoDBClient
    table: str

    def register(self, worker: Worker) -> bool:
        item = {
            **worker_key(worker.tenant, worker.worker_id),
            "pool": enc(worker.pool),
            "status": enc(worker.status),
            "version": enc(worker.version),
            "last_heartbeat": enc(times.stored(worker.last_heartbeat)),
            "body": enc(worker.model_dump_json(include=set(_STATIC))),
            "holds": {"M": {run_id: _hold_value(hold) for run_id, hold in worker.holds.items()}},
        }
        return conditional(
            self.client.put_item,
            TableName=self.table,
            Item=item,
            ConditionExpression="attribute_not_exists(PK)",
        )[0]

    def get_worker(self, tenant: str, worker_id: str) -> Worker | None:
        with aws_call(DYNAMODB):
            out = self.client.get_item(
                TableName=self.table, Key=worker_key(tenant, worker_id), ConsistentRead=True
            )
        item = out.get("Item")
        return _worker_from(item) if item else None

    def list_workers(self, tenant: str, *, pool: str | None = None) -> list[Worker]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :worker)",
            "ExpressionAttributeValues": {":pk": enc(f"TENANT#{tenant}"), ":worker": enc("WORKER#")},
            "ConsistentRead": True,
        }
        if pool is not None:
            kwargs["FilterExpression"] = "#pool = :pool"
            kwargs["ExpressionAttributeNames"] = {"#pool": "pool"}
            kwargs["ExpressionAttributeValues"][":pool"] = enc(pool)
        found: list[Worker] = []
        while True:
            with aws_call(DYNAMODB):
                out = self.client.query(**kwargs)
            found.extend(_worker_from(item) for item in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return found
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def heartbeat(
        self, tenant: str, worker_id: str, *, now: datetime, free: Resources | None, runs: Mapping[str, str]
    ) -> Worker | None:
        reported = json.dumps({"free": free.model_dump() if free else None, "runs": dict(runs)})
        _, after = conditional(
            self.client.update_item,
            TableName=self.table,
            Key=worker_key(tenant, worker_id),
            UpdateExpression="SET last_heartbeat = :now, reported = :reported",
            ConditionExpression=all_of("attribute_exists(PK)", IS_ALIVE),
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":now": enc(times.stored(now)),
                ":reported": enc(reported),
                ":alive": enc("ALIVE"),
            },
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return _worker_from(after) if after else None

    def reserve(self, tenant: str, worker_id: str, *, hold: Hold, expected_version: int) -> bool:
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key=worker_key(tenant, worker_id),
            UpdateExpression="SET holds.#run = :hold, version = version + :one",
            ConditionExpression=all_of(IS_ALIVE, AT_VERSION, HOLDS_NO_RUN),
            ExpressionAttributeNames={"#status": "status", "#run": hold.run_id},
            ExpressionAttributeValues={
                ":hold": _hold_value(hold),
                ":one": enc(1),
                ":v": enc(expected_version),
                ":alive": enc("ALIVE"),
            },
        )[0]

    def confirm(self, tenant: str, worker_id: str, *, run_id: str, now: datetime) -> bool:
        applied, _ = conditional(
            self.client.update_item,
            TableName=self.table,
            Key=worker_key(tenant, worker_id),
            UpdateExpression="SET holds.#run.#state = :confirmed, version = version + :one",
            ConditionExpression=all_of(IS_ALIVE, HOLDS_RUN, IS_RESERVED),
            ExpressionAttributeNames={"#status": "status", "#run": run_id, "#state": "state"},
            ExpressionAttributeValues={
                ":confirmed": enc("confirmed"),
                ":reserved": enc("reserved"),
                ":one": enc(1),
                ":alive": enc("ALIVE"),
            },
        )
        if applied:
            return True
        # Refused: a repeated ack of a hold already confirmed is still a yes.
        worker = self.get_worker(tenant, worker_id)
        held = worker.holds.get(run_id) if worker and worker.status == "ALIVE" else None
        return held is not None and held.state == "confirmed"

    def release(self, tenant: str, worker_id: str, *, run_id: str, only: Hold | None = None) -> bool:
        return conditional(self.client.update_item, **self._release(tenant, worker_id, run_id, only))[0]

    def requeue_lapsed(self, tenant: str, worker_id: str, *, hold: Hold, run: QueuedRun) -> bool:
        # A transaction: a sweep that read the worker before another sweep requeued this hold, and
        # placed it again, must not release the new reservation, nor queue the run a second time.
        items: list[Any] = [
            {"Update": self._release(tenant, worker_id, hold.run_id, hold)},
            {"Put": {"TableName": self.table, "Item": self._queue_item(run)}},
        ]
        try:
            with aws_call(DYNAMODB):
                self.client.transact_write_items(TransactItems=items)
        except Refused:
            return False
        return True

    def _release(self, tenant: str, worker_id: str, run_id: str, only: Hold | None) -> dict[str, Any]:
        """The UpdateItem that drops the hold on `run_id` (with `only`: if it is that reservation)."""
        names = {"#run": run_id}
        values: dict[str, Any] = {":one": enc(1)}
        condition = HOLDS_RUN
        if only is not None:
            condition = all_of(HOLDS_RUN, IS_RESERVED, "holds.#run.body = :body")
            names["#state"] = "state"
            values[":reserved"] = enc("reserved")
            values[":body"] = _hold_value(only.model_copy(update={"state": "reserved"}))["M"]["body"]
        return {
            "TableName": self.table,
            "Key": worker_key(tenant, worker_id),
            "UpdateExpression": "REMOVE holds.#run SET version = version + :one",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def mark_dead(self, tenant: str, worker_id: str, *, expected_version: int) -> Worker | None:
        applied, before = conditional(
            self.client.update_item,
            TableName=self.table,
            Key=worker_key(tenant, worker_id),
            UpdateExpression="SET #status = :dead, holds = :none, version = version + :one",
            ConditionExpression=all_of(IS_ALIVE, AT_VERSION),
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":dead": enc("DEAD"),
                ":alive": enc("ALIVE"),
                ":none": {"M": {}},
                ":one": enc(1),
                ":v": enc(expected_version),
            },
            ReturnValues="ALL_OLD",
        )
        return _worker_from(before) if applied and before else None

    def enqueue(self, run: QueuedRun) -> bool:
        return conditional(
            self.client.put_item,
            TableName=self.table,
            Item=self._queue_item(run),
            ConditionExpression="attribute_not_exists(PK)",
        )[0]

    @staticmethod
    def _queue_item(run: QueuedRun) -> dict[str, Any]:
        return {**_queue_key(run), "body": enc(run.model_dump_json())}

    def waiting(self, tenant: str, pool: str, *, limit: int) -> list[QueuedRun]:
        with aws_call(DYNAMODB):
            out = self.client.query(
                TableName=self.table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues={":pk": enc(pool_queue_pk(tenant, pool))},
                ConsistentRead=True,
                Limit=limit,
            )
        return [QueuedRun.model_validate_json(dec(item)["body"]) for item in out.get("Items", [])]

    def waiting_page(
        self, tenant: str, pool: str, *, start: Cursor | None, limit: int
    ) -> tuple[list[QueuedRun], Cursor | None]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": {":pk": enc(pool_queue_pk(tenant, pool))},
            "ConsistentRead": True,
            "Limit": limit,
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        with aws_call(DYNAMODB):
            out = self.client.query(**kwargs)
        last = out.get("LastEvaluatedKey")
        runs = [QueuedRun.model_validate_json(dec(item)["body"]) for item in out.get("Items", [])]
        return runs, dict(last) if last else None

    def is_queued(self, run: QueuedRun) -> bool:
        with aws_call(DYNAMODB):
            out = self.client.get_item(
                TableName=self.table, Key=_queue_key(run), ConsistentRead=True, ProjectionExpression="PK"
            )
        return "Item" in out

    def dequeue(self, run: QueuedRun) -> bool:
        return conditional(
            self.client.delete_item,
            TableName=self.table,
            Key=_queue_key(run),
            ConditionExpression="attribute_exists(PK)",
        )[0]
