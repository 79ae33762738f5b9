"""Build the events AWS would deliver: API Gateway REST proxy, EventBridge scheduled, SQS batch."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit


def api_gateway_event(
    method: str, raw_path: str, headers: dict[str, str], body: bytes | None
) -> dict[str, Any]:
    """An API Gateway REST (v1) proxy event for one HTTP request."""
    parts = urlsplit(raw_path)
    query = parse_qs(parts.query, keep_blank_values=True)
    now = datetime.now(UTC)
    return {
        "resource": parts.path,
        "path": parts.path,
        "httpMethod": method,
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": None,
        "stageVariables": None,
        "body": body.decode("utf-8", errors="replace") if body else None,
        "isBase64Encoded": False,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "stage": "local",
            "requestId": str(uuid.uuid4()),
            "httpMethod": method,
            "path": parts.path,
            "resourcePath": parts.path,
            "protocol": "HTTP/1.1",
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "identity": {"sourceIp": "127.0.0.1", "userAgent": headers.get("User-Agent", "")},
        },
    }


def scheduled_event(now: datetime | None = None) -> dict[str, Any]:
    """The event an EventBridge schedule rule delivers."""
    now = now or datetime.now(UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:000000000000:rule/jobsched-dispatch-tick"],
        "detail": {},
    }


def sqs_event(messages: Sequence[Mapping[str, Any]], *, queue_arn: str) -> dict[str, Any]:
    """The event the SQS event-source mapping hands a Lambda for received messages."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
    }
