"""The failure workflow's definition (Amazon States Language), the one source for CDK and the local stack.

A failed attempt, a poison message and an operator's replay all go through it. It runs only on
the bad path: a healthy run never starts it (Standard workflows are billed per state transition).

    Route ──replay──> ReplayRearm (DEAD_LETTER -> PENDING, attempt 0) ──> Enqueue (SQS) ──> Done
      └──> CanRetry ──retryable and attempt < max──> Backoff (Wait) ──> Rearm (FAILED -> PENDING) ──> Enqueue
               └──otherwise──> DeadLetter (FAILED -> DEAD_LETTER, dead-letter keys) ──> Alert (SNS) ──> Done

Every DynamoDB step is a native-integration conditional update along a legal edge; a refused
condition means another actor already moved the run (a duplicate start, a replay that raced), so the
execution ends quietly in Stale. Native integrations throughout: no Lambda only forwards a call.
Inputs are computed by the caller (services/failures.py: FailureInput), times included, so the
definition needs no clock of its own.
"""

from __future__ import annotations

from typing import Any

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
        "Resource": "arn:aws:states:::dynamodb:updateItem",
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


def failure_definition() -> dict[str, Any]:
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
            "Rearm": {
                **_update(
                    "SET #s = :pending REMOVE lease_owner, lease_until, lease_message",
                    "#s = :failed AND attempt = :attempt",
                    {":pending": {"S": "PENDING"}, ":failed": {"S": "FAILED"}, ":attempt": attempt},
                ),
                "Next": "Enqueue",
            },
            "ReplayRearm": {
                **_update(
                    "SET #s = :pending, attempt = :zero, replays = if_not_exists(replays, :zero) + :one "
                    "REMOVE dl_key, dl_sk, lease_owner, lease_until, lease_message",
                    "#s = :dead",
                    {
                        ":pending": {"S": "PENDING"},
                        ":dead": {"S": "DEAD_LETTER"},
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                    },
                ),
                "Next": "Enqueue",
            },
            "Enqueue": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl.$": "$.queue_url", "MessageBody.$": "$.message"},
                "ResultPath": None,
                "Retry": _RETRY,
                "Next": "Done",
            },
            "DeadLetter": {
                **_update(
                    "SET #s = :dead, dl_key = :dl_key, dl_sk = :dl_sk, dead_at = :dead_at",
                    "#s = :failed AND attempt = :attempt",
                    {
                        ":dead": {"S": "DEAD_LETTER"},
                        ":failed": {"S": "FAILED"},
                        ":attempt": attempt,
                        ":dl_key": {"S.$": "$.dl_key"},
                        ":dl_sk": {"S.$": "$.dl_sk"},
                        ":dead_at": {"S.$": "$.dead_at"},
                    },
                ),
                "Next": "Alert",
            },
            "Alert": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sns:publish",
                "Parameters": {
                    "TopicArn.$": "$.topic_arn",
                    "Subject": "jobsched: a run was dead-lettered",
                    "Message.$": "States.JsonToString($.alert)",
                },
                "ResultPath": None,
                "Retry": _RETRY,
                "Next": "Done",
            },
            "Stale": {"Type": "Succeed", "Comment": "another actor moved the run first"},
            "Done": {"Type": "Succeed"},
        },
    }
