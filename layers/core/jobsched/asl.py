"""The workflows' definitions (Amazon States Language): the failure and DAG state machines, the one
source for CDK and the local stack ("asl": the definitions; "workflow": what runs; StateMachines: the port).

The failure workflow:

A failed attempt, a poison message and an operator's replay all go through it. It runs only on
the bad path: a healthy run never starts it (Standard workflows are billed per state transition).

    Route ──replay──> ReplayRearm (DEAD_LETTER -> PENDING, attempt 0) ──> [RestoreJob] ──> Enqueue ──> Done
      └──> CanRetry ──retryable and attempt < max──> Backoff (Wait) ──> Rearm (FAILED -> PENDING) ──> Enqueue
               └──otherwise──> DeadLetter (FAILED -> DEAD_LETTER, dead-letter keys) ──> [FailJob]
                                   ──> AlertWanted ──> [RecordAlert] ──> Alert (SNS) ──> Propagate ──> Done

AlertWanted: the job's alert policy wants its dead letters (else straight to Propagate). RecordAlert
keeps the alert (services/alerts.py: one conditional put on an id derived from the run and its replay
series) before Alert publishes it; refused, it was kept and published already (a retried execution
step, a second hand-over), so nothing is published twice. A publish that still fails after its
retries goes on to Propagate: an alert never costs the dependants their UPSTREAM_FAILED marks.

[FailJob] and [RestoreJob] run for a job that lives for this one run (a one-off, or a dependant of a
one-off chain; the caller says so in `job_run`): its dead letter is the job's end, so the job moves
SCHEDULED -> FAILED; a replay moves it FAILED -> SCHEDULED before the run is enqueued, so the worker
meets a scheduled job and a success completes it. A job in any other status is left as it is.

Every DynamoDB step is a native-integration conditional update along a legal edge, which also
accepts the row its own earlier try wrote (a retry after a lost answer is idempotent); a refused
condition means another actor already moved the run (a duplicate start, a replay that raced), so the
execution ends quietly in Stale. Native integrations throughout: no Lambda only forwards a call.
Inputs are computed by the caller (jobsched.asl_inputs: FailureInput, ReplayInput, DagInput), times
included, so the definition needs no clock of its own.
"""

from __future__ import annotations

import json
from typing import Any, cast

_CONDITION_FAILED = "DynamoDB.ConditionalCheckFailedException"
# Throttles and transient faults of the integrated services are retried with backoff; a refused
# condition is an answer, not a fault, and is caught instead.
_TRANSIENT = [
    "DynamoDB.ProvisionedThroughputExceededException",
    "DynamoDB.ThrottlingException",
    "DynamoDB.RequestLimitExceeded",
    "DynamoDB.InternalServerErrorException",
    "DynamoDB.TransactionConflictException",
    "SQS.SdkClientException",
    "SNS.SdkClientException",
    "States.Timeout",
]
_RETRY = [{"ErrorEquals": _TRANSIENT, "IntervalSeconds": 1, "MaxAttempts": 6, "BackoffRate": 2.0}]


def _update(
    update: str, condition: str, values: dict[str, Any], names: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:${Partition}:states:::dynamodb:updateItem",
        "Parameters": {
            "TableName.$": "$.runs_table",
            "Key": {"PK": {"S.$": "$.pk"}, "SK": {"S.$": "$.sk"}},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#s": "status", **(names or {})},
            "ExpressionAttributeValues": values,
        },
        "ResultPath": None,
        "Retry": _RETRY,
        "Catch": [{"ErrorEquals": [_CONDITION_FAILED], "ResultPath": "$.stale", "Next": "Stale"}],
    }


def _if_job_run(then: str, *, otherwise: str) -> dict[str, Any]:
    """A Choice: `then` if the run is its job's only run ($.job_run), else `otherwise`."""
    return {
        "Type": "Choice",
        "Choices": [{"Variable": "$.job_run", "BooleanEquals": True, "Next": then}],
        "Default": otherwise,
    }


def _job_status(
    target: str, *, source: str, at: str, next_state: str, or_paused: bool = False
) -> dict[str, Any]:
    """Compare-and-set the job's status source -> target (its version bumped, as JobStore does);
    `or_paused`: from PAUSED too (a one-off paused after its tick was due: its one run went on).

    Refused (the job moved on: cancelled, edited away): the job is left alone, and the run goes on.
    """
    values: dict[str, Any] = {
        ":target": {"S": target},
        ":source": {"S": source},
        ":now": {"S.$": at},
        ":one": {"N": "1"},
    }
    if or_paused:
        values[":paused"] = {"S": "PAUSED"}
    return {
        "Type": "Task",
        "Resource": "arn:${Partition}:states:::dynamodb:updateItem",
        "Parameters": {
            "TableName.$": "$.jobs_table",
            "Key": {"PK": {"S.$": "$.job_pk"}, "SK": {"S": "META"}},
            "UpdateExpression": "SET #s = :target, updated_at = :now ADD version :one",
            "ConditionExpression": "#s = :source OR #s = :paused" if or_paused else "#s = :source",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": values,
        },
        "ResultPath": None,
        "Retry": _RETRY,
        "Catch": [{"ErrorEquals": [_CONDITION_FAILED], "ResultPath": None, "Next": next_state}],
        "Next": next_state,
    }


def _failure_asl() -> dict[str, Any]:
    """The ASL of the failure workflow."""
    attempt = {"N.$": "States.Format('{}', $.attempt)"}
    return {
        "Comment": "jobsched: backoff and retry, dead-letter and alert, or replay a failed run",
        "StartAt": "Route",
        "States": {
            "Route": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.action", "StringEquals": "replay", "Next": "ReplayRearm"}],
                "Default": "CanRetry",
            },
            "CanRetry": {
                "Type": "Choice",
                "Choices": [
                    {
                        "And": [
                            {"Variable": "$.retryable", "BooleanEquals": True},
                            {"Variable": "$.attempt", "NumericLessThanPath": "$.max_attempts"},
                        ],
                        "Next": "Backoff",
                    }
                ],
                "Default": "DeadLetter",
            },
            "Backoff": {"Type": "Wait", "SecondsPath": "$.wait_seconds", "Next": "Rearm"},
            # Rearm and DeadLetter are retried when their answer is lost after the write applied
            # (a timeout, a 500): the retry must accept the row its own first try wrote, or the
            # execution ends Stale with the retry never enqueued / the job never failed.
            #   Rearm:      FAILED@n ──write──> PENDING@n ──answer lost──> retry: PENDING@n, applies again
            #   meanwhile:  a cancel (PENDING@n -> CANCELLED) or a worker's claim (LEASED@n+1) moved it:
            #               the retry is refused, Stale, nothing sent (the cancel or the worker owns it)
            #   DeadLetter: FAILED@n ──write──> DEAD_LETTER@n ──answer lost──> retry: same values again
            #   meanwhile:  a replay (DEAD_LETTER -> PENDING@0): refused, Stale, no second alert
            #   ReplayRearm: DEAD_LETTER ──write──> PENDING@0, series r ──answer lost──> retry: PENDING@0
            #               of series r is its own write: applies again, enqueues (a replay left
            #               PENDING with no message for good: tests/sim seed 293)
            "Rearm": {
                **_update(
                    "SET #s = :pending REMOVE lease_owner, lease_until, lease_message",
                    "(#s = :failed OR #s = :pending) AND attempt = :attempt",
                    {":pending": {"S": "PENDING"}, ":failed": {"S": "FAILED"}, ":attempt": attempt},
                ),
                "Next": "Enqueue",
            },
            "ReplayRearm": {
                "Next": "ReplayOfJobRun",
                **_update(
                    "SET #s = :pending, attempt = :zero, replays = :replays "
                    "REMOVE dl_key, dl_sk, lease_owner, lease_until, lease_message",
                    "#s = :dead OR (#s = :pending AND attempt = :zero AND replays = :replays)",
                    {
                        ":pending": {"S": "PENDING"},
                        ":dead": {"S": "DEAD_LETTER"},
                        ":zero": {"N": "0"},
                        ":replays": {"N.$": "States.Format('{}', $.replays)"},
                    },
                ),
            },
            "ReplayOfJobRun": _if_job_run("RestoreJob", otherwise="Enqueue"),
            "RestoreJob": _job_status("SCHEDULED", source="FAILED", at="$.now", next_state="Enqueue"),
            "Enqueue": {
                "Type": "Task",
                "Resource": "arn:${Partition}:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl.$": "$.queue_url", "MessageBody.$": "$.message"},
                "ResultPath": None,
                "Retry": _RETRY,
                "Next": "Done",
            },
            "DeadLetter": {
                **_update(
                    "SET #s = :dead, dl_key = :dl_key, dl_sk = :dl_sk, dead_at = :dead_at",
                    "(#s = :failed OR #s = :dead) AND attempt = :attempt",
                    {
                        ":dead": {"S": "DEAD_LETTER"},
                        ":failed": {"S": "FAILED"},
                        ":attempt": attempt,
                        ":dl_key": {"S.$": "$.dl_key"},
                        ":dl_sk": {"S.$": "$.dl_sk"},
                        ":dead_at": {"S.$": "$.dead_at"},
                    },
                ),
                "Next": "DeadJobRun",
            },
            "DeadJobRun": _if_job_run("FailJob", otherwise="AlertWanted"),
            "FailJob": _job_status(
                "FAILED", source="SCHEDULED", at="$.dead_at", next_state="AlertWanted", or_paused=True
            ),
            "AlertWanted": {
                "Type": "Choice",
                "Choices": [
                    {
                        "And": [
                            {"Variable": "$.alert_wanted", "BooleanEquals": True},
                            {"Variable": "$.record_alert", "BooleanEquals": True},
                        ],
                        "Next": "RecordAlert",
                    },
                    {"Variable": "$.alert_wanted", "BooleanEquals": True, "Next": "Alert"},
                ],
                "Default": "Propagate",
            },
            "RecordAlert": {
                "Type": "Task",
                "Resource": "arn:${Partition}:states:::dynamodb:putItem",
                "Parameters": {
                    "TableName.$": "$.alerts_table",
                    "Item.$": "$.alert_item",
                    "ConditionExpression": "attribute_not_exists(PK)",
                },
                "ResultPath": None,
                "Retry": _RETRY,
                # Kept before: published before too (or listed only, if that one's publish failed).
                "Catch": [
                    {"ErrorEquals": [_CONDITION_FAILED], "ResultPath": None, "Next": "Propagate"},
                    {"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": "Alert"},
                ],
                "Next": "Alert",
            },
            "Alert": {
                "Type": "Task",
                "Resource": "arn:${Partition}:states:::sns:publish",
                "Parameters": {
                    "TopicArn.$": "$.topic_arn",
                    "Subject": "jobsched: a run was dead-lettered",
                    "Message.$": "States.JsonToString($.alert)",
                    # What subscribers filter on, as every alert carries them (adapters/alerts.py).
                    "MessageAttributes": {
                        "tenant": {"DataType": "String", "StringValue.$": "$.alert.tenant"},
                        "job_id": {"DataType": "String", "StringValue.$": "$.alert.job_id"},
                        "kind": {"DataType": "String", "StringValue": "dead_letter"},
                    },
                },
                "ResultPath": None,
                "Retry": _RETRY,
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": "Propagate"}],
                "Next": "Propagate",
            },
            "Propagate": {
                "Type": "Map",
                "Comment": "every transitive dependant's run of this period becomes UPSTREAM_FAILED, visibly",
                "ItemsPath": "$.propagate",
                "MaxConcurrency": 10,
                "Parameters": {
                    "item.$": "$$.Map.Item.Value",
                    "runs_table.$": "$.runs_table",
                    "dead_at.$": "$.dead_at",
                },
                "Iterator": {
                    "StartAt": "MarkUpstreamFailed",
                    "States": {
                        "MarkUpstreamFailed": {
                            "Type": "Task",
                            "Resource": "arn:${Partition}:states:::dynamodb:updateItem",
                            "Parameters": {
                                "TableName.$": "$.runs_table",
                                "Key": {"PK": {"S.$": "$.item.pk"}, "SK": {"S.$": "$.item.run_sk"}},
                                "UpdateExpression": (
                                    "SET #s = :upstream_failed, run_id = :rid, job_id = :jid,"
                                    " tenant = :tenant, scheduled_for = :sf, kind = :kind,"
                                    " reason = :why, attempt = :zero,"
                                    " updated_at = :now, created_at = :now"
                                ),
                                "ConditionExpression": "attribute_not_exists(PK)",
                                "ExpressionAttributeNames": {"#s": "status"},
                                "ExpressionAttributeValues": {
                                    ":upstream_failed": {"S": "UPSTREAM_FAILED"},
                                    ":rid": {"S.$": "$.item.run_id"},
                                    ":jid": {"S.$": "$.item.job_id"},
                                    ":tenant": {"S.$": "$.item.tenant"},
                                    ":sf": {"S.$": "$.item.run_sf"},
                                    ":kind": {"S": "dependant"},
                                    ":why": {"S.$": "$.item.reason"},
                                    ":zero": {"N": "0"},
                                    ":now": {"S.$": "$.dead_at"},
                                },
                            },
                            "ResultPath": None,
                            "Retry": _RETRY,
                            # A run that exists already (released earlier, or marked) is left as it is.
                            "Catch": [
                                {"ErrorEquals": [_CONDITION_FAILED], "ResultPath": None, "Next": "Marked"}
                            ],
                            "Next": "Marked",
                        },
                        "Marked": {"Type": "Succeed"},
                    },
                },
                "ResultPath": None,
                "Next": "Done",
            },
            "Stale": {"Type": "Succeed", "Comment": "another actor moved the run first"},
            "Done": {"Type": "Succeed"},
        },
    }


def _dag_asl() -> dict[str, Any]:
    """The ASL of the DAG completion workflow: count an upstream run's success into each dependant.

    Input: {"upstream_run", "runs_table", "queue_url", "items": [one per dependant: pk, wait_sk,
    run_sk, run_sf, run_id, job_id, tenant, fan_in, message, now]}. Per dependant (Map):

        Count: outstanding = fan_in - 1 the first time, - 1 after; the upstream run is added to
               `counted` in the same conditional write, so a second signal of the same upstream
               run is refused (idempotent per upstream run) ──refused──> Recheck
        Ready: outstanding == 0 ? ──> Release : Done
        Release: the dependant's run row for the period, PENDING (born, or re-armed from
               UPSTREAM_FAILED) ──exists already──> Existing: still PENDING ? Enqueue : Done
        Enqueue: SQS SendMessage (a duplicate message is dropped by the worker's lease)

    A dependant fires when its count reaches zero, exactly once per period: the run row's
    conditional creation is the only way in, whatever the number of deliveries or re-runs.
    """
    key = {"PK": {"S.$": "$.item.pk"}}
    get_wait = {
        "TableName.$": "$.runs_table",
        "Key": {**key, "SK": {"S.$": "$.item.wait_sk"}},
        "ConsistentRead": True,
    }
    get_run = {
        "TableName.$": "$.runs_table",
        "Key": {**key, "SK": {"S.$": "$.item.run_sk"}},
        "ConsistentRead": True,
    }
    count: dict[str, Any] = {
        "Type": "Task",
        "Resource": "arn:${Partition}:states:::dynamodb:updateItem",
        "Parameters": {
            "TableName.$": "$.runs_table",
            "Key": {**key, "SK": {"S.$": "$.item.wait_sk"}},
            "UpdateExpression": (
                "SET outstanding = if_not_exists(outstanding, :fan_in) - :one ADD counted :run"
            ),
            "ConditionExpression": "attribute_not_exists(counted) OR NOT contains(counted, :run_id)",
            "ExpressionAttributeValues": {
                ":fan_in": {"N.$": "States.Format('{}', $.item.fan_in)"},
                ":one": {"N": "1"},
                ":run": {"SS.$": "States.Array($.upstream_run)"},
                ":run_id": {"S.$": "$.upstream_run"},
            },
            "ReturnValues": "UPDATED_NEW",
        },
        "ResultSelector": {"outstanding.$": "$.Attributes.outstanding.N"},
        "ResultPath": "$.count",
        "Retry": _RETRY,
        "Catch": [{"ErrorEquals": [_CONDITION_FAILED], "ResultPath": "$.refused", "Next": "Recheck"}],
        "Next": "Ready",
    }
    release: dict[str, Any] = {
        "Type": "Task",
        "Resource": "arn:${Partition}:states:::dynamodb:updateItem",
        "Parameters": {
            "TableName.$": "$.runs_table",
            "Key": {**key, "SK": {"S.$": "$.item.run_sk"}},
            "UpdateExpression": "SET #s = :pending, run_id = :rid, job_id = :jid, tenant = :tenant, "
            "scheduled_for = :sf, attempt = :zero, kind = :kind, updated_at = :now, "
            "created_at = if_not_exists(created_at, :now) REMOVE reason",
            "ConditionExpression": "attribute_not_exists(PK) OR #s = :upstream_failed",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {
                ":pending": {"S": "PENDING"},
                ":upstream_failed": {"S": "UPSTREAM_FAILED"},
                ":rid": {"S.$": "$.item.run_id"},
                ":jid": {"S.$": "$.item.job_id"},
                ":tenant": {"S.$": "$.item.tenant"},
                ":sf": {"S.$": "$.item.run_sf"},
                ":zero": {"N": "0"},
                ":kind": {"S": "dependant"},
                ":now": {"S.$": "$.item.now"},
            },
        },
        "ResultPath": None,
        "Retry": _RETRY,
        "Catch": [{"ErrorEquals": [_CONDITION_FAILED], "ResultPath": "$.refused", "Next": "Existing"}],
        "Next": "Enqueue",
    }
    iterator = {
        "StartAt": "Count",
        "States": {
            "Count": count,
            "Recheck": {
                "Type": "Task",
                "Resource": "arn:${Partition}:states:::dynamodb:getItem",
                "Parameters": get_wait,
                "ResultSelector": {"outstanding.$": "$.Item.outstanding.N"},
                "ResultPath": "$.count",
                "Retry": _RETRY,
                "Next": "Ready",
            },
            "Ready": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.count.outstanding", "StringEquals": "0", "Next": "Release"}],
                "Default": "Waiting",
            },
            "Release": release,
            "Existing": {
                "Type": "Task",
                "Resource": "arn:${Partition}:states:::dynamodb:getItem",
                "Parameters": get_run,
                "ResultSelector": {"status.$": "$.Item.status.S"},
                "ResultPath": "$.run",
                "Retry": _RETRY,
                "Next": "StillPending",
            },
            "StillPending": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.run.status", "StringEquals": "PENDING", "Next": "Enqueue"}],
                "Default": "Released",
            },
            "Enqueue": {
                "Type": "Task",
                "Resource": "arn:${Partition}:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl.$": "$.queue_url", "MessageBody.$": "$.item.message"},
                "ResultPath": None,
                "Retry": _RETRY,
                "Next": "Released",
            },
            "Waiting": {"Type": "Succeed", "Comment": "other upstreams of this period are still outstanding"},
            "Released": {"Type": "Succeed"},
        },
    }
    return {
        "Comment": "jobsched: count an upstream run's success into its dependants; release the completed",
        "StartAt": "Dependants",
        "States": {
            "Dependants": {
                "Type": "Map",
                "ItemsPath": "$.items",
                "MaxConcurrency": 10,
                "Parameters": {
                    "item.$": "$$.Map.Item.Value",
                    "upstream_run.$": "$.upstream_run",
                    "runs_table.$": "$.runs_table",
                    "queue_url.$": "$.queue_url",
                },
                "Iterator": iterator,
                "ResultPath": None,
                "End": True,
            }
        },
    }


# Task resources are ARNs in the stack's partition (aws, aws-cn, aws-us-gov): the definitions
# spell it PARTITION; CDK keeps that placeholder and has CloudFormation substitute AWS::Partition
# (DefinitionSubstitutions), the local stack and the tests name moto's, "aws".
PARTITION = "${Partition}"


def _in_partition(definition: dict[str, Any], partition: str) -> dict[str, Any]:
    if partition == PARTITION:
        return definition
    text = json.dumps(definition).replace(f"arn:{PARTITION}:", f"arn:{partition}:")
    return cast(dict[str, Any], json.loads(text))


def failure_definition(partition: str = "aws") -> dict[str, Any]:
    """The ASL of the failure workflow, its task ARNs in `partition` (PARTITION: left to CloudFormation)."""
    return _in_partition(_failure_asl(), partition)


def dag_definition(partition: str = "aws") -> dict[str, Any]:
    """The ASL of the DAG completion workflow, its task ARNs in `partition` (see failure_definition)."""
    return _in_partition(_dag_asl(), partition)
