"""Run rows in the runs table: one per (job_id, scheduled_for), moved along the legal edges only.

Every run-status change is one conditional UpdateItem whose condition is "the stored status is a
legal source of the target" (jobsched.domain.status), plus the lease owner where a lease is held:
a stale or racing process loses the compare-and-set and is told what the row holds now
(ReturnValuesOnConditionCheckFailure), never overwrites it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import aws_call
from jobsched.adapters.dynamodb.codec import (
    attempt_record,
    dead_letter_from_item,
    dec,
    enc,
    execution_from_item,
    execution_or_none,
)
from jobsched.adapters.dynamodb.conditions import DYNAMODB, all_of, any_of, conditional
from jobsched.domain import times
from jobsched.domain.keys import job_pk, run_id_for, run_sk
from jobsched.domain.models import Execution
from jobsched.domain.records import (
    RUN_HISTORY_DAYS,
    AttemptEnd,
    Cursor,
    DeadLetter,
    Lease,
    NewRun,
    Transition,
)
from jobsched.domain.status import HELD, MAY_START, UNSTARTED_RECORDS, RunStatus, check_path, sources_of

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient



def pending_item(
    *, job_id: str, tenant: str, scheduled_for: datetime, now: datetime, kind: str = "scheduled"
) -> dict[str, Any]:
    """A new run row, PENDING at attempt 0 (put_pending's item; a packed job's materialization's)."""
    return {
        "PK": enc(job_pk(job_id)),
        "SK": enc(run_sk(times.stored(scheduled_for))),
        "run_id": enc(run_id_for(job_id, scheduled_for)),
        "job_id": enc(job_id),
        "tenant": enc(tenant),
        "scheduled_for": enc(times.stored(scheduled_for)),
        "status": enc(RunStatus.PENDING.value),
        "attempt": enc(0),
        "kind": enc(kind),
        "created_at": enc(times.stored(now)),
        "updated_at": enc(times.stored(now)),
        "expires_at": enc(int((scheduled_for + timedelta(days=RUN_HISTORY_DAYS)).timestamp())),
    }


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
        item = pending_item(job_id=job_id, tenant=tenant, scheduled_for=scheduled_for, now=now, kind=kind)
        if skipped:
            item["status"] = enc(RunStatus.SKIPPED.value)
            item["reason"] = enc(skipped)
        applied, old = conditional(
            self.client.put_item,
            TableName=self.table,
            Item=item,
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not applied:
            return Transition(applied=False, row=execution_or_none(old) or self.get(job_id, sf))
        return Transition(applied=True, row=execution_from_item(item))

    @staticmethod
    def _created(new: NewRun) -> dict[str, str | int]:
        """The attributes a run row is created with when its first write is a transition."""
        scheduled_for = times.parse_stored(new.scheduled_for)
        return {
            "run_id": run_id_for(new.job_id, scheduled_for),
            "job_id": new.job_id,
            "tenant": new.tenant,
            "scheduled_for": new.scheduled_for,
            "kind": new.kind,
            "expires_at": int((scheduled_for + timedelta(days=RUN_HISTORY_DAYS)).timestamp()),
        }

    def get_many(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Execution]:
        """The rows of `keys` that exist: BatchGetItem, 100 keys a call, eventually consistent (half the
        price), unprocessed keys asked again."""
        found: dict[tuple[str, str], Execution] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 100):
            chunk = [{"PK": enc(job_pk(j)), "SK": enc(run_sk(sf))} for j, sf in unique[start : start + 100]]
            request: dict[str, Any] = {self.table: {"Keys": chunk, "ConsistentRead": False}}
            while request:
                with aws_call(DYNAMODB):
                    out = self.client.batch_get_item(RequestItems=request)
                for raw in out.get("Responses", {}).get(self.table, []):
                    row = execution_from_item(raw)
                    found[(row.job_id, times.stored(row.scheduled_for))] = row
                request = dict(out.get("UnprocessedKeys") or {})
        return found

    def get(self, job_id: str, scheduled_for: datetime | str, *, consistent: bool = True) -> Execution | None:
        """The run for one firing (scheduled_for as an instant or in stored form), or None.

        Read consistently unless told otherwise: an eventually consistent read may miss a row
        written just before, or show it as it stood before its latest write.
        """
        sf = scheduled_for if isinstance(scheduled_for, str) else times.stored(scheduled_for)
        with aws_call(DYNAMODB):
            out = self.client.get_item(
                TableName=self.table,
                Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(sf))},
                ConsistentRead=consistent,
            )
        return execution_or_none(out.get("Item"))

    # -- the run's edges, one method per use (each a _transition: one legal-edge check) -------------
    #
    #   fast path (idempotent job, healthy run)     leased path (takeover, idempotent: false)
    #   (no write while the handler runs short)     claim:  PENDING|lapsed -> LEASED, attempt + 1
    #   persist_running (first heartbeat):          start:  LEASED -> RUNNING (holder only)
    #       PENDING -> LEASED -> RUNNING, attempt+1  record: RUNNING -> SUCCEEDED|FAILED (holder)
    #   record_unleased (no heartbeat came):        lose:   LEASED|RUNNING -> LOST (holder)
    #       PENDING -> ... -> SUCCEEDED|FAILED
    #   skip: PENDING (or absent) -> SKIPPED        cancel: PENDING (or absent) -> CANCELLED
    def claim(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        lease: Lease,
        now: datetime,
        create: NewRun | None = None,
        packed: bool = False,
    ) -> Transition:
        """PENDING -> LEASED for `lease`, attempt + 1; also a held run whose lease lapsed (its holder
        died: the takeover), and an absent row when `create` is given. Refused: the row as it stood.
        `packed`: refused by a row flagged `materialized` (its job has an item of its own now)."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=RunStatus.LEASED,
            now=now,
            set_values=_lease_values(lease),
            increment_attempt=True,
            takeover_expired_lease=True,
            create_if_missing=create,
            unflagged=packed,
        )

    def start(self, job_id: str, scheduled_for: str, *, owner: str, now: datetime) -> Transition:
        """LEASED -> RUNNING by the lease holder `owner`, started at `now`."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=RunStatus.RUNNING,
            now=now,
            owner=owner,
            set_values={"started_at": times.stored(now)},
        )

    def record(self, job_id: str, scheduled_for: str, *, owner: str, end: AttemptEnd) -> Transition:
        """RUNNING -> SUCCEEDED|FAILED by the lease holder `owner`; the attempt joins the history."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=end.status,
            now=end.finished_at,
            owner=owner,
            set_values=_end_values(end),
            append_attempt=_attempt_values(end),
        )

    def persist_running(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        lease: Lease,
        started_at: datetime,
        now: datetime,
        create: NewRun,
        packed: bool = False,
    ) -> Transition:
        """The fast path's first heartbeat: PENDING (or absent) -> LEASED -> RUNNING in one write,
        attempt + 1, so a run that lasts is visible and its lease can be taken over; a packed job's
        start (`packed`: refused by a row flagged `materialized`)."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=RunStatus.RUNNING,
            via=(RunStatus.LEASED,),
            now=now,
            set_values={**_lease_values(lease), "started_at": times.stored(started_at)},
            increment_attempt=True,
            create_if_missing=create,
            unflagged=packed,
        )

    def record_unleased(
        self, job_id: str, scheduled_for: str, *, worker: str, end: AttemptEnd, create: NewRun
    ) -> Transition:
        """The fast path's one write: PENDING (or absent) -> LEASED -> RUNNING -> SUCCEEDED|FAILED,
        attempt + 1; refused (the row as it stood) when another delivery holds or recorded it."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=end.status,
            via=(RunStatus.LEASED, RunStatus.RUNNING),
            now=end.finished_at,
            set_values={"worker": worker, "started_at": times.stored(end.started_at), **_end_values(end)},
            increment_attempt=True,
            create_if_missing=create,
            append_attempt=_attempt_values(end),
            supersede_unstarted=True,
        )

    def skip(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        reason: str,
        now: datetime,
        create: NewRun,
        first_attempt_only: bool = True,
    ) -> Transition:
        """PENDING (or absent) -> SKIPPED with `reason`; by default only before any attempt started."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=RunStatus.SKIPPED,
            now=now,
            set_values={"reason": reason},
            first_attempt_only=first_attempt_only,
            create_if_missing=create,
        )

    def note_wait(
        self, job_id: str, scheduled_for: str, *, reason: str, now: datetime, create: NewRun
    ) -> int | None:
        """A run that may still start (or no row: created PENDING, attempt 0, like put_pending's
        row) keeps `reason` and counts the wait (`waits`), in one conditional update. Answers the
        count; None when the run is over (refused: nothing written). Not a status change, so not a
        _transition: the status stays as it is."""
        may_start = sorted(s.value for s in MAY_START)
        names = {"#s": "status"}
        values: dict[str, Any] = {
            ":pending": enc(RunStatus.PENDING.value),
            ":reason": enc(reason),
            ":now": enc(times.stored(now)),
            ":zero": enc(0),
            ":one": enc(1),
            **{f":m{i}": enc(status) for i, status in enumerate(may_start)},
        }
        sets = [
            "#s = if_not_exists(#s, :pending)",
            "attempt = if_not_exists(attempt, :zero)",
            "created_at = if_not_exists(created_at, :now)",
            "reason = :reason",
            "updated_at = :now",
            "waits = if_not_exists(waits, :zero) + :one",
        ]
        for i, (key, value) in enumerate(sorted(self._created(create).items())):
            names[f"#c{i}"] = key
            values[f":c{i}"] = enc(value)
            sets.append(f"#c{i} = if_not_exists(#c{i}, :c{i})")
        applied, result = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression=any_of(
                "attribute_not_exists(PK)",
                f"#s IN ({', '.join(f':m{i}' for i in range(len(may_start)))})",
            ),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="UPDATED_NEW",
        )
        if not applied:
            return None
        return int(dec(result).get("waits", 1))

    def mark_upstream_failed(self, created: NewRun, *, reason: str, now: datetime) -> bool:
        """The failure workflow's MarkUpstreamFailed (jobsched.asl), from the api: one conditional
        write that creates the row UPSTREAM_FAILED, refused when the run has a row already."""
        applied, _ = conditional(
            self.client.put_item,
            TableName=self.table,
            Item={
                "PK": enc(job_pk(created.job_id)),
                "SK": enc(run_sk(created.scheduled_for)),
                **{k: enc(v) for k, v in self._created(created).items()},
                "status": enc(RunStatus.UPSTREAM_FAILED.value),
                "reason": enc(reason),
                "attempt": enc(0),
                "created_at": enc(times.stored(now)),
                "updated_at": enc(times.stored(now)),
            },
            ConditionExpression="attribute_not_exists(PK)",
        )
        return applied

    def cancel(
        self, job_id: str, scheduled_for: str, *, now: datetime, create: NewRun | None = None
    ) -> Transition:
        """PENDING (or absent, when `create` is given, or held under an expired lease: its worker
        died, RUNNING -> PENDING -> CANCELLED) -> CANCELLED: the run never starts (again)."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=RunStatus.CANCELLED,
            now=now,
            takeover_expired_lease=True,
            create_if_missing=create,
        )

    def lose(
        self, job_id: str, scheduled_for: str, *, owner: str, now: datetime, error: tuple[str, str]
    ) -> Transition:
        """LEASED|RUNNING -> LOST by `owner`: a run whose worker died, not re-run automatically."""
        return self._transition(
            job_id=job_id,
            scheduled_for=scheduled_for,
            target=RunStatus.LOST,
            now=now,
            owner=owner,
            set_values={"error_type": error[0], "error_message": error[1]},
        )

    def _transition(
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
        create_if_missing: NewRun | None = None,
        append_attempt: Mapping[str, str | int] | None = None,
        first_attempt_only: bool = False,
        via: Sequence[RunStatus] = (),
        supersede_unstarted: bool = False,
        unflagged: bool = False,
    ) -> Transition:
        """Move one run to `target` if its stored status is a legal source of it (the one legal-edge check).

        `owner`: the transition also requires the stored lease_owner to be this owner (moves
        out of LEASED/RUNNING are the lease holder's alone). `takeover_expired_lease`: a run
        still LEASED/RUNNING whose lease expired counts as PENDING (the RUNNING -> PENDING ->
        LEASED crash-recovery path, applied in one write). `create_if_missing`: the row may not
        exist yet and is created as this new run. `via`: the run passes through these
        statuses on its way to `target` in this one write (each step a legal edge, checked here),
        so the legal sources are those of via[0]: a worker's fast path records PENDING -> LEASED
        -> RUNNING -> SUCCEEDED in one write when no one could have observed the steps between.
        """
        first = via[0] if via else target
        for source in sources_of(first):
            check_path(source, *via, target)
        names = {"#s": "status"}
        values: dict[str, Any] = {":t": enc(target.value), ":now": enc(times.stored(now))}
        sources = sorted(s.value for s in sources_of(first))
        values.update({f":src{i}": enc(s) for i, s in enumerate(sources)})
        # The write is allowed when ONE of these holds:
        #   at_a_source    the row stands at a legal source of the path's first step, and
        #                  (owner) its lease is this owner's: moves out of a lease are its holder's;
        #                  (first_attempt_only) no attempt started yet: a retry is never skipped;
        #   lease_lapsed   (takeover) the row is held, but its holder stopped renewing: it died;
        #   absent         (create) there is no row yet: this write creates it;
        #   unstarted      (supersede) the row says the run never started (UNSTARTED_RECORDS, no
        #                  attempt): this attempt ran unseen, and its record replaces that one.
        at_a_source = [f"#s IN ({', '.join(f':src{i}' for i in range(len(sources)))})"]
        if owner is not None and first not in (RunStatus.LEASED,):
            at_a_source.append("lease_owner = :owner")
            values[":owner"] = enc(owner)
        if first_attempt_only:
            at_a_source.append("attempt = :attempt0")
            values[":attempt0"] = enc(0)
        allowed = [all_of(*at_a_source)]
        if takeover_expired_lease:
            held = sorted(s.value for s in HELD)
            values.update({f":held{i}": enc(s) for i, s in enumerate(held)})
            allowed.append(
                all_of(f"#s IN ({', '.join(f':held{i}' for i in range(len(held)))})", "lease_until < :now")
            )
        if supersede_unstarted:
            unstarted = sorted(s.value for s in UNSTARTED_RECORDS)
            values.update({f":unst{i}": enc(s) for i, s in enumerate(unstarted)})
            values[":attempt0"] = enc(0)
            allowed.append(
                all_of(
                    f"#s IN ({', '.join(f':unst{i}' for i in range(len(unstarted)))})",
                    any_of("attribute_not_exists(attempt)", "attempt = :attempt0"),
                )
            )
        sets = ["#s = :t", "updated_at = :now"]
        if create_if_missing is not None:
            allowed.append("attribute_not_exists(PK)")
            for i, (key, value) in enumerate(sorted(self._created(create_if_missing).items())):
                names[f"#c{i}"] = key
                values[f":c{i}"] = enc(value)
                sets.append(f"#c{i} = if_not_exists(#c{i}, :c{i})")
        for i, (key, value) in enumerate(sorted((set_values or {}).items())):
            names[f"#v{i}"] = key
            values[f":v{i}"] = enc(value)
            sets.append(f"#v{i} = :v{i}")
        if increment_attempt:
            values[":zero"], values[":one"] = enc(0), enc(1)
            sets.append("attempt = if_not_exists(attempt, :zero) + :one")
        if append_attempt is not None:
            values[":rec"], values[":none"] = attempt_record(append_attempt), {"L": []}
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
        if unflagged:
            names["#mat"] = "materialized"  # a reserved word: by its alias
        applied, result = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
            UpdateExpression=update,
            # `unflagged`: a packed start never takes a row whose job was materialized (domain.packs).
            ConditionExpression=(
                all_of(any_of(*allowed), "attribute_not_exists(#mat)") if unflagged else any_of(*allowed)
            ),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not applied:
            return Transition(applied=False, row=execution_or_none(result))
        # ReturnValues can give ALL_OLD or ALL_NEW, not both; the row after the write is the
        # previous row with our SETs applied, which a read-back would only confirm at a cost.
        return Transition(applied=True, previous=execution_or_none(result))

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
        applied, result = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
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
                ":failed": enc(RunStatus.FAILED.value),
                ":p": enc(RunStatus.PENDING.value),
                ":l": enc(RunStatus.LEASED.value),
                ":r": enc(RunStatus.RUNNING.value),
                ":et": enc(error_type),
                ":em": enc(error_message),
                ":now": enc(stamp),
                ":rid": enc(run_id_for(job_id, job_sf)),
                ":jid": enc(job_id),
                ":tenant": enc(tenant),
                ":sf": enc(scheduled_for),
                ":zero": enc(0),
                ":none": {"L": []},
                ":rec": attempt_record(
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
        self, *, dl_key: str, start: Cursor | None, limit: int, job_id: str | None
    ) -> tuple[list[DeadLetter], Cursor | None]:
        """Up to `limit` dead-letter entries of a tenant, newest first, and the key to continue from.

        The dead-letter index is a GSI: eventually consistent, so a run dead-lettered a moment ago
        may be missing from it. A FilterExpression on job_id may make a page shorter than `limit`
        while there is more: the reads go on until the page is full or the index is exhausted.
        """
        rows: list[DeadLetter] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "dead_letter",
            "KeyConditionExpression": "dl_key = :k",
            "ExpressionAttributeValues": {":k": enc(dl_key)},
            "ScanIndexForward": False,
        }
        if job_id:
            kwargs["FilterExpression"] = "job_id = :job"
            kwargs["ExpressionAttributeValues"][":job"] = enc(job_id)
        if start:
            kwargs["ExclusiveStartKey"] = start
        while True:
            kwargs["Limit"] = limit - len(rows)
            with aws_call(DYNAMODB):
                out = self.client.query(**kwargs)
            rows.extend(dead_letter_from_item(dec(i)) for i in out.get("Items", []))
            last = out.get("LastEvaluatedKey")
            if not last or len(rows) >= limit:
                return rows, dict(last) if last else None
            kwargs["ExclusiveStartKey"] = last

    def extend_lease(self, *, job_id: str, scheduled_for: str, owner: str, until: datetime) -> bool:
        """Push the lease of a held run to `until`; False if `owner` no longer holds it."""
        held = sorted(s.value for s in HELD)
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
            UpdateExpression="SET lease_until = :until",
            ConditionExpression="lease_owner = :me AND #s IN (:h0, :h1)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":until": enc(times.stored(until)),
                ":me": enc(owner),
                ":h0": enc(held[0]),
                ":h1": enc(held[1]),
            },
        )[0]

    def save_progress(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        owner: str,
        now: datetime,
        progress: str | None = None,
        checkpoint: str | None = None,
    ) -> bool:
        """Keep a held run's progress and/or checkpoint, conditional on its lease owner (a worker that
        lost the run to a takeover writes nothing over the taker's)."""
        held = sorted(s.value for s in HELD)
        values: dict[str, Any] = {
            ":now": enc(times.stored(now)),
            ":me": enc(owner),
            ":h0": enc(held[0]),
            ":h1": enc(held[1]),
        }
        sets = []
        if progress is not None:
            values[":progress"] = enc(progress)
            sets += ["progress = :progress", "progress_at = :now"]
        if checkpoint is not None:
            values[":checkpoint"] = enc(checkpoint)
            sets += ["checkpoint = :checkpoint", "checkpoint_at = :now"]
        if not sets:
            return True
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression="lease_owner = :me AND #s IN (:h0, :h1)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=values,
        )[0]

    def note_task(self, job_id: str, scheduled_for: str, *, owner: str, task_arn: str) -> bool:
        """Append a task to a held run's ecs_tasks, conditional on its lease owner and on the task
        not being there yet (a list of strings, not a set: a set keeps no order, and `contains` on a
        list of strings makes the append idempotent: an adopter notes the task its dead worker did)."""
        held = sorted(s.value for s in HELD)
        return conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
            UpdateExpression="SET ecs_tasks = list_append(if_not_exists(ecs_tasks, :none), :task)",
            ConditionExpression=all_of(
                "lease_owner = :me",
                "#s IN (:h0, :h1)",
                any_of("attribute_not_exists(ecs_tasks)", "NOT contains(ecs_tasks, :arn)"),
            ),
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":me": enc(owner),
                ":h0": enc(held[0]),
                ":h1": enc(held[1]),
                ":arn": enc(task_arn),
                ":task": {"L": [enc(task_arn)]},
                ":none": {"L": []},
            },
        )[0]

    def request_cancel(
        self,
        job_id: str,
        scheduled_for: str,
        *,
        now: datetime,
        pending_too: bool = False,
        create: NewRun | None = None,
    ) -> Transition:
        """Mark a LEASED|RUNNING (or PENDING) run cancel-requested, in one conditional write on its
        status; with `create`, a missing row is created PENDING (attempt 0) and marked in the same write."""
        held = sorted(s.value for s in HELD)
        pending = RunStatus.PENDING.value if pending_too else held[0]
        names = {"#s": "status"}
        values: dict[str, Any] = {
            ":now": enc(times.stored(now)),
            ":h0": enc(held[0]),
            ":h1": enc(held[1]),
            ":p": enc(pending),
        }
        sets = ["cancel_requested_at = if_not_exists(cancel_requested_at, :now)"]
        condition = "#s IN (:h0, :h1, :p)"
        if create is not None and pending_too:
            # Absent: the row is born PENDING with the mark (the fast path's one write at its end
            # applies from PENDING as from no row); present, every if_not_exists keeps what it holds.
            condition = f"attribute_not_exists(PK) OR {condition}"
            born = {**self._created(create), "status": RunStatus.PENDING.value, "attempt": 0}
            born["created_at"] = times.stored(now)
            for i, (key, value) in enumerate(sorted(born.items())):
                names[f"#c{i}"] = key
                values[f":c{i}"] = enc(value)
                sets.append(f"#c{i} = if_not_exists(#c{i}, :c{i})")
        applied, item = conditional(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": enc(job_pk(job_id)), "SK": enc(run_sk(scheduled_for))},
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return Transition(applied=applied, row=execution_or_none(item or None))

    def recent(self, job_id: str, *, limit: int) -> list[Execution]:
        """The newest runs of a job, newest first."""
        with aws_call(DYNAMODB):
            out = self.client.query(
                TableName=self.table,
                KeyConditionExpression="PK = :pk AND begins_with(SK, :run)",
                ExpressionAttributeValues={":pk": enc(job_pk(job_id)), ":run": enc("RUN#")},
                ScanIndexForward=False,
                Limit=limit,
            )
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
                ":pk": enc(job_pk(job_id)),
                ":low": enc(low),
                ":high": enc(high),
            },
            "ScanIndexForward": False,
        }
        filters: list[str] = []
        names: dict[str, str] = {}
        if status:
            filters.append("#s = :status")
            names["#s"] = "status"
            kwargs["ExpressionAttributeValues"][":status"] = enc(status)
        if kind:
            # A row without `kind` is a scheduled one (execution_from_item reads it so).
            filters.append(
                "(#k = :kind OR attribute_not_exists(#k))" if kind == "scheduled" else "#k = :kind"
            )
            names["#k"] = "kind"
            kwargs["ExpressionAttributeValues"][":kind"] = enc(kind)
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
            kwargs["ExpressionAttributeNames"] = names
        if cursor:
            kwargs["ExclusiveStartKey"] = cursor
        rows: list[Execution] = []
        while True:
            kwargs["Limit"] = limit - len(rows)
            with aws_call(DYNAMODB):
                out = self.client.query(**kwargs)
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
                ":pk": enc(job_pk(job_id)),
                ":from": enc(run_sk(times.stored(after))),
            },
        }
        runs: list[Execution] = []
        while True:
            with aws_call(DYNAMODB):
                out = self.client.query(**kwargs)
            runs.extend(execution_from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return runs
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def _lease_values(lease: Lease) -> dict[str, str | int]:
    return {
        "lease_owner": lease.owner,
        "lease_message": lease.message,
        "lease_until": times.stored(lease.until),
        "worker": lease.worker,
    }


def _end_values(end: AttemptEnd) -> dict[str, str | int]:
    """The run row's values for one attempt's end."""
    values: dict[str, str | int] = {
        "finished_at": times.stored(end.finished_at),
        "duration_ms": end.duration_ms,
    }
    if end.error is None:
        values["result"] = end.result if end.result is not None else "null"
    else:
        values["error_type"], values["error_message"] = end.error
    return values


def _attempt_values(end: AttemptEnd) -> dict[str, str | int]:
    """The attempt's record in the run's history."""
    record: dict[str, str | int] = {
        "attempt": end.attempt,
        "started_at": times.stored(end.started_at),
        "finished_at": times.stored(end.finished_at),
    }
    if end.error is not None:
        record["error_type"], record["error_message"] = end.error
    if end.worker is not None:  # only a worker-pool attempt names its worker: no bytes added otherwise
        record["worker"] = end.worker
    record["outcome"] = end.status.value
    return record
