"""The stored form of jobs, runs and due-index entries: every attribute a string or an integer.

The only module that knows DynamoDB's attribute-value maps ({"S": ...}, {"N": ...}); the stores
encode with it and answer domain models (jobsched.domain.models, jobsched.domain.records).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobsched.domain import times
from jobsched.domain.alerts import AlertPolicy
from jobsched.domain.keys import due_key_for, job_pk
from jobsched.domain.limits import Concurrency
from jobsched.domain.listing import target_type_of
from jobsched.domain.models import (
    AttemptRecord,
    Execution,
    Job,
    RescheduledTicks,
    RetryPolicy,
    RunError,
    SchedulePolicy,
)
from jobsched.domain.records import DeadLetter, DueEntry
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import TargetSpec, from_handler, parse_target


def enc(value: str | int) -> dict[str, str]:
    return {"N": str(value)} if isinstance(value, int) else {"S": value}


def dec_value(typed: Mapping[str, Any]) -> Any:
    if "S" in typed:
        return typed["S"]
    if "N" in typed:
        return int(typed["N"])
    if "BOOL" in typed:
        return typed["BOOL"]
    if "L" in typed:
        return [dec_value(v) for v in typed["L"]]
    if "M" in typed:
        return dec(typed["M"])
    if "SS" in typed:
        return sorted(typed["SS"])
    return None


def dec(item: Mapping[str, Any]) -> dict[str, Any]:
    return {key: dec_value(typed) for key, typed in item.items()}


def attempt_record(values: Mapping[str, str | int]) -> dict[str, Any]:
    """A run's attempt history entry, as a one-element list to list_append."""
    return {"L": [{"M": {k: enc(v) for k, v in values.items()}}]}


def opt_time(value: str | None) -> datetime | None:
    return times.parse_stored(value) if value else None


# A payload up to this size (compact JSON) is kept in the job item; a larger one in an item of its
# own, written with the job and read when the job is. Every hot write rewrites the job item (the
# dispatcher's stamp, the overlap hold), and DynamoDB bills a write by the item's whole size: 1 WRU
# per KB. Out of line, a 4 KB payload costs its run 0.5 RRU (one eventually consistent read)
# instead of 4 more WRU on each of those writes.
INLINE_PAYLOAD_BYTES = 256
PAYLOAD_CACHE_ENTRIES = 64  # per JobStore (a Lambda container): at most 2 MiB of the largest payloads


def payload_ref(text: str) -> str | None:
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
    ref = payload_ref(text)
    item: dict[str, Any] = {
        "PK": enc(job_pk(job.job_id)),
        "SK": enc("META"),
        "job_id": enc(job.job_id),
        "tenant": enc(job.tenant),
        "type": enc(job.type),
        "status": enc(job.status.value),
        # A python target is its `handler` alone, as items were before targets; any other target is
        # one JSON string, as retry and policy are (read only with the job, never a key). Not both:
        # every hot write rewrites this item, billed per KB, and the python target is the common one.
        **(
            {"handler": enc(job.handler)}
            if job.handler is not None
            else {"target": enc(job.target.model_dump_json())}
        ),
        **({"payload_ref": enc(ref)} if ref else {"payload": enc(text)}),
        "timezone": enc(job.timezone),
        # Only what differs from the defaults: the item stays one write unit (every hot write rewrites
        # it); a stored job keeps the defaults of the version that reads it.
        "retry": enc(job.retry.model_dump_json(exclude_defaults=True)),
        "policy": enc(job.policy.model_dump_json(exclude_defaults=True)),
        "dispatched": enc(job.dispatched),
        # The runs in flight, a map from the start (count_and_read sets one entry of it: a nested
        # path needs its map to exist). A run-time attribute: save_definition leaves it as it is.
        "in_flight": {"M": {k: enc(times.stored(v)) for k, v in job.in_flight.items()}},
        "idempotent": {"BOOL": job.idempotent},
        "created_at": enc(times.stored(job.created_at)),
        "updated_at": enc(times.stored(job.updated_at)),
        "version": enc(job.version),
    }
    # The listing filters on the target's type; "python" (the default) is not stored (every byte of
    # the job item is billed again on each hot write of it): its absence means python.
    if target_type_of(job) != "python":
        item["target_type"] = enc(target_type_of(job))
    if job.tags:
        item["tags"] = {"M": {k: enc(v) for k, v in job.tags.items()}}
    # Placement (jobsched.domain.compute), only when asked: what the caller asked (`compute`), and
    # `lane` "ecs" when the runs go to the ECS worker's queue: the due index projects it, so the
    # dispatcher routes from its range read alone. Both absent for the Lambda worker's jobs.
    if job.resources is not None or job.runs_on is not None:
        wanted = job.resources.model_dump() if job.resources else None
        if wanted is not None and not wanted["gpus"]:
            del wanted["gpus"]  # most jobs ask none: the item stays as small as before
        asked = {"resources": wanted, "runs_on": job.runs_on}
        compact = {k: v for k, v in asked.items() if v is not None}
        item["compute"] = enc(json.dumps(compact, separators=(",", ":")))
    lane = job.placement().runs_on
    if lane != "lambda":
        item["lane"] = enc(lane)
    if job.alerts:  # absent when unset; "failed,late@300" when set (AlertPolicy.stored)
        item["alerts"] = enc(job.alerts.stored())
    if job.concurrency:  # absent when unset (the item stays one write unit)
        item["concurrency"] = enc(job.concurrency.model_dump_json())
    if job.name:
        item["name"] = enc(job.name)
    if job.run_at:
        item["run_at"] = enc(times.stored(job.run_at))
    if job.cron_expr:
        item["cron_expr"] = enc(job.cron_expr)
    if job.next_run_at:
        item["next_run_at"] = enc(times.stored(job.next_run_at))
        item["due_key"] = enc(
            due_key_for(job.job_id, job.next_run_at, written=job.updated_at, shards=shard_count)
        )
    if job.depends_on:
        item["depends_on"] = enc(json.dumps(list(job.depends_on)))
    if job.dependants:
        item["dependants"] = {"SS": sorted(job.dependants)}
    # A run-time attribute, as in_flight (JobStore.cancel_run adds to it; save_definition leaves it).
    if job.cancelled_runs:
        item["cancelled_runs"] = {"SS": sorted(job.cancelled_runs)}
    if job.root_schedule:
        item["root_schedule"] = enc(job.root_schedule)
    if job.paused_at:
        item["paused_at"] = enc(times.stored(job.paused_at))
    if job.resume_from:
        item["resume_from"] = enc(times.stored(job.resume_from))
    if job.rescheduled:  # absent but for a job edited during its pause, until the resume
        item["rescheduled"] = enc(job.rescheduled.model_dump_json())
    stored_apart = None
    if ref:
        stored_apart = {"PK": item["PK"], "SK": enc(f"PAYLOAD#{ref}"), "payload": enc(text)}
    return item, stored_apart


def job_from_item(raw: Mapping[str, Any], *, payload: Mapping[str, Any] | None = None) -> Job:
    """Inverse of job_to_item; a payload stored apart must be given (JobStore reads it)."""
    item = dec(raw)
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
        target=_target_of(item),
        payload=dict(payload),
        name=item.get("name"),
        run_at=opt_time(item.get("run_at")),
        cron_expr=item.get("cron_expr"),
        timezone=item.get("timezone", "UTC"),
        retry=RetryPolicy.model_validate_json(item["retry"]),
        policy=SchedulePolicy.model_validate_json(item["policy"]) if "policy" in item else SchedulePolicy(),
        dispatched=item.get("dispatched", 0),
        paused_at=opt_time(item.get("paused_at")),
        resume_from=opt_time(item.get("resume_from")),
        rescheduled=(
            RescheduledTicks.model_validate_json(item["rescheduled"]) if "rescheduled" in item else None
        ),
        depends_on=tuple(json.loads(item["depends_on"])) if "depends_on" in item else (),
        dependants=tuple(item.get("dependants", ())),
        root_schedule=item.get("root_schedule"),
        active_run=item.get("active_run"),
        active_until=opt_time(item.get("active_until")),
        active_message=item.get("active_message"),
        # Written "" (not removed) by a hold that found the slot unheld: see JobStore.hold_job.
        displaced_run=item.get("displaced_run") or None,
        displaced_message=item.get("displaced_message") or None,
        buffered_run=item.get("buffered_run"),
        buffered_kind=item.get("buffered_kind"),
        buffered_until=opt_time(item.get("buffered_until")),
        in_flight={k: times.parse_stored(v) for k, v in item.get("in_flight", {}).items()},
        cancelled_runs=frozenset(item.get("cancelled_runs", ())),
        idempotent=item.get("idempotent", True),
        tags=item.get("tags", {}),
        alerts=AlertPolicy.parse(item["alerts"]) if "alerts" in item else None,
        concurrency=Concurrency.model_validate_json(item["concurrency"]) if "concurrency" in item else None,
        **(json.loads(item["compute"]) if "compute" in item else {}),
        next_run_at=opt_time(item.get("next_run_at")),
        created_at=times.parse_stored(item["created_at"]),
        updated_at=times.parse_stored(item["updated_at"]),
        version=item.get("version", 1),
    )


def _target_of(item: Mapping[str, Any]) -> TargetSpec:
    """The stored target; an item written before jobs had one names only its python handler."""
    if "target" in item:
        return parse_target(json.loads(item["target"]))
    return from_handler(item["handler"])


def due_entry_from_item(raw: Mapping[str, Any]) -> DueEntry:
    """A due-index item (INCLUDE projection) as a DueEntry."""
    item = dec(raw)
    return DueEntry(
        job_id=item["job_id"],
        tenant=item["tenant"],
        type=item["type"],
        next_run_at=times.parse_stored(item["next_run_at"]),
        cron_expr=item.get("cron_expr"),
        timezone=item.get("timezone", "UTC"),
        policy=SchedulePolicy.model_validate_json(item["policy"]) if "policy" in item else SchedulePolicy(),
        dispatched=int(item.get("dispatched", 0)),
        lane=item.get("lane", "lambda"),
        late_after_seconds=AlertPolicy.parse(item["alerts"]).late_after_seconds if "alerts" in item else None,
    )


def dead_letter_from_item(item: Mapping[str, Any]) -> DeadLetter:
    return DeadLetter(
        job_id=item["job_id"],
        run_id=item["run_id"],
        scheduled_for=times.parse_stored(item["scheduled_for"]),
        dead_at=times.parse_stored(item["dead_at"]),
        attempt=int(item.get("attempt", 0)),
        error_type=item.get("error_type"),
        error_message=item.get("error_message"),
    )


def execution_or_none(raw: Mapping[str, Any] | None) -> Execution | None:
    return execution_from_item(raw) if raw else None


def execution_from_item(raw: Mapping[str, Any]) -> Execution:
    """A run row as a model."""
    item = dec(raw)
    error = None
    if item.get("error_type"):
        error = RunError(type=item["error_type"], message=item.get("error_message", ""))
    attempts = [
        AttemptRecord(
            attempt=a.get("attempt", 0),
            worker=a.get("worker"),
            started_at=opt_time(a.get("started_at")),
            finished_at=opt_time(a.get("finished_at")),
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
        lease_message=item.get("lease_message"),
        lease_until=opt_time(item.get("lease_until")),
        worker=item.get("worker"),
        started_at=opt_time(item.get("started_at")),
        finished_at=opt_time(item.get("finished_at")),
        duration_ms=item.get("duration_ms"),
        result=json.loads(item["result"]) if "result" in item else None,
        error=error,
        attempts=attempts,
        replays=item.get("replays", 0),
        reason=item.get("reason"),
        kind=item.get("kind", "scheduled"),
        created_at=opt_time(item.get("created_at")),
        cancel_requested_at=opt_time(item.get("cancel_requested_at")),
        progress=json.loads(item["progress"]) if "progress" in item else None,
        progress_at=opt_time(item.get("progress_at")),
        checkpoint=json.loads(item["checkpoint"]) if "checkpoint" in item else None,
        checkpoint_at=opt_time(item.get("checkpoint_at")),
        ecs_tasks=[str(arn) for arn in item.get("ecs_tasks") or ()],
        materialized=bool(item.get("materialized", 0)),
    )
