"""DynamoDB adapter: jobs, idempotency records, shard leases (jobs table) and runs (runs table).

Every run-status change goes through `RunStore.transition`, one conditional UpdateItem whose
condition is "the stored status is a legal source of the target" (jobsched.domain.status), plus
the lease owner where a lease is held: a stale or racing process loses the compare-and-set and
is told what the row holds now (ReturnValuesOnConditionCheckFailure), never overwrites it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from jobsched.domain import times
from jobsched.domain.models import AttemptRecord, Execution, Job, RetryPolicy, RunError, SchedulePolicy
from jobsched.domain.status import HELD, JobStatus, RunStatus, check_path, sources_of
from jobsched.errors import Conflict, TransientStoreError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Throttles and server faults: retryable, and never a caller's fault.
_TRANSIENT = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
    }
)
RUN_HISTORY_DAYS = 90
IDEMPOTENCY_HOURS = 24


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _raise_transient(exc: ClientError) -> None:
    if _error_code(exc) in _TRANSIENT:
        raise TransientStoreError(f"DynamoDB is unavailable: {_error_code(exc)}") from exc


def _conditional(operation: Any, **kwargs: Any) -> tuple[bool, dict[str, Any]]:
    """A conditional write: (True, returned attributes), or (False, the item as it stood) if refused.

    The item is there when the call asked for ReturnValuesOnConditionCheckFailure. Throttles and
    server faults become TransientStoreError.
    """
    try:
        out = operation(**kwargs)
    except ClientError as exc:
        if _error_code(exc) == "ConditionalCheckFailedException":
            old: Any = exc.response.get("Item")
            return False, dict(old or {})
        _raise_transient(exc)
        raise
    return True, dict(out.get("Attributes") or {})


# -- attribute encoding: every stored attribute is a string or an integer ---------------------
def _enc(value: str | int) -> dict[str, str]:
    return {"N": str(value)} if isinstance(value, int) else {"S": value}


def _dec_value(typed: Mapping[str, Any]) -> Any:
    if "S" in typed:
        return typed["S"]
    if "N" in typed:
        return int(typed["N"])
    if "BOOL" in typed:
        return typed["BOOL"]
    if "L" in typed:
        return [_dec_value(v) for v in typed["L"]]
    if "M" in typed:
        return _dec(typed["M"])
    if "SS" in typed:
        return sorted(typed["SS"])
    return None


def _dec(item: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _dec_value(typed) for key, typed in item.items()}


def _attempt_record(values: Mapping[str, str | int]) -> dict[str, Any]:
    """A run's attempt history entry, as a one-element list to list_append."""
    return {"L": [{"M": {k: _enc(v) for k, v in values.items()}}]}


def _opt_time(value: str | None) -> datetime | None:
    return times.parse_stored(value) if value else None


def job_pk(job_id: str) -> str:
    """Partition key of a job and of its runs."""
    return f"JOB#{job_id}"


def run_sk(scheduled_for: str) -> str:
    """Sort key of the run for one firing (stored-form scheduled_for)."""
    return f"RUN#{scheduled_for}"


def run_id_for(job_id: str, scheduled_for: datetime) -> str:
    """The run id: derived from (job_id, scheduled_for), so a run is found without an index."""
    return f"{job_id}-{int(times.to_utc(scheduled_for).timestamp() * 1000)}"


def parse_run_id(run_id: str) -> tuple[str, datetime]:
    """Inverse of run_id_for; raises ValueError on a malformed id."""
    job_id, _, millis = run_id.rpartition("-")
    if not job_id or not millis.isdigit():
        raise ValueError(f"malformed run id {run_id!r}")
    from datetime import UTC

    return job_id, datetime.fromtimestamp(int(millis) / 1000, tz=UTC)


# A payload up to this size (compact JSON) is kept in the job item; a larger one in an item of its
# own, written with the job and read when the job is. Every hot write rewrites the job item (the
# dispatcher's stamp, the overlap hold), and DynamoDB bills a write by the item's whole size: 1 WRU
# per KB. Out of line, a 4 KB payload costs its run 0.5 RRU (one eventually consistent read)
# instead of 4 more WRU on each of those writes.
INLINE_PAYLOAD_BYTES = 256
PAYLOAD_CACHE_ENTRIES = 64  # per JobStore (a Lambda container): at most 2 MiB of the largest payloads


def _payload_ref(text: str) -> str | None:
    """The key of a payload stored apart (content-addressed: immutable), or None when it is inline."""
    if len(text.encode()) <= INLINE_PAYLOAD_BYTES:
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def job_to_item(job: Job, *, shard_count: int) -> dict[str, Any]:
    """The stored form of a job; a pending tick also puts it in the due index.

    A payload over INLINE_PAYLOAD_BYTES is not in it: the job item names it (`payload_ref`) and
    job_items() also answers the item that holds it.
    """
    return job_items(job, shard_count=shard_count)[0]


def job_items(job: Job, *, shard_count: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The job item, and the item its payload is stored in when it is too big to be inline (or None)."""
    text = json.dumps(job.payload, separators=(",", ":"))
    ref = _payload_ref(text)
    item: dict[str, Any] = {
        "PK": _enc(job_pk(job.job_id)),
        "SK": _enc("META"),
        "job_id": _enc(job.job_id),
        "tenant": _enc(job.tenant),
        "type": _enc(job.type),
        "status": _enc(job.status.value),
        "handler": _enc(job.handler),
        **({"payload_ref": _enc(ref)} if ref else {"payload": _enc(text)}),
        "timezone": _enc(job.timezone),
        "retry": _enc(job.retry.model_dump_json()),
        "policy": _enc(job.policy.model_dump_json()),
        "dispatched": _enc(job.dispatched),
        "idempotent": {"BOOL": job.idempotent},
        "created_at": _enc(times.stored(job.created_at)),
        "updated_at": _enc(times.stored(job.updated_at)),
        "version": _enc(job.version),
    }
    if job.name:
        item["name"] = _enc(job.name)
    if job.run_at:
        item["run_at"] = _enc(times.stored(job.run_at))
    if job.cron_expr:
        item["cron_expr"] = _enc(job.cron_expr)
    if job.next_run_at:
        item["next_run_at"] = _enc(times.stored(job.next_run_at))
        item["due_key"] = _enc(
            due_key_for(job.job_id, job.next_run_at, written=job.updated_at, shards=shard_count)
        )
    if job.depends_on:
        item["depends_on"] = _enc(json.dumps(list(job.depends_on)))
    if job.dependants:
        item["dependants"] = {"SS": sorted(job.dependants)}
    if job.root_schedule:
        item["root_schedule"] = _enc(job.root_schedule)
    if job.paused_at:
        item["paused_at"] = _enc(times.stored(job.paused_at))
    if job.resume_from:
        item["resume_from"] = _enc(times.stored(job.resume_from))
    stored_apart = None
    if ref:
        stored_apart = {"PK": item["PK"], "SK": _enc(f"PAYLOAD#{ref}"), "payload": _enc(text)}
    return item, stored_apart


def due_key_for(job_id: str, next_run_at: datetime, *, written: datetime, shards: int) -> str:
    """The due-index key of a pending tick written at `written`.

    The bucket is the tick's minute, or the write's minute when the tick is already past: a
    resumed job or a crashed hand-over must land where the dispatcher still reads, not in a
    bucket its watermark left behind.
    """
    return times.due_key(max(next_run_at, written), times.shard_of(job_id, shards))


def job_from_item(raw: Mapping[str, Any], *, payload: Mapping[str, Any] | None = None) -> Job:
    """Inverse of job_to_item; a payload stored apart must be given (JobStore reads it)."""
    item = _dec(raw)
    if "payload" in item:
        payload = json.loads(item["payload"])
    elif payload is None:
        raise ValueError(
            f"job {item['job_id']} stores its payload apart ({item.get('payload_ref')}): read it"
        )
    return Job(
        job_id=item["job_id"],
        tenant=item["tenant"],
        type=item["type"],
        status=JobStatus(item["status"]),
        handler=item["handler"],
        payload=dict(payload),
        name=item.get("name"),
        run_at=_opt_time(item.get("run_at")),
        cron_expr=item.get("cron_expr"),
        timezone=item.get("timezone", "UTC"),
        retry=RetryPolicy.model_validate_json(item["retry"]),
        policy=SchedulePolicy.model_validate_json(item["policy"]) if "policy" in item else SchedulePolicy(),
        dispatched=item.get("dispatched", 0),
        paused_at=_opt_time(item.get("paused_at")),
        resume_from=_opt_time(item.get("resume_from")),
        depends_on=tuple(json.loads(item["depends_on"])) if "depends_on" in item else (),
        dependants=tuple(item.get("dependants", ())),
        root_schedule=item.get("root_schedule"),
        active_run=item.get("active_run"),
        active_until=_opt_time(item.get("active_until")),
        active_message=item.get("active_message"),
        buffered_run=item.get("buffered_run"),
        buffered_kind=item.get("buffered_kind"),
        buffered_until=_opt_time(item.get("buffered_until")),
        running=max(0, int(item.get("running", 0))),
        running_until=_opt_time(item.get("running_until")),
        idempotent=item.get("idempotent", True),
        next_run_at=_opt_time(item.get("next_run_at")),
        created_at=times.parse_stored(item["created_at"]),
        updated_at=times.parse_stored(item["updated_at"]),
        version=item.get("version", 1),
    )


def execution_from_item(raw: Mapping[str, Any]) -> Execution:
    """A run row as a model."""
    item = _dec(raw)
    error = None
    if item.get("error_type"):
        error = RunError(type=item["error_type"], message=item.get("error_message", ""))
    attempts = [
        AttemptRecord(
            attempt=a.get("attempt", 0),
            worker=a.get("worker"),
            started_at=_opt_time(a.get("started_at")),
            finished_at=_opt_time(a.get("finished_at")),
            outcome=a.get("outcome", ""),
            error=RunError(type=a["error_type"], message=a.get("error_message", ""))
            if a.get("error_type")
            else None,
        )
        for a in item.get("attempts", [])
    ]
    return Execution(
        run_id=item["run_id"],
        job_id=item["job_id"],
        tenant=item.get("tenant", ""),
        scheduled_for=times.parse_stored(item["scheduled_for"]),
        status=RunStatus(item["status"]),
        attempt=item.get("attempt", 0),
        lease_owner=item.get("lease_owner"),
        lease_until=_opt_time(item.get("lease_until")),
        worker=item.get("worker"),
        started_at=_opt_time(item.get("started_at")),
        finished_at=_opt_time(item.get("finished_at")),
        duration_ms=item.get("duration_ms"),
        result=json.loads(item["result"]) if "result" in item else None,
        error=error,
        attempts=attempts,
        replays=item.get("replays", 0),
        reason=item.get("reason"),
        kind=item.get("kind", "scheduled"),
        created_at=_opt_time(item.get("created_at")),
    )


@dataclass(frozen=True, slots=True)
class DuePage:
    """One page of a due-index range read."""

    entries: list[dict[str, Any]]
    cursor: dict[str, Any] | None
    items_read: int


@dataclass(frozen=True, slots=True)
class Transition:
    """The outcome of a conditional run transition: the row after it, or as it stood when refused."""

    applied: bool
    item: dict[str, Any] | None
    previous: dict[str, Any] | None = None

    @property
    def execution(self) -> Execution | None:
        """The row as a model, if there is one."""
        return execution_from_item(self.item) if self.item else None


@dataclass(frozen=True, slots=True)
class ShardLease:
    """A held shard lease and the oldest minute bucket the shard has not finished draining."""

    shard: int
    owner: str
    watermark: str | None


@dataclass
class JobStore:
    """Jobs, idempotency records and shard leases in the jobs table."""

    client: DynamoDBClient
    table: str
    shard_count: int
    due_index: str = "due"
    reads: dict[str, int] = field(default_factory=lambda: {"due_items": 0})
    # Payloads stored apart, as JSON text by reference. Content-addressed, so never stale: a run
    # that reads its job more than once (the hold, its dependants, its completion) reads the
    # payload once, and a warm worker not at all for a job it ran before. The oldest go first.
    _payloads: OrderedDict[str, str] = field(default_factory=OrderedDict, repr=False, compare=False)
    _payloads_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    # -- jobs ---------------------------------------------------------------------------------
    def create_with_idempotency(
        self,
        job: Job,
        *,
        idempotency_key: str,
        request_hash: str,
        response: Mapping[str, Any],
        now: datetime,
    ) -> dict[str, Any] | None:
        """Write the job (with its due-index entry) and its idempotency record in one transaction.

        Returns None when written; when the key was already used, returns that record decoded
        (request_hash, response) and writes nothing.
        """
        idem_item = {
            "PK": _enc(f"IDEM#{job.tenant}#{idempotency_key}"),
            "SK": _enc("IDEM"),
            "request_hash": _enc(request_hash),
            "response": _enc(json.dumps(response, separators=(",", ":"))),
            "job_id": _enc(job.job_id),
            "created_at": _enc(times.stored(now)),
            "expires_at": _enc(int((now + timedelta(hours=IDEMPOTENCY_HOURS)).timestamp())),
        }
        edges: list[Any] = [self._edge(upstream, job, add=True) for upstream in job.depends_on]
        # After the edges: a refused edge's reason is read by its position (reasons[2:]).
        job_item, stored_apart = job_items(job, shard_count=self.shard_count)
        payload_put: list[Any] = (
            [{"Put": {"TableName": self.table, "Item": stored_apart}}] if stored_apart else []
        )
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": idem_item,
                            "ConditionExpression": "attribute_not_exists(PK)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": job_item,
                            "ConditionExpression": "attribute_not_exists(PK)",
                        }
                    },
                    *edges,
                    *payload_put,
                ]
            )
        except ClientError as exc:
            if _error_code(exc) != "TransactionCanceledException":
                _raise_transient(exc)
                raise
            reasons = exc.response.get("CancellationReasons", [])
            first = reasons[0] if reasons else {}
            edge_refused = [
                upstream
                for upstream, reason in zip(job.depends_on, reasons[2:], strict=False)
                if reason.get("Code") == "ConditionalCheckFailed"
            ]
            if edge_refused and first.get("Code") != "ConditionalCheckFailed":
                raise Conflict(
                    f"depends_on: upstream job '{edge_refused[0]}' changed (cancelled?) "
                    "while this job was created",
                    field="depends_on",
                ) from exc
            if first.get("Code") == "ConditionalCheckFailed":
                old = first.get("Item") or self._get(f"IDEM#{job.tenant}#{idempotency_key}", "IDEM")
                if old:
                    decoded = _dec(old)
                    return {
                        "request_hash": decoded["request_hash"],
                        "response": json.loads(decoded["response"]),
                    }
            raise TransientStoreError(
                "job creation was cancelled; retry with the same Idempotency-Key"
            ) from exc
        return None

    def _edge(self, upstream: str, job: Job, *, add: bool) -> dict[str, Any]:
        """A transaction item that records (or removes) the edge upstream -> job on the upstream."""
        if add:
            return {
                "Update": {
                    "TableName": self.table,
                    "Key": {"PK": _enc(job_pk(upstream)), "SK": _enc("META")},
                    "UpdateExpression": "ADD dependants :me",
                    "ConditionExpression": "attribute_exists(PK) AND tenant = :tenant AND #s <> :cancelled",
                    "ExpressionAttributeNames": {"#s": "status"},
                    "ExpressionAttributeValues": {
                        ":me": {"SS": [job.job_id]},
                        ":tenant": _enc(job.tenant),
                        ":cancelled": _enc(JobStatus.CANCELLED.value),
                    },
                }
            }
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"PK": _enc(job_pk(upstream)), "SK": _enc("META")},
                "UpdateExpression": "DELETE dependants :me",
                "ConditionExpression": "attribute_exists(PK)",
                "ExpressionAttributeValues": {":me": {"SS": [job.job_id]}},
            }
        }

    def rewire(self, job: Job, *, expected_version: int, added: list[str], removed: list[str]) -> bool:
        """Save a dependent job's new definition and move its edges, in one transaction."""
        item = job_to_item(job, shard_count=self.shard_count)
        moves: list[Any] = [self._edge(u, job, add=True) for u in added]
        moves += [self._edge(u, job, add=False) for u in removed]
        return self._versioned_transaction(
            job.job_id,
            update="SET depends_on = :deps, root_schedule = :root, updated_at = :now ADD version :one",
            values={
                ":deps": item["depends_on"],
                ":root": item.get("root_schedule", _enc("once")),
                ":now": item["updated_at"],
                ":one": _enc(1),
                ":v": _enc(expected_version),
            },
            others=moves,
        )

    def _versioned_transaction(
        self,
        job_id: str,
        *,
        update: str,
        values: dict[str, Any],
        names: dict[str, str] | None = None,
        others: Sequence[Any] = (),
    ) -> bool:
        """Update the job item if its version is still :v, with `others`, all in one transaction.

        False when the transaction is cancelled (the version moved, or one of `others` refused).
        """
        job_update: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            "UpdateExpression": update,
            "ConditionExpression": "version = :v",
            "ExpressionAttributeValues": values,
        }
        if names:
            job_update["ExpressionAttributeNames"] = names
        try:
            items: list[Any] = [{"Update": job_update}, *others]
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if _error_code(exc) == "TransactionCanceledException":
                return False
            _raise_transient(exc)
            raise
        return True

    def get_job(self, job_id: str) -> Job | None:
        """The job, read consistently, or None."""
        raw = self._get(job_pk(job_id), "META")
        return self._job(raw) if raw else None

    def _job(self, raw: Mapping[str, Any]) -> Job:
        """A job item as a Job, with its payload read when it is stored apart."""
        ref = raw.get("payload_ref")
        if ref is None:
            return job_from_item(raw)
        with self._payloads_lock:
            text = self._payloads.get(ref["S"])
        if text is None:
            text = self._read_payload(raw["PK"], ref["S"], job_id=raw["job_id"]["S"])
            with self._payloads_lock:
                self._payloads[ref["S"]] = text
                if len(self._payloads) > PAYLOAD_CACHE_ENTRIES:
                    self._payloads.popitem(last=False)
        return job_from_item(raw, payload=json.loads(text))  # parsed per read: each Job its own

    def _read_payload(self, pk: Mapping[str, str], ref: str, *, job_id: str) -> str:
        key = {"PK": dict(pk), "SK": _enc(f"PAYLOAD#{ref}")}
        # Written before (or with) the job item and never changed, so an eventually consistent read
        # finds it unless it is only just written; then a consistent one does.
        for consistent in (False, True):
            try:
                got = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=consistent).get(
                    "Item"
                )
            except ClientError as exc:
                _raise_transient(exc)
                raise
            if got:
                return str(got["payload"]["S"])
        raise TransientStoreError(f"the payload of job {job_id} is not readable yet")

    def stamp_next_tick(
        self,
        job_id: str,
        *,
        expected: datetime,
        next_run_at: datetime | None,
        now: datetime,
        dispatched: int = 0,
    ) -> bool:
        """Move the job's pending tick from `expected` to `next_run_at` (None: leave the index).

        A compare-and-set on next_run_at, so two dispatchers (or the API and a dispatcher) that
        read the same tick advance it once; returns whether this call moved it.
        """
        values: dict[str, Any] = {
            ":expected": _enc(times.stored(expected)),
            ":now": _enc(times.stored(now)),
            ":n": _enc(dispatched),
        }
        if next_run_at is None:
            update = "REMOVE next_run_at, due_key SET updated_at = :now ADD dispatched :n"
        else:
            update = "SET next_run_at = :next, due_key = :due, updated_at = :now ADD dispatched :n"
            values[":next"] = _enc(times.stored(next_run_at))
            values[":due"] = _enc(due_key_for(job_id, next_run_at, written=now, shards=self.shard_count))
        return _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            UpdateExpression=update,
            ConditionExpression="next_run_at = :expected",
            ExpressionAttributeValues=values,
        )[0]

    def set_job_status(
        self,
        job_id: str,
        *,
        target: JobStatus,
        sources: Iterable[JobStatus],
        now: datetime,
        leave_index: bool,
        release_slot: bool = False,
    ) -> tuple[bool, Job | None]:
        """Compare-and-set the job status; returns (applied, job as it stands after the call).

        `release_slot`: the write also frees the job's slot (a one-off's run completing it).
        """
        names = {"#s": "status"}
        src = sorted({s.value for s in sources})
        values: dict[str, Any] = {":t": _enc(target.value), ":now": _enc(times.stored(now))}
        values.update({f":s{i}": _enc(s) for i, s in enumerate(src)})
        values_of_src = [f":s{i}" for i in range(len(src))]
        update = "SET #s = :t, updated_at = :now ADD version :one"
        values[":one"] = _enc(1)
        removes = [*(("next_run_at", "due_key") if leave_index else ()),
                   *(("active_run", "active_until", "active_message") if release_slot else ())]
        if removes:
            update += " REMOVE " + ", ".join(removes)
        applied, result = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            UpdateExpression=update,
            ConditionExpression=f"attribute_exists(PK) AND #s IN ({', '.join(values_of_src)})",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not applied:
            return False, self._job(result) if result else None
        return True, self._job(result)

    def save_definition(self, job: Job, *, expected_version: int) -> bool:
        """Write a job's definition (schedule, policies, status, pending tick) if its version is unchanged.

        One conditional UpdateItem: the edit and the recomputed next tick land together or not at
        all, and the run-time attributes (overlap guard, dispatched count) are left as they are.
        """
        item, stored_apart = job_items(job, shard_count=self.shard_count)
        definition = {
            k: v
            for k, v in item.items()
            if k not in ("PK", "SK", "version", "dispatched", "created_at", "dependants")
        }
        optional = (
            "name",
            "run_at",
            "cron_expr",
            "next_run_at",
            "due_key",
            "paused_at",
            "resume_from",
            "payload",  # one of these two: inline, or stored apart
            "payload_ref",
        )
        names: dict[str, str] = {}
        values: dict[str, Any] = {":v": _enc(expected_version), ":one": _enc(1)}
        sets = []
        for i, (key, value) in enumerate(sorted(definition.items())):
            names[f"#a{i}"] = key
            values[f":a{i}"] = value
            sets.append(f"#a{i} = :a{i}")
        removes = [k for k in optional if k not in definition]
        for i, key in enumerate(removes):
            names[f"#r{i}"] = key
        update = "SET " + ", ".join(sets) + " ADD version :one"
        if removes:
            update += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removes)))
        if stored_apart is None:
            return self._guarded_update(job.job_id, update, "version = :v", values, names)
        # A payload stored apart lands with the edit or not at all (an edit refused for its version
        # leaves nothing behind); an unchanged one is put again, the same bytes under the same key.
        return self._versioned_transaction(
            job.job_id,
            update=update,
            values=values,
            names=names,
            others=[{"Put": {"TableName": self.table, "Item": stored_apart}}],
        )

    # -- start markers: the slot (overlap guard) and the count ------------------------------------------
    #
    #   worker A (tick 10:00)                    worker B (tick 10:10, A still running)
    #   hold: slot free -> 10:00 (message a)  ok
    #                                            hold: slot = 10:00, live -> refused
    #                                              skip:       run 10:10 -> SKIPPED ("overlap")
    #                                              buffer_one: buffered slot free -> 10:10, sleep
    #   release: slot = 10:00 -> freed; it answers
    #   the buffered 10:10: A sends it a wake-up
    #                                            hold (wake-up): buffered_run = 10:10 -> slot ok
    #
    #   cancel (API)                             any run's start
    #   job SCHEDULED, no live marker -> CANCELLED
    #                                            hold/count: status <> CANCELLED -> refused: no run
    #   -- or the other way round --
    #                                            hold/count -> live marker
    #   cancel: live marker -> refused -> 409
    #
    # Every condition is on the one job item, so a cancel and a run's start cannot both win. A
    # holder that dies stops renewing its lease (active_until, running_until): its marker lapses.
    #
    # A healthy run of a `skip` job does not release the slot when its lease runs out before the
    # job's next tick (a write saved per run); a tick that finds a live slot checks whether that run
    # is already finished and, if so, replaces it (`stale`) with a compare-and-set on its name.
    # A live buffered tick owns the next turn: no other tick takes the slot from under it.
    # Re-entry by the message that holds the slot (SQS handed it out again) is always allowed; a
    # free, lapsed or finished-holder slot is taken only if no other tick's live turn waits for it.
    _SLOT_FREE = (
        "(active_run = :run AND active_message = :msg)"
        " OR ((attribute_not_exists(active_run) OR active_until < :now{stale})"
        " AND (attribute_not_exists(buffered_run) OR buffered_run = :run OR buffered_until < :now))"
    )

    def _hold_values(self, run: str, message: str, until: datetime, now: datetime) -> dict[str, Any]:
        return {
            ":run": _enc(run),
            ":msg": _enc(message),
            ":until": _enc(times.stored(until)),
            ":now": _enc(times.stored(now)),
            ":cancelled": _enc(JobStatus.CANCELLED.value),
        }

    def hold_job(
        self,
        job_id: str,
        *,
        run: str,
        message: str,
        until: datetime,
        now: datetime,
        was_buffered: bool,
        stale: str | None = None,
    ) -> bool:
        """Make `run` (carried by `message`) the job's holder: if the slot is free, lapsed, already
        this message's, or held by the finished run `stale`; never on a cancelled job."""
        update = "SET active_run = :run, active_until = :until, active_message = :msg"
        values = self._hold_values(run, message, until, now)
        if stale is not None:
            values[":stale"] = _enc(stale)
        condition = "#s <> :cancelled AND (" + self._SLOT_FREE.format(
            stale=" OR active_run = :stale" if stale else ""
        ) + ")"
        if was_buffered:
            update += " REMOVE buffered_run, buffered_until, buffered_kind"
        return self._guarded_update(job_id, update, condition, values, {"#s": "status"})

    def hold_and_read(
        self, job_id: str, *, run: str, message: str, until: datetime, now: datetime
    ) -> tuple[bool, Job | None]:
        """hold_job (without the buffered slot) that also answers the job: (held, the job or None)."""
        applied, item = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            UpdateExpression="SET active_run = :run, active_until = :until, active_message = :msg",
            ConditionExpression="attribute_exists(PK) AND #s <> :cancelled AND ("
            + self._SLOT_FREE.format(stale="")
            + ")",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=self._hold_values(run, message, until, now),
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return applied, self._job(item) if item else None

    def buffer_behind(self, job_id: str, *, run: str, kind: str, until: datetime, now: datetime) -> bool:
        """Take the job's one waiting slot for `run` until `until`: if free, ours, or lapsed."""
        return self._guarded_update(
            job_id,
            "SET buffered_run = :run, buffered_until = :until, buffered_kind = :kind",
            "attribute_not_exists(buffered_run) OR buffered_run = :run OR buffered_until < :now",
            {
                ":run": _enc(run),
                ":kind": _enc(kind),
                ":until": _enc(times.stored(until)),
                ":now": _enc(times.stored(now)),
            },
        )

    def release_job(self, job_id: str, *, run: str) -> Job | None:
        """Give the slot up if `run` holds it; the job as it stood (to wake its buffered tick), or None."""
        applied, item = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            UpdateExpression="REMOVE active_run, active_until, active_message",
            ConditionExpression="active_run = :run",
            ExpressionAttributeValues={":run": _enc(run)},
            ReturnValues="ALL_OLD",
        )
        return self._job(item) if applied and item else None

    def extend_hold(self, job_id: str, *, run: str, until: datetime) -> bool:
        """Push the active run's claim on the job to `until` (the heartbeat)."""
        return self._guarded_update(
            job_id,
            "SET active_until = :until",
            "active_run = :run",
            {":run": _enc(run), ":until": _enc(times.stored(until))},
        )

    def count_and_read(self, job_id: str, *, until: datetime, now: datetime) -> tuple[bool, Job | None]:
        """Count a run as started on its job (never a cancelled one); (counted, the job or None)."""
        applied, item = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            UpdateExpression="SET running_until = :until ADD running :one",
            ConditionExpression="attribute_exists(PK) AND #s <> :cancelled",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":one": _enc(1),
                ":until": _enc(times.stored(until)),
                ":cancelled": _enc(JobStatus.CANCELLED.value),
            },
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return applied, self._job(item) if item else None

    def uncount(self, job_id: str) -> bool:
        """A counted run is over (whatever its outcome)."""
        return self._guarded_update(
            job_id, "ADD running :minus", "running > :zero", {":minus": _enc(-1), ":zero": _enc(0)}
        )

    def extend_count(self, job_id: str, *, until: datetime) -> bool:
        """Push the counted runs' lease to `until` (the heartbeat of one of them)."""
        return self._guarded_update(
            job_id,
            "SET running_until = :until",
            "running > :zero",
            {":until": _enc(times.stored(until)), ":zero": _enc(0)},
        )

    def cancel_job(self, job_id: str, *, now: datetime, stale: str | None) -> tuple[bool, Job | None]:
        """SCHEDULED|PAUSED -> CANCELLED, only while no run has a live start marker (see above).

        `stale`: the slot's holder, known to be finished. Returns (applied, the job after or as it stood).
        """
        values: dict[str, Any] = {
            ":t": _enc(JobStatus.CANCELLED.value),
            ":s0": _enc(JobStatus.SCHEDULED.value),
            ":s1": _enc(JobStatus.PAUSED.value),
            ":now": _enc(times.stored(now)),
            ":one": _enc(1),
            ":zero": _enc(0),
        }
        no_slot = "(attribute_not_exists(active_run) OR active_until < :now{stale})".format(
            stale=" OR active_run = :stale" if stale else ""
        )
        if stale:
            values[":stale"] = _enc(stale)
        no_count = "(attribute_not_exists(running) OR running <= :zero OR running_until < :now)"
        applied, result = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            UpdateExpression="SET #s = :t, updated_at = :now ADD version :one REMOVE next_run_at, due_key",
            ConditionExpression=f"attribute_exists(PK) AND #s IN (:s0, :s1) AND {no_slot} AND {no_count}",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return applied, self._job(result) if result else None

    def _guarded_update(
        self,
        job_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        names: dict[str, str] | None = None,
    ) -> bool:
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        return _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc("META")},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
            **kwargs,
        )[0]

    # -- the due index --------------------------------------------------------------------------
    def due_page(
        self, due_key: str, *, until: datetime, cursor: dict[str, Any] | None, limit: int
    ) -> DuePage:
        """One page of the entries of `due_key` with next_run_at <= until, oldest first."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": self.due_index,
            "KeyConditionExpression": "due_key = :k AND next_run_at <= :until",
            "ExpressionAttributeValues": {":k": _enc(due_key), ":until": _enc(times.stored(until))},
            "Limit": limit,
        }
        if cursor:
            kwargs["ExclusiveStartKey"] = cursor
        try:
            out = self.client.query(**kwargs)
        except ClientError as exc:
            _raise_transient(exc)
            raise
        self.reads["due_items"] += int(out.get("ScannedCount", 0))
        return DuePage(
            entries=[_dec(i) for i in out.get("Items", [])],
            cursor=out.get("LastEvaluatedKey"),
            items_read=int(out.get("ScannedCount", 0)),
        )

    # -- shard leases ---------------------------------------------------------------------------
    def acquire_shard(
        self, shard: int, *, owner: str, now: datetime, lease_seconds: int
    ) -> ShardLease | None:
        """Lease a shard if it is unclaimed, expired, or already ours; None if another holds it."""
        applied, result = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(f"SHARD#{shard}"), "SK": _enc("LEASE")},
            UpdateExpression="SET lease_owner = :me, lease_until = :until",
            # Unclaimed, expired, or ours (a pass that re-enters after a crash of its own).
            ConditionExpression=(
                "attribute_not_exists(lease_owner) OR lease_until < :now OR lease_owner = :me"
            ),
            ExpressionAttributeValues={
                ":me": _enc(owner),
                ":now": _enc(times.stored(now)),
                ":until": _enc(times.stored(now + timedelta(seconds=lease_seconds))),
            },
            ReturnValues="ALL_NEW",
        )
        if not applied:
            return None
        item = _dec(result)
        return ShardLease(shard=shard, owner=owner, watermark=item.get("watermark"))

    def release_shard(self, lease: ShardLease, *, watermark: str) -> bool:
        """Record the drained watermark and give the lease up; False if the lease was lost meanwhile."""
        return _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(f"SHARD#{lease.shard}"), "SK": _enc("LEASE")},
            UpdateExpression="SET watermark = :wm REMOVE lease_owner, lease_until",
            ConditionExpression="lease_owner = :me",
            ExpressionAttributeValues={":wm": _enc(watermark), ":me": _enc(lease.owner)},
        )[0]

    # -- helpers ----------------------------------------------------------------------------------
    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        try:
            out = self.client.get_item(
                TableName=self.table, Key={"PK": _enc(pk), "SK": _enc(sk)}, ConsistentRead=True
            )
        except ClientError as exc:
            _raise_transient(exc)
            raise
        item = out.get("Item")
        return dict(item) if item else None


@dataclass
class RunStore:
    """Run rows in the runs table: one per (job_id, scheduled_for)."""

    client: DynamoDBClient
    table: str

    def put_pending(
        self,
        *,
        job_id: str,
        tenant: str,
        scheduled_for: datetime,
        now: datetime,
        skipped: str | None = None,
        kind: str = "scheduled",
    ) -> Transition:
        """Create the run row for one firing as PENDING (or SKIPPED, with a reason), at most once.

        The conditional put on (job_id, scheduled_for) is the "one run per firing" guarantee:
        when the row exists already, nothing is written and the row is returned as it stands.
        """
        sf = times.stored(scheduled_for)
        item = {
            "PK": _enc(job_pk(job_id)),
            "SK": _enc(run_sk(sf)),
            "run_id": _enc(run_id_for(job_id, scheduled_for)),
            "job_id": _enc(job_id),
            "tenant": _enc(tenant),
            "scheduled_for": _enc(sf),
            "status": _enc(RunStatus.SKIPPED.value if skipped else RunStatus.PENDING.value),
            "attempt": _enc(0),
            "kind": _enc(kind),
            "created_at": _enc(times.stored(now)),
            "updated_at": _enc(times.stored(now)),
            "expires_at": _enc(int((scheduled_for + timedelta(days=RUN_HISTORY_DAYS)).timestamp())),
        }
        if skipped:
            item["reason"] = _enc(skipped)
        applied, old = _conditional(
            self.client.put_item,
            TableName=self.table,
            Item=item,
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not applied:
            return Transition(applied=False, item=old or self.get_raw(job_id, sf))
        return Transition(applied=True, item=item)

    @staticmethod
    def new_row(job_id: str, tenant: str, scheduled_for: str, *, kind: str) -> dict[str, str | int]:
        """The attributes a run row is created with when its first write is a transition."""
        expires = times.parse_stored(scheduled_for) + timedelta(days=RUN_HISTORY_DAYS)
        return {
            "run_id": run_id_for(job_id, times.parse_stored(scheduled_for)),
            "job_id": job_id,
            "tenant": tenant,
            "scheduled_for": scheduled_for,
            "kind": kind,
            "expires_at": int(expires.timestamp()),
        }

    def get_raw(self, job_id: str, scheduled_for: str, *, consistent: bool = True) -> dict[str, Any] | None:
        """The run row for (job_id, stored scheduled_for), read consistently unless told otherwise."""
        try:
            out = self.client.get_item(
                TableName=self.table,
                Key={"PK": _enc(job_pk(job_id)), "SK": _enc(run_sk(scheduled_for))},
                ConsistentRead=consistent,
            )
        except ClientError as exc:
            _raise_transient(exc)
            raise
        item = out.get("Item")
        return dict(item) if item else None

    def get(self, job_id: str, scheduled_for: datetime) -> Execution | None:
        """The run for one firing, or None."""
        raw = self.get_raw(job_id, times.stored(scheduled_for))
        return execution_from_item(raw) if raw else None

    def transition(
        self,
        *,
        job_id: str,
        scheduled_for: str,
        target: RunStatus,
        now: datetime,
        owner: str | None = None,
        set_values: Mapping[str, str | int] | None = None,
        remove: Iterable[str] = (),
        increment_attempt: bool = False,
        takeover_expired_lease: bool = False,
        create_if_missing: Mapping[str, str | int] | None = None,
        append_attempt: Mapping[str, str | int] | None = None,
        first_attempt_only: bool = False,
        via: Sequence[RunStatus] = (),
    ) -> Transition:
        """Move one run to `target` if its stored status is a legal source of it.

        `owner`: the transition also requires the stored lease_owner to be this owner (moves
        out of LEASED/RUNNING are the lease holder's alone). `takeover_expired_lease`: a run
        still LEASED/RUNNING whose lease expired counts as PENDING (the RUNNING -> PENDING ->
        LEASED crash-recovery path, applied in one write). `create_if_missing`: the row may not
        exist yet and is created with these attributes. `via`: the run passes through these
        statuses on its way to `target` in this one write (each step a legal edge, checked here),
        so the legal sources are those of via[0]: a worker's fast path records PENDING -> LEASED
        -> RUNNING -> SUCCEEDED in one write when no one could have observed the steps between.
        """
        first = via[0] if via else target
        for source in sources_of(first):
            check_path(source, *via, target)
        names = {"#s": "status"}
        values: dict[str, Any] = {":t": _enc(target.value), ":now": _enc(times.stored(now))}
        sources = sorted(s.value for s in sources_of(first))
        values.update({f":src{i}": _enc(s) for i, s in enumerate(sources)})
        clauses = [f"#s IN ({', '.join(f':src{i}' for i in range(len(sources)))})"]
        if owner is not None and first not in (RunStatus.LEASED,):
            clauses[0] = f"({clauses[0]} AND lease_owner = :owner)"
            values[":owner"] = _enc(owner)
        if first_attempt_only:
            clauses[0] = f"({clauses[0]} AND attempt = :attempt0)"
            values[":attempt0"] = _enc(0)
        if takeover_expired_lease:
            held = sorted(s.value for s in HELD)
            values.update({f":held{i}": _enc(s) for i, s in enumerate(held)})
            clauses.append(
                f"(#s IN ({', '.join(f':held{i}' for i in range(len(held)))}) AND lease_until < :now)"
            )
        sets = ["#s = :t", "updated_at = :now"]
        if create_if_missing is not None:
            clauses.append("attribute_not_exists(PK)")
            for i, (key, value) in enumerate(sorted(create_if_missing.items())):
                names[f"#c{i}"] = key
                values[f":c{i}"] = _enc(value)
                sets.append(f"#c{i} = if_not_exists(#c{i}, :c{i})")
        for i, (key, value) in enumerate(sorted((set_values or {}).items())):
            names[f"#v{i}"] = key
            values[f":v{i}"] = _enc(value)
            sets.append(f"#v{i} = :v{i}")
        if increment_attempt:
            values[":zero"], values[":one"] = _enc(0), _enc(1)
            sets.append("attempt = if_not_exists(attempt, :zero) + :one")
        if append_attempt is not None:
            values[":rec"], values[":none"] = _attempt_record(append_attempt), {"L": []}
            sets.append("attempts = list_append(if_not_exists(attempts, :none), :rec)")
        update = "SET " + ", ".join(sets)
        removes = list(remove)
        if target == RunStatus.SUCCEEDED:
            # A success ends the run's failure story: the top-level error was the last failed
            # attempt's (each attempt keeps its own in `attempts`), and is no longer true.
            removes += [k for k in ("error_type", "error_message") if k not in removes]
        if removes:
            for i, key in enumerate(removes):
                names[f"#r{i}"] = key
            update += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removes)))
        applied, result = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc(run_sk(scheduled_for))},
            UpdateExpression=update,
            ConditionExpression=" OR ".join(clauses),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not applied:
            return Transition(applied=False, item=result or None)
        previous = result or None
        # ReturnValues can give ALL_OLD or ALL_NEW, not both; the row after the write is the
        # previous row with our SETs applied, which a read-back would only confirm at a cost.
        return Transition(applied=True, item=None, previous=previous)

    def fail_stuck(
        self,
        *,
        job_id: str,
        scheduled_for: str,
        tenant: str,
        now: datetime,
        error_type: str,
        error_message: str,
    ) -> Execution | None:
        """Move a run its workers never finished (PENDING, LEASED or RUNNING) to FAILED; None if final.

        One conditional write along the legal path PENDING -> LEASED -> RUNNING -> FAILED (from
        wherever the run stands on it); the reconciler uses it for a message SQS gave up on.
        """
        check_path(RunStatus.PENDING, RunStatus.LEASED, RunStatus.RUNNING, RunStatus.FAILED)
        stamp = times.stored(now)
        job_sf = times.parse_stored(scheduled_for)
        applied, result = _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc(run_sk(scheduled_for))},
            UpdateExpression=(
                "SET #s = :failed, error_type = :et, error_message = :em,"
                " finished_at = :now, updated_at = :now,"
                " run_id = if_not_exists(run_id, :rid), job_id = if_not_exists(job_id, :jid),"
                " tenant = if_not_exists(tenant, :tenant),"
                " scheduled_for = if_not_exists(scheduled_for, :sf),"
                " attempt = if_not_exists(attempt, :zero),"
                " attempts = list_append(if_not_exists(attempts, :none), :rec)"
            ),
            ConditionExpression="attribute_not_exists(PK) OR #s IN (:p, :l, :r)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":failed": _enc(RunStatus.FAILED.value),
                ":p": _enc(RunStatus.PENDING.value),
                ":l": _enc(RunStatus.LEASED.value),
                ":r": _enc(RunStatus.RUNNING.value),
                ":et": _enc(error_type),
                ":em": _enc(error_message),
                ":now": _enc(stamp),
                ":rid": _enc(run_id_for(job_id, job_sf)),
                ":jid": _enc(job_id),
                ":tenant": _enc(tenant),
                ":sf": _enc(scheduled_for),
                ":zero": _enc(0),
                ":none": {"L": []},
                ":rec": _attempt_record(
                    {
                        "outcome": error_type,
                        "finished_at": stamp,
                        "error_type": error_type,
                        "error_message": error_message,
                    }
                ),
            },
            ReturnValues="ALL_NEW",
        )
        if not applied:
            return None
        return execution_from_item(result)

    def dead_letters(
        self, *, dl_key: str, start: dict[str, Any] | None, limit: int, job_id: str | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Up to `limit` dead-letter entries of a tenant, newest first, and the key to continue from."""
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "dead_letter",
            "KeyConditionExpression": "dl_key = :k",
            "ExpressionAttributeValues": {":k": _enc(dl_key)},
            "ScanIndexForward": False,
        }
        if job_id:
            kwargs["FilterExpression"] = "job_id = :job"
            kwargs["ExpressionAttributeValues"][":job"] = _enc(job_id)
        if start:
            kwargs["ExclusiveStartKey"] = start
        while True:
            kwargs["Limit"] = limit - len(rows)
            try:
                out = self.client.query(**kwargs)
            except ClientError as exc:
                _raise_transient(exc)
                raise
            rows.extend(_dec(i) for i in out.get("Items", []))
            last = out.get("LastEvaluatedKey")
            if not last or len(rows) >= limit:
                return rows, dict(last) if last else None
            kwargs["ExclusiveStartKey"] = last

    def extend_lease(self, *, job_id: str, scheduled_for: str, owner: str, until: datetime) -> bool:
        """Push the lease of a held run to `until`; False if `owner` no longer holds it."""
        held = sorted(s.value for s in HELD)
        return _conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": _enc(job_pk(job_id)), "SK": _enc(run_sk(scheduled_for))},
            UpdateExpression="SET lease_until = :until",
            ConditionExpression="lease_owner = :me AND #s IN (:h0, :h1)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":until": _enc(times.stored(until)),
                ":me": _enc(owner),
                ":h0": _enc(held[0]),
                ":h1": _enc(held[1]),
            },
        )[0]

    def recent(self, job_id: str, *, limit: int) -> list[Execution]:
        """The newest runs of a job, newest first."""
        try:
            out = self.client.query(
                TableName=self.table,
                KeyConditionExpression="PK = :pk AND begins_with(SK, :run)",
                ExpressionAttributeValues={":pk": _enc(job_pk(job_id)), ":run": _enc("RUN#")},
                ScanIndexForward=False,
                Limit=limit,
            )
        except ClientError as exc:
            _raise_transient(exc)
            raise
        return [execution_from_item(i) for i in out.get("Items", [])]

    def history(
        self,
        job_id: str,
        *,
        start: datetime | None,
        end: datetime | None,
        status: str | None,
        limit: int,
        cursor: dict[str, Any] | None,
        kind: str | None = None,
    ) -> tuple[list[Execution], dict[str, Any] | None]:
        """Runs of a job with start <= scheduled_for < end, newest first, of one status and kind if given."""
        low = run_sk(times.stored(start)) if start else "RUN#"
        high = run_sk(times.stored(end)) if end else "RUN$"  # "$" sorts after every "#..." key
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk AND SK BETWEEN :low AND :high",
            "ExpressionAttributeValues": {
                ":pk": _enc(job_pk(job_id)),
                ":low": _enc(low),
                ":high": _enc(high),
            },
            "ScanIndexForward": False,
        }
        filters: list[str] = []
        names: dict[str, str] = {}
        if status:
            filters.append("#s = :status")
            names["#s"] = "status"
            kwargs["ExpressionAttributeValues"][":status"] = _enc(status)
        if kind:
            # A row without `kind` is a scheduled one (execution_from_item reads it so).
            filters.append(
                "(#k = :kind OR attribute_not_exists(#k))" if kind == "scheduled" else "#k = :kind"
            )
            names["#k"] = "kind"
            kwargs["ExpressionAttributeValues"][":kind"] = _enc(kind)
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
            kwargs["ExpressionAttributeNames"] = names
        if cursor:
            kwargs["ExclusiveStartKey"] = cursor
        rows: list[Execution] = []
        while True:
            kwargs["Limit"] = limit - len(rows)
            try:
                out = self.client.query(**kwargs)
            except ClientError as exc:
                _raise_transient(exc)
                raise
            rows.extend(
                execution_from_item(i) for i in out.get("Items", []) if not (end and i["SK"]["S"] >= high)
            )
            last = out.get("LastEvaluatedKey")
            if not last or len(rows) >= limit:
                return rows, dict(last) if last else None
            kwargs["ExclusiveStartKey"] = last

    def since(self, job_id: str, *, after: datetime) -> list[Execution]:
        """Every run of a job scheduled after `after`, oldest first (all pages)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk AND SK > :from",
            "ExpressionAttributeValues": {
                ":pk": _enc(job_pk(job_id)),
                ":from": _enc(run_sk(times.stored(after))),
            },
        }
        runs: list[Execution] = []
        while True:
            try:
                out = self.client.query(**kwargs)
            except ClientError as exc:
                _raise_transient(exc)
                raise
            runs.extend(execution_from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return runs
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


__all__ = [
    "Conflict",
    "DuePage",
    "JobStore",
    "RunStore",
    "ShardLease",
    "Transition",
    "execution_from_item",
    "job_from_item",
    "job_items",
    "job_to_item",
    "parse_run_id",
    "run_id_for",
]
