"""Jobs in the jobs table: definitions, idempotency records, the due index and the start markers.

About 600 lines: every write here conditions on the one job item, and the start markers'
timeline (below) is the reason for most of them; keeping them with the item's codec calls makes
each condition readable against it. Shard leases, the other item type of the table, are apart.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import Refused, aws_call
from jobsched.adapters.dynamodb.codec import (
    PAYLOAD_CACHE_ENTRIES,
    dec,
    due_entry_from_item,
    enc,
    job_from_item,
    job_items,
    job_to_item,
)
from jobsched.adapters.dynamodb.conditions import DYNAMODB, all_of, any_of, conditional
from jobsched.adapters.dynamodb.leases import ShardLeases
from jobsched.adapters.dynamodb.operations import Operations
from jobsched.domain import times
from jobsched.domain.keys import due_key_for, job_pk
from jobsched.domain.listing import MAX_LIST_READ, JobFilter, JobListing, ListOrder, StatusCounts
from jobsched.domain.models import MAX_CANCELLED_RUNS, MAX_FAN_OUT, Job, in_flight_key
from jobsched.domain.packs import PACK_TYPE, PackEntry
from jobsched.domain.records import Cursor, DuePage, IdempotencyRecord
from jobsched.domain.status import JobStatus
from jobsched.errors import Conflict, FanOutFull, TransientStoreError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

IDEMPOTENCY_HOURS = 24
# The job item's attributes a definition's save leaves as they are (the key, and the run-time ones).
_RUN_TIME = ("PK", "SK", "version", "dispatched", "created_at", "dependants", "in_flight", "cancelled_runs")


@dataclass
class JobStore(ShardLeases, Operations):
    """Jobs, idempotency records and shard leases in the jobs table."""

    client: DynamoDBClient
    table: str
    shard_count: int
    due_index: str = "due"
    tenant_index: str = "tenant_jobs"
    next_run_index: str = "tenant_next_run"
    reads: dict[str, int] = field(default_factory=lambda: {"due_items": 0})
    # Dependants a job may have: each edge's write conditions on the upstream's count (_edge).
    max_fan_out: int = MAX_FAN_OUT
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
        idempotency_key: str | None,
        request_hash: str,
        response: Mapping[str, Any],
        now: datetime,
    ) -> IdempotencyRecord | None:
        """Write the job (with its due-index entry), its idempotency record on the job item itself.

        The caller derives the job id from (tenant, key) (services.jobs.job_id_for_key), so the
        key's record is the job item: one conditional PutItem (1 WRU per item and index) does what
        a transaction of the job and a separate record did at twice the units for both. A
        transaction is kept only where more than one item must land together: the edges of a
        dependant (on its upstreams). A payload stored apart is immutable and content-addressed, so
        it is put first, alone: a crash after it leaves an unreferenced item, never a job without it.

        Returns None when written; when the id exists, returns the record it carries (the request's
        hash and first answer) and writes nothing. Raises Conflict when an upstream of `depends_on`
        is missing, another tenant's or cancelled.
        """
        job_item, stored_apart = job_items(job, shard_count=self.shard_count)
        if idempotency_key is not None:
            # ~150 bytes: the item stays one write unit at the sizes jobs have (see codec's payload cut).
            job_item["idem_hash"] = enc(request_hash)
            job_item["idem_response"] = enc(json.dumps(response, separators=(",", ":")))
        put: dict[str, Any] = {
            "TableName": self.table,
            "Item": job_item,
            "ConditionExpression": "attribute_not_exists(PK)",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if stored_apart:
            with aws_call(DYNAMODB):
                self.client.put_item(TableName=self.table, Item=stored_apart)
        if not job.depends_on:
            applied, old = conditional(self.client.put_item, **put)
            return None if applied else self._record_of(old or self._get(job_pk(job.job_id), "META"), job)
        # After the job: a refused edge's reason is read by its position (reasons[1:]).
        items: list[Any] = [{"Put": put}, *(self._edge(u, job, add=True) for u in job.depends_on)]
        try:
            with aws_call(DYNAMODB):
                self.client.transact_write_items(TransactItems=items)
        except Refused as exc:
            reasons = exc.reasons
            first = reasons[0] if reasons else {}
            if first.get("Code") == "ConditionalCheckFailed":
                return self._record_of(first.get("Item") or self._get(job_pk(job.job_id), "META"), job)
            edge_refused = [
                upstream
                for upstream, reason in zip(job.depends_on, reasons[1:], strict=False)
                if reason.get("Code") == "ConditionalCheckFailed"
            ]
            self._raise_if_full(edge_refused, job.job_id, exc)
            if edge_refused:
                raise Conflict(
                    f"depends_on: upstream job '{edge_refused[0]}' changed (cancelled?) "
                    "while this job was created",
                    field="depends_on",
                ) from exc
            raise TransientStoreError(
                "job creation was cancelled; retry with the same Idempotency-Key"
            ) from exc
        return None

    @staticmethod
    def _record_of(old: Mapping[str, Any] | None, job: Job) -> IdempotencyRecord:
        """The idempotency record an existing job item carries (its id was taken by its key)."""
        if not old or "idem_hash" not in old:
            # An id taken without a key (ids are random then: not a retry): nothing to answer.
            raise TransientStoreError(f"job id {job.job_id} is taken; retry") from None
        decoded = dec(old)
        return IdempotencyRecord(
            request_hash=decoded["idem_hash"], response=json.loads(decoded["idem_response"])
        )

    def _edge(self, upstream: str, job: Job, *, add: bool) -> dict[str, Any]:
        """A transaction item that records (or removes) the edge upstream -> job on the upstream.

        The fan-out cap is a conditional counter in the very write that adds the edge: the set of
        dependants is the count (size()), so no second number can drift from it, and two creates
        racing for the last place both read 99, but DynamoDB serializes their writes, so one fails
        its condition and its whole transaction, the job included, is cancelled:

            create A: check (service) 99 < 100 ...... write: size 99 < 100, ADD A -> 100
            create B: check (service) 99 < 100 ............................... write: size 100: refused
        """
        if add:
            room = any_of("attribute_not_exists(dependants)", "size(dependants) < :cap")
            return {
                "Update": {
                    "TableName": self.table,
                    "Key": {"PK": enc(job_pk(upstream)), "SK": enc("META")},
                    "UpdateExpression": "ADD dependants :me",
                    "ConditionExpression": all_of(
                        "attribute_exists(PK)", "tenant = :tenant", "#s <> :cancelled", room
                    ),
                    "ExpressionAttributeNames": {"#s": "status"},
                    "ExpressionAttributeValues": {
                        ":me": {"SS": [job.job_id]},
                        ":tenant": enc(job.tenant),
                        ":cancelled": enc(JobStatus.CANCELLED.value),
                        ":cap": enc(self.max_fan_out),
                    },
                }
            }
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"PK": enc(job_pk(upstream)), "SK": enc("META")},
                "UpdateExpression": "DELETE dependants :me",
                "ConditionExpression": "attribute_exists(PK)",
                "ExpressionAttributeValues": {":me": {"SS": [job.job_id]}},
            }
        }

    def _raise_if_full(self, upstreams: Sequence[str], job_id: str, exc: BaseException | None) -> None:
        """FanOutFull if one of `upstreams` (whose edge a transaction refused) has no room left.

        Read after the refusal, only to name the reason: the refusal itself was atomic."""
        for upstream in upstreams:
            up = self.get_job(upstream)
            if up is not None and job_id not in up.dependants and len(up.dependants) >= self.max_fan_out:
                raise FanOutFull(upstream, dependants=len(up.dependants), cap=self.max_fan_out) from exc

    def rewire(self, job: Job, *, expected_version: int, added: list[str], removed: list[str]) -> bool:
        """Save a dependent job's new definition and move its edges, in one transaction."""
        item = job_to_item(job, shard_count=self.shard_count)
        moves: list[Any] = [self._edge(u, job, add=True) for u in added]
        moves += [self._edge(u, job, add=False) for u in removed]
        applied = self._versioned_transaction(
            job.job_id,
            update="SET depends_on = :deps, root_schedule = :root, updated_at = :now ADD version :one",
            values={
                ":deps": item["depends_on"],
                ":root": item.get("root_schedule", enc("once")),
                ":now": item["updated_at"],
                ":one": enc(1),
                ":v": enc(expected_version),
            },
            others=moves,
        )
        if not applied:
            self._raise_if_full(added, job.job_id, None)
        return applied

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
            "Key": {"PK": enc(job_pk(job_id)), "SK": enc("META")},
            "UpdateExpression": update,
            "ConditionExpression": "version = :v",
            "ExpressionAttributeValues": values,
        }
        if names:
            job_update["ExpressionAttributeNames"] = names
        items: list[Any] = [{"Update": job_update}, *others]
        try:
            with aws_call(DYNAMODB):
                self.client.transact_write_items(TransactItems=items)
        except Refused:
            return False
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
        key = {"PK": dict(pk), "SK": enc(f"PAYLOAD#{ref}")}
        # Written before (or with) the job item and never changed, so an eventually consistent read
        # finds it unless it is only just written; then a consistent one does.
        for consistent in (False, True):
            with aws_call(DYNAMODB):
                got = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=consistent).get(
                    "Item"
                )
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
            ":expected": enc(times.stored(expected)),
            ":now": enc(times.stored(now)),
            ":n": enc(dispatched),
        }
        if next_run_at is None:
            update = "REMOVE next_run_at, due_key SET updated_at = :now ADD dispatched :n"
        else:
            update = "SET next_run_at = :next, due_key = :due, updated_at = :now ADD dispatched :n"
            values[":next"] = enc(times.stored(next_run_at))
            values[":due"] = enc(due_key_for(job_id, next_run_at, written=now, shards=self.shard_count))
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
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
        values: dict[str, Any] = {":t": enc(target.value), ":now": enc(times.stored(now))}
        values.update({f":s{i}": enc(s) for i, s in enumerate(src)})
        values_of_src = [f":s{i}" for i in range(len(src))]
        update = "SET #s = :t, updated_at = :now ADD version :one"
        values[":one"] = enc(1)
        removes = [
            *(("next_run_at", "due_key") if leave_index else ()),
            *(("active_run", "active_until", "active_message") if release_slot else ()),
        ]
        if removes:
            update += " REMOVE " + ", ".join(removes)
        applied, result = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
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
        definition = {k: v for k, v in item.items() if k not in _RUN_TIME}
        optional = (
            "name",
            "run_at",
            "cron_expr",
            "next_run_at",
            "due_key",
            "paused_at",
            "resume_from",
            "rescheduled",
            "payload",  # one of these two: inline, or stored apart
            "payload_ref",
            "handler",  # a python target's, or
            "target",  # any other's, and its type (the listing's filter)
            "target_type",
            "tags",
            "alerts",
            "concurrency",
            "compute",
            "lane",
        )
        names: dict[str, str] = {}
        values: dict[str, Any] = {":v": enc(expected_version), ":one": enc(1)}
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
    # holder that dies stops renewing its lease (active_until, its in_flight entry): its marker lapses.
    #
    #   run cancel (API, one run R)              R's start (any of its messages)
    #   ADD cancelled_runs R (ALL_NEW: no marker of R) -> R CANCELLED
    #                                            hold/count: R in cancelled_runs -> refused: no run
    #   -- or the other way round --
    #                                            hold/count -> marker of R
    #   ADD cancelled_runs R (ALL_NEW: a marker of R) -> R asked to stop (202)
    #
    # The run cancel wrote its row and answered 200 while a worker wrote its marker between the
    # cancel's read of the job and its write of the row (or read the row stale), and ran the handler
    # (tests/sim seed 80): now both meet on this item too, at the price of a condition.
    #
    #   counted runs (in_flight: one entry per run and message, each with its own until)
    #   run A: SET in_flight.<A#m1> = until   run B: SET in_flight.<B#m2> = until   (+1 in_flight_rev)
    #   A dies (its entry lapses at its until; m1 comes back and re-enters <A#m1>, then removes it)
    #   cancel: no entry -> CANCELLED; entries, all lapsed -> CANCELLED if in_flight_rev is still the
    #   one it read (no entry set or renewed since); any live entry -> refused -> 409
    #
    # A healthy run of a `skip` job does not release the slot when its lease runs out before the
    # job's next tick (a write saved per run); a tick that finds a live slot checks whether that run
    # is already finished and, if so, replaces it (`stale`) with a compare-and-set on its name.
    # A live buffered tick owns the next turn: no other tick takes the slot from under it.
    #
    # The named sub-conditions below are the rules of that timeline; each write is built from them.
    _EXISTS = "attribute_exists(PK)"
    _NOT_CANCELLED = "#s <> :cancelled"
    _RUN_NOT_CANCELLED = "NOT contains(cancelled_runs, :run)"  # no run cancel of :run (cancel_run)
    _SLOT_UNHELD = "attribute_not_exists(active_run)"
    _SLOT_LAPSED = "active_until < :now"  # its holder stopped renewing (died)
    _SLOT_THIS_MESSAGE = "active_run = :run AND active_message = :msg"  # a redelivery of the holder
    _SLOT_STALE = "active_run = :stale"  # held by a run known to be finished (see above)
    # No other live tick waits for the next turn: none waits, it is this tick, or its wait lapsed.
    _NO_OTHER_BUFFERED = any_of(
        "attribute_not_exists(buffered_run)", "buffered_run = :run", "buffered_until < :now"
    )
    # No run in flight at all (the cheap case); with entries, see cancel_job.
    _NO_IN_FLIGHT = any_of("attribute_not_exists(in_flight)", "size(in_flight) = :zero")
    _IN_FLIGHT_AS_READ = "in_flight_rev = :rev"  # no entry set or renewed since the read

    def _slot_free(self, *, stale: bool) -> str:
        """The slot may be taken by :run (message :msg): its holder's own message always re-enters it
        (SQS handed it out again); a free, lapsed or finished-holder slot only if no other buffered
        tick owns the next turn."""
        free = any_of(self._SLOT_UNHELD, self._SLOT_LAPSED, self._SLOT_STALE if stale else "")
        return any_of(self._SLOT_THIS_MESSAGE, all_of(free, self._NO_OTHER_BUFFERED))

    # A hold's write: the new holder, and the holder it replaces, read in the same write (the right
    # side of a SET reads the item as it was), so the record cannot be lost to a failed answer: a
    # taker whose receive died before keeping a dead holder's start on its row leaves this trace
    # for the holder's redelivery (Worker.process, tests/sim seed 603). "" when the slot was unheld.
    _HOLD = (
        "SET active_run = :run, active_until = :until, active_message = :msg,"
        " displaced_run = if_not_exists(active_run, :nobody),"
        " displaced_message = if_not_exists(active_message, :nobody)"
    )

    def _hold_values(self, run: str, message: str, until: datetime, now: datetime) -> dict[str, Any]:
        return {
            ":run": enc(run),
            ":msg": enc(message),
            ":until": enc(times.stored(until)),
            ":now": enc(times.stored(now)),
            ":cancelled": enc(JobStatus.CANCELLED.value),
            ":nobody": enc(""),
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
        update = self._HOLD
        values = self._hold_values(run, message, until, now)
        if stale is not None:
            values[":stale"] = enc(stale)
        condition = all_of(
            self._NOT_CANCELLED, self._RUN_NOT_CANCELLED, self._slot_free(stale=stale is not None)
        )
        if was_buffered:
            update += " REMOVE buffered_run, buffered_until, buffered_kind"
        return self._guarded_update(job_id, update, condition, values, {"#s": "status"})

    def hold_and_read(
        self, job_id: str, *, run: str, message: str, until: datetime, now: datetime
    ) -> tuple[bool, Job | None]:
        """hold_job (without the buffered slot) that also answers the job as it stood before the
        write (held or refused; ALL_OLD either way): (held, that job or None)."""
        applied, item = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
            UpdateExpression=self._HOLD,
            ConditionExpression=all_of(
                self._EXISTS, self._NOT_CANCELLED, self._RUN_NOT_CANCELLED, self._slot_free(stale=False)
            ),
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=self._hold_values(run, message, until, now),
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return applied, self._job(item) if item else None

    def restore_hold(
        self, job_id: str, *, run: str, message: str, taker: str, taker_message: str, until: datetime
    ) -> bool:
        """Hand the slot that `taker` took over (lapsed) back to its live holder `run`: a compare-and-set
        on the taker's name and message, so only the very receive that took it can give it back."""
        return self._guarded_update(
            job_id,
            "SET active_run = :run, active_until = :until, active_message = :msg",
            "active_run = :taker AND active_message = :taker_msg",
            {
                ":run": enc(run),
                ":msg": enc(message),
                ":until": enc(times.stored(until)),
                ":taker": enc(taker),
                ":taker_msg": enc(taker_message),
            },
        )

    def buffer_behind(self, job_id: str, *, run: str, kind: str, until: datetime, now: datetime) -> bool:
        """Take the job's one waiting slot for `run` until `until`: if free, ours, or lapsed."""
        return self._guarded_update(
            job_id,
            "SET buffered_run = :run, buffered_until = :until, buffered_kind = :kind",
            self._NO_OTHER_BUFFERED,
            {
                ":run": enc(run),
                ":kind": enc(kind),
                ":until": enc(times.stored(until)),
                ":now": enc(times.stored(now)),
            },
        )

    def release_job(self, job_id: str, *, run: str) -> Job | None:
        """Give the slot up if `run` holds it; the job as it stood (to wake its buffered tick), or None."""
        applied, item = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
            UpdateExpression="REMOVE active_run, active_until, active_message",
            ConditionExpression="active_run = :run",
            ExpressionAttributeValues={":run": enc(run)},
            ReturnValues="ALL_OLD",
        )
        return self._job(item) if applied and item else None

    def extend_hold(self, job_id: str, *, run: str, until: datetime) -> bool:
        """Push the active run's claim on the job to `until` (the heartbeat)."""
        return self._guarded_update(
            job_id,
            "SET active_until = :until",
            "active_run = :run",
            {":run": enc(run), ":until": enc(times.stored(until))},
        )

    def count_and_read(
        self, job_id: str, *, run: str, message: str, until: datetime, now: datetime
    ) -> tuple[bool, Job | None]:
        """Set the run's in-flight entry (never on a cancelled job); (counted, the job before or None).

        A job item written without the in_flight map (before it existed) gets it with its first
        entry: a nested SET needs the map, so the write that finds none writes the whole map.
        """
        key, until_value = in_flight_key(run, message), enc(times.stored(until))
        into_map = (
            "SET in_flight.#k = :until ADD in_flight_rev :one",
            "attribute_exists(in_flight)",
            {"#s": "status", "#k": key},
            {":until": until_value},
        )
        new_map = (
            "SET in_flight = :entry ADD in_flight_rev :one",
            "attribute_not_exists(in_flight)",
            {"#s": "status"},
            {":entry": {"M": {key: until_value}}},
        )
        item: dict[str, Any] = {}
        applied = False
        # (A first entry that lost the race to make the map goes into the map the winner made.)
        for update, has_map, names, values in (into_map, new_map, into_map):
            applied, item = conditional(
                self.client.update_item,
                TableName=self.table,
                Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
                UpdateExpression=update,
                ConditionExpression=all_of(
                    self._EXISTS, self._NOT_CANCELLED, self._RUN_NOT_CANCELLED, has_map
                ),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={
                    **values,
                    ":one": enc(1),
                    ":cancelled": enc(JobStatus.CANCELLED.value),
                    ":run": enc(run),
                },
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            if applied or not item or item["status"] == enc(JobStatus.CANCELLED.value):
                break
            if run in item.get("cancelled_runs", {}).get("SS", ()):
                break  # a run cancel of this run: refused for good
        return applied, self._job(item) if item else None

    def uncount(self, job_id: str, *, run: str, message: str) -> bool:
        """The run's in-flight entry is over (whatever its outcome)."""
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
            UpdateExpression="REMOVE in_flight.#k",
            ConditionExpression="attribute_exists(in_flight.#k)",
            ExpressionAttributeNames={"#k": in_flight_key(run, message)},
        )[0]

    def extend_count(self, job_id: str, *, run: str, message: str, until: datetime) -> bool:
        """Push the run's in-flight entry to `until` (its heartbeat)."""
        return self._guarded_update(
            job_id,
            "SET in_flight.#k = :until ADD in_flight_rev :one",
            "attribute_exists(in_flight.#k)",
            {":until": enc(times.stored(until)), ":one": enc(1)},
            {"#k": in_flight_key(run, message)},
        )

    def cancel_run(self, job_id: str, *, run: str) -> Job | None:
        """ADD `run` to cancelled_runs (one UpdateItem, ALL_NEW: the markers as they stand after it);
        over MAX_CANCELLED_RUNS entries, a second write DELETEs the oldest ticks but `run`."""
        applied, item = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
            UpdateExpression="ADD cancelled_runs :runs",
            ConditionExpression=self._EXISTS,
            ExpressionAttributeValues={":runs": {"SS": [run]}},
            ReturnValues="ALL_NEW",
        )
        if not applied or not item:
            return None
        job = self._job(item)
        older = sorted(job.cancelled_runs - {run}, reverse=True)[MAX_CANCELLED_RUNS - 1 :]
        if older:
            self._guarded_update(job_id, "DELETE cancelled_runs :old", self._EXISTS, {":old": {"SS": older}})
            job = job.model_copy(update={"cancelled_runs": job.cancelled_runs - set(older)})
        return job

    def cancel_job(self, job_id: str, *, now: datetime, stale: str | None) -> tuple[bool, Job | None]:
        """SCHEDULED|PAUSED -> CANCELLED, only while no run has a live start marker (see above).

        `stale`: the slot's holder, known to be finished. Returns (applied, the job after or as it stood).
        """
        values: dict[str, Any] = {
            ":t": enc(JobStatus.CANCELLED.value),
            ":s0": enc(JobStatus.SCHEDULED.value),
            ":s1": enc(JobStatus.PAUSED.value),
            ":now": enc(times.stored(now)),
            ":one": enc(1),
            ":zero": enc(0),
        }
        no_live_slot = any_of(self._SLOT_UNHELD, self._SLOT_LAPSED, self._SLOT_STALE if stale else "")
        if stale:
            values[":stale"] = enc(stale)
        update = "SET #s = :t, updated_at = :now ADD version :one REMOVE next_run_at, due_key"
        no_run_in_flight = self._NO_IN_FLIGHT
        for _ in range(2):
            applied, result = conditional(
                self.client.update_item,
                TableName=self.table,
                Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
                UpdateExpression=update,
                ConditionExpression=all_of(self._EXISTS, "#s IN (:s0, :s1)", no_live_slot, no_run_in_flight),
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            stood = self._job(result) if result else None
            if applied or stood is None or no_run_in_flight != self._NO_IN_FLIGHT:
                break
            if not stood.in_flight or any(until >= now for until in stood.in_flight.values()):
                break  # refused for another reason, or a run is in flight: 409
            # Every entry lapsed (their receives died): cancel if none was set or renewed since.
            no_run_in_flight = self._IN_FLIGHT_AS_READ
            values[":rev"] = result.get("in_flight_rev", enc(0))
            del values[":zero"]  # (DynamoDB refuses a value the expression does not use)
        return applied, stood

    def _guarded_update(
        self,
        job_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        names: dict[str, str] | None = None,
    ) -> bool:
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc("META")},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
            **kwargs,
        )[0]

    # -- the due index --------------------------------------------------------------------------
    # -- the listing indexes ------------------------------------------------------------------------
    def count_jobs(self, tenant: str, *, statuses: Iterable[JobStatus], stop_at: int) -> int:
        """A COUNT query of the tenant's partition of the listing index, filtered by status, page by
        page until the count reaches stop_at or the partition ends. The index's items are ~100
        bytes (LISTING_ATTRIBUTES), so 10,000 jobs are about 1 MB read: ~125 eventually consistent
        read units, paid on a create only (max_jobs); the count may lag a create by the index's lag."""
        values: dict[str, Any] = {":t": enc(tenant)}
        wanted = sorted(s.value for s in statuses)
        values.update({f":s{i}": enc(s) for i, s in enumerate(wanted)})
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": self.tenant_index,
            "KeyConditionExpression": "#tenant = :t",
            "FilterExpression": f"#status IN ({', '.join(f':s{i}' for i in range(len(wanted)))})",
            "ExpressionAttributeNames": {"#tenant": "tenant", "#status": "status"},
            "ExpressionAttributeValues": values,
            # A packed batch's cursor item stands for `pack_count` jobs (SCHEDULED until its last job
            # is handed over); a job item for one. The same items read as a COUNT, billed alike.
            "ProjectionExpression": "pack_count",
        }
        count = 0
        while True:
            with aws_call(DYNAMODB):
                out = self.client.query(**kwargs)
            count += sum(int(i["pack_count"]["N"]) if "pack_count" in i else 1 for i in out.get("Items", []))
            if count >= stop_at or "LastEvaluatedKey" not in out:
                return count
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def count_by_status(self, tenant: str, *, where: JobFilter, stop_at: int) -> StatusCounts:
        """One read of the tenant's partition of the listing index, newest first, projecting `status`
        only and tallied here (one Query per status would read the partition once per status), page
        by page until the partition ends or `stop_at` items were read. DynamoDB bills the items read,
        not the projection: ~100 bytes each (LISTING_ATTRIBUTES), so MAX_COUNT_READ (10,000) is
        about 1 MB, ~125 eventually consistent read units."""
        names, values, filters = _listing_filter(tenant, where.model_copy(update={"status": None}))
        names["#status"] = "status"
        names["#type"] = "type"
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": self.tenant_index,
            "KeyConditionExpression": "#tenant = :t",
            "ProjectionExpression": "#status, #type, job_id, created_at, pack_count",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
        }
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
        counts: dict[str, int] = {}
        packs: list[PackEntry] = []
        read = 0
        while True:
            # Limit counts items read before the filter: never past stop_at.
            kwargs["Limit"] = stop_at - read
            with aws_call(DYNAMODB):
                out = self.client.query(**kwargs)
            read += int(out.get("ScannedCount", 0))
            for item in out.get("Items", []):
                if item.get("type", {}).get("S") == PACK_TYPE:
                    packs.append(_pack_entry(item, tenant))
                    continue
                status = item["status"]["S"]
                counts[status] = counts.get(status, 0) + 1
            last = out.get("LastEvaluatedKey")
            if not last or read >= stop_at:
                return StatusCounts(counts=counts, complete=not last, items_read=read, packs=tuple(packs))
            kwargs["ExclusiveStartKey"] = last

    def list_jobs(
        self, tenant: str, *, order: ListOrder, where: JobFilter, cursor: Cursor | None, limit: int
    ) -> JobListing:
        """A page of the tenant's jobs from its listing index, then the page's job items (one batch).

        The index answers keys and the filter's attributes only (so a run's writes to its job never
        rewrite it); the FilterExpression drops items after they are read, so the reads go on until
        the page is full, the partition ends, or MAX_LIST_READ items were read (a short page with a
        cursor). Eventually consistent, as any index: a job created a moment ago may be missing.
        """
        names, values, filters = _listing_filter(tenant, where)
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": self.tenant_index if order == "created" else self.next_run_index,
            "KeyConditionExpression": "#tenant = :t",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": order != "created",
        }
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
        if cursor:
            kwargs["ExclusiveStartKey"] = cursor
        key_names = ("PK", "SK", "tenant", "created_at" if order == "created" else "next_run_at")
        found: list[str | PackEntry] = []
        before: list[Cursor | None] = []
        previous: Cursor | None = cursor
        read = 0
        last: dict[str, Any] | None = None
        while len(found) < limit and read < MAX_LIST_READ:
            # Limit counts items read, before the filter: never more than the page still needs,
            # so the cursor is exactly after the last item answered.
            kwargs["Limit"] = min(limit - len(found), MAX_LIST_READ - read)
            with aws_call(DYNAMODB):
                out = self.client.query(**kwargs)
            read += int(out.get("ScannedCount", 0))
            for i in out.get("Items", []):
                found.append(
                    _pack_entry(i, tenant) if i.get("type", {}).get("S") == PACK_TYPE else i["job_id"]["S"]
                )
                before.append(previous)
                previous = {k: i[k] for k in key_names}
            last = dict(out["LastEvaluatedKey"]) if out.get("LastEvaluatedKey") else None
            if last is None:
                break
            kwargs["ExclusiveStartKey"] = last
        jobs = self._batch_jobs([f for f in found if isinstance(f, str)])
        entries: list[Job | PackEntry] = []
        kept_before: list[Cursor | None] = []
        for f, b in zip(found, before, strict=True):
            entry = f if isinstance(f, PackEntry) else jobs.get(f)
            if entry is not None:
                entries.append(entry)
                kept_before.append(b)
        return JobListing(
            entries=entries,
            cursor=last,
            items_read=read,
            truncated=last is not None and len(found) < limit,
            before=kept_before,
        )

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The jobs of `job_ids` that exist, in one consistent BatchGetItem; payloads stored apart
        are not read."""
        return self._batch_jobs(list(dict.fromkeys(job_ids)))

    def _batch_jobs(self, job_ids: list[str]) -> dict[str, Job]:
        """The job items of `job_ids` (at most 100: one BatchGetItem, repeated for unprocessed keys).

        A payload stored apart is not read: a listing shows no payload.
        """
        found: dict[str, Job] = {}
        keys = [{"PK": enc(job_pk(i)), "SK": enc("META")} for i in job_ids]
        request: dict[str, Any] = {self.table: {"Keys": keys, "ConsistentRead": True}} if keys else {}
        while request:
            with aws_call(DYNAMODB):
                out = self.client.batch_get_item(RequestItems=request)
            for raw in out.get("Responses", {}).get(self.table, []):
                job = job_from_item(raw, payload={})
                found[job.job_id] = job
            request = dict(out.get("UnprocessedKeys") or {})
        return found

    def due_page(
        self, due_key: str, *, until: datetime, cursor: dict[str, Any] | None, limit: int
    ) -> DuePage:
        """One page of the entries of `due_key` with next_run_at <= until, oldest first."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": self.due_index,
            "KeyConditionExpression": "due_key = :k AND next_run_at <= :until",
            "ExpressionAttributeValues": {":k": enc(due_key), ":until": enc(times.stored(until))},
            "Limit": limit,
        }
        if cursor:
            kwargs["ExclusiveStartKey"] = cursor
        with aws_call(DYNAMODB):
            out = self.client.query(**kwargs)
        self.reads["due_items"] += int(out.get("ScannedCount", 0))
        return DuePage(
            entries=[due_entry_from_item(i) for i in out.get("Items", [])],
            cursor=out.get("LastEvaluatedKey"),
            items_read=int(out.get("ScannedCount", 0)),
        )

    # -- helpers ----------------------------------------------------------------------------------
    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        with aws_call(DYNAMODB):
            out = self.client.get_item(
                TableName=self.table, Key={"PK": enc(pk), "SK": enc(sk)}, ConsistentRead=True
            )
        item = out.get("Item")
        return dict(item) if item else None


def _pack_entry(item: Mapping[str, Any], tenant: str) -> PackEntry:
    """A packed batch's cursor item, as a listing-index read answers it."""
    return PackEntry(
        pack_id=item["job_id"]["S"].removeprefix("pack_"),
        tenant=tenant,
        created_at=times.parse_stored(item["created_at"]["S"]) if "created_at" in item else None,
        next_run_at=times.parse_stored(item["next_run_at"]["S"]) if "next_run_at" in item else None,
        # (an index created before packs does not project it: the expansion reads the pack anyway)
        count=int(item["pack_count"]["N"]) if "pack_count" in item else 0,
    )


def _listing_filter(tenant: str, where: JobFilter) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    """A listing-index Query's names, values and filter conditions: the tenant's partition, `where`."""
    names: dict[str, str] = {"#tenant": "tenant"}
    values: dict[str, Any] = {":t": enc(tenant)}
    filters: list[str] = []
    for attr, value in (("status", where.status), ("type", where.type)):
        if value is not None:
            names[f"#{attr}"], values[f":{attr}"] = attr, enc(value)
            filters.append(f"#{attr} = :{attr}")
    if where.name_prefix is not None:
        names["#name"], values[":name"] = "name", enc(where.name_prefix)
        filters.append("begins_with(#name, :name)")
    if where.target is not None:
        names["#tt"], values[":tt"] = "target_type", enc(where.target)
        # A python target's type is not stored (codec.job_items): absent means python.
        filters.append(
            "(attribute_not_exists(#tt) OR #tt = :tt)" if where.target == "python" else "#tt = :tt"
        )
    if (pair := where.tag_pair()) is not None:
        names["#tags"], names["#tk"], values[":tv"] = "tags", pair[0], enc(pair[1])
        filters.append("#tags.#tk = :tv")
    if filters:
        # A packed batch's cursor item passes whatever the filter: it stands for jobs the index does
        # not hold, which services/packs.py filters one by one.
        names["#type"], values[":pack"] = "type", enc(PACK_TYPE)
        filters = [any_of("#type = :pack", all_of(*filters))]
    return names, values, filters
