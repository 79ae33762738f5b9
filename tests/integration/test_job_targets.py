"""`target` on a job through the API Lambda handler, against moto (the DynamoDB codec stores it).

The API here runs with the deployed policy (AddressPolicy.aws(): JOBSCHED_TARGET_POLICY=aws, the default),
so loopback, private addresses and plain http are refused at create, as on AWS.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from jobsched.settings import Settings
from tests.integration.conftest import Call

ROLE = "arn:aws:iam::123456789012:role/jobsched-target"
HOOK = "https://93.184.215.14/hooks/run"  # a public address literal: no DNS lookup


def soon(seconds: int = 3600) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def job_items(settings: Settings) -> int:
    return len(boto3.client("dynamodb").scan(TableName=settings.jobs_table)["Items"])


def one_off(**fields: Any) -> dict[str, Any]:
    return {"type": "one_off", "run_at": soon(), "payload": {"x": 1}, **fields}


def test_a_job_created_with_a_target_shows_it_on_get_and_a_patch_replaces_it(call: Call) -> None:
    # Given a job created with an http target
    status, created = call("POST", "/api/jobs", one_off(target={"type": "http", "url": HOOK}))
    assert status == 201
    job_id = created["job_id"]
    # When it is read, then GET shows the target with its defaults, and no handler
    status, job = call("GET", f"/api/jobs/{job_id}")
    assert status == 200 and job["handler"] is None
    assert job["target"] == {
        "type": "http",
        "url": HOOK,
        "method": "POST",
        "headers": {},
        "timeout_seconds": 30,
    }
    # When a PATCH gives it an sqs target, then GET shows that one
    sqs = {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "role_arn": ROLE}
    status, patched = call("PATCH", f"/api/jobs/{job_id}", {"target": sqs})
    assert status == 200 and patched["target"] == {**sqs, "message_group_id": None}
    assert call("GET", f"/api/jobs/{job_id}")[1]["target"] == patched["target"]
    # When a PATCH gives the handler shorthand, then the target is that python handler
    status, patched = call("PATCH", f"/api/jobs/{job_id}", {"handler": "demo.echo"})
    assert status == 200 and patched["handler"] == "demo.echo"
    assert patched["target"] == {"type": "python", "handler": "demo.echo"}


def test_the_handler_shorthand_is_stored_and_shown_as_a_python_target(call: Call) -> None:
    # Given a job created with handler only
    status, created = call("POST", "/api/jobs", one_off(handler="demo.echo"))
    assert status == 201
    # Then its view shows both the shorthand and the target it stands for
    job = call("GET", f"/api/jobs/{created['job_id']}")[1]
    assert job["handler"] == "demo.echo" and job["target"] == {"type": "python", "handler": "demo.echo"}


BAD_TARGETS = [
    (
        "both handler and target",
        {"handler": "demo.echo", "target": {"type": "python", "handler": "demo.echo"}},
        "target: give either target or its shorthand handler, not both",
    ),
    ("neither", {}, "target: is required"),
    ("unknown type", {"target": {"type": "ftp", "url": HOOK}}, "target.type"),
    ("missing url", {"target": {"type": "http"}}, "target.url"),
    (
        "host with an empty label",
        {"target": {"type": "http", "url": "https://hooks..example.com/"}},
        "target.url",
    ),
    (
        "function not an ARN",
        {"target": {"type": "lambda", "function_arn": "my-fn", "role_arn": ROLE}},
        "target.function_arn",
    ),
    (
        "metadata v4",
        {"target": {"type": "http", "url": "https://169.254.169.254/latest/meta-data/"}},
        "target.url",
    ),
    ("metadata v6", {"target": {"type": "http", "url": "https://[fd00:ec2::254]/latest/"}}, "target.url"),
    (
        "oversized headers",
        {"target": {"type": "http", "url": HOOK, "headers": {"X-Big": "a" * 9000}}},
        "target.headers",
    ),
    (
        "role_arn not a role",
        {
            "target": {
                "type": "sns",
                "topic_arn": "arn:aws:sns:us-east-1:123456789012:t",
                "role_arn": "arn:aws:iam::123456789012:user/bob",
            }
        },
        "target.role_arn",
    ),
    ("loopback on AWS", {"target": {"type": "http", "url": "https://127.0.0.1/hook"}}, "target.url"),
    ("private on AWS", {"target": {"type": "http", "url": "https://10.0.0.7/hook"}}, "target.url"),
    ("plain http on AWS", {"target": {"type": "http", "url": "http://93.184.215.14/hook"}}, "target.url"),
    ("unregistered handler", {"target": {"type": "python", "handler": "nope.missing"}}, "target.handler"),
]


@pytest.mark.parametrize(("case", "fields", "field"), BAD_TARGETS, ids=[c[0] for c in BAD_TARGETS])
def test_a_bad_target_is_a_400_naming_the_field_with_nothing_written(
    call: Call, aws: Settings, case: str, fields: dict[str, Any], field: str
) -> None:
    # Given an empty jobs table; when a job with a bad target is created
    status, answer = call("POST", "/api/jobs", one_off(**fields))
    # Then the answer is a 400 whose message starts with the field's name (and, where the field alone
    # does not tell the cases apart, the reason), and nothing is stored
    assert status == 400, answer
    assert answer["error"]["code"] == "validation_error"
    assert answer["error"]["message"].startswith(field if ":" in field else f"{field}:"), answer
    assert job_items(aws) == 0


def test_a_name_that_resolves_to_metadata_is_refused_at_create_and_at_patch(
    call: Call, aws: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given DNS that answers the EC2 metadata address for one name
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    target = {"type": "http", "url": "https://hooks.rebind.test/run"}
    # When a job names it, then a 400 names target.url and nothing is written
    status, answer = call("POST", "/api/jobs", one_off(target=target))
    assert status == 400 and answer["error"]["message"].startswith("target.url:"), answer
    assert job_items(aws) == 0
    # And a PATCH to it leaves a job as it was
    status, created = call("POST", "/api/jobs", one_off(handler="demo.echo"))
    assert status == 201
    before = call("GET", f"/api/jobs/{created['job_id']}")[1]
    status, answer = call("PATCH", f"/api/jobs/{created['job_id']}", {"target": target})
    assert status == 400 and answer["error"]["message"].startswith("target.url:"), answer
    after = call("GET", f"/api/jobs/{created['job_id']}")[1]
    assert after["target"] == before["target"] and after["updated_at"] == before["updated_at"]


def test_a_patch_with_both_handler_and_target_is_a_400(call: Call) -> None:
    status, created = call("POST", "/api/jobs", one_off(handler="demo.echo"))
    assert status == 201
    status, answer = call(
        "PATCH",
        f"/api/jobs/{created['job_id']}",
        {"handler": "demo.echo", "target": {"type": "http", "url": HOOK}},
    )
    assert status == 400, answer
    assert answer["error"]["message"].startswith("target: give either target or its shorthand handler"), (
        answer
    )
