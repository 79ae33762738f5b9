"""The shard guard: a CloudFormation custom resource that refuses a deploy lowering `-c shards`.

A due entry's partition key is "<minute bucket>#<shard>" with shard < the deployed shard count, and
the dispatcher reads shards 0..N-1 only: after lowering N, the entries already written to shards
N..old-1 are never read, and their jobs never fire. Migrating them would take a pass over every
due entry; refusing the change is simpler and loses nothing. CloudFormation hands an update the
old properties too, so the guard compares them: a lower ShardCount fails the update, which rolls
the whole stack back (the dispatcher depends on the guard, so it is never updated first). Raising
the count is always safe: every old shard is still read.

This module is the function's inline code (it runs without the jobsched layer): the standard
library only, and `decide` is pure, for the tests.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

PROPERTY = "ShardCount"


def decide(event: dict[str, Any]) -> tuple[str, str]:
    """("SUCCESS" | "FAILED", reason) for a CloudFormation custom-resource event."""
    if event.get("RequestType") != "Update":
        return "SUCCESS", f"{event.get('RequestType')}: nothing to compare"
    new = int(event["ResourceProperties"][PROPERTY])
    old = int(event.get("OldResourceProperties", {}).get(PROPERTY, new))
    if new < old:
        return (
            "FAILED",
            f"shards: lowering the shard count from {old} to {new} would strand the due entries of "
            f"shards {new}..{old - 1} (their jobs would never fire); deploy with -c shards={old} or more",
        )
    return "SUCCESS", f"shards: {old} -> {new}"


def handler(event: dict[str, Any], context: Any) -> None:
    """Lambda entry point: answer CloudFormation's presigned URL with decide()'s verdict."""
    status, reason = decide(event)
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason,
            "PhysicalResourceId": event.get("PhysicalResourceId") or "jobsched-shard-guard",
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=10):  # CloudFormation's https URL
        pass
