"""Target specs (jobsched.domain.targets): every bad input is refused naming its field, nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from jobsched.domain.targets import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    HttpTarget,
    LambdaTarget,
    PythonTarget,
    SqsTarget,
    StepFunctionsTarget,
    from_handler,
    parse_target,
)
from jobsched.errors import ValidationFailed

ROLE = "arn:aws:iam::123456789012:role/jobsched-target"
FN = "arn:aws:lambda:us-east-1:123456789012:function:my-fn"
GOOD: list[dict[str, Any]] = [
    {"type": "python", "handler": "demo.echo"},
    {"type": "http", "url": "https://hooks.example.com/run"},
    {"type": "lambda", "function_arn": FN, "role_arn": ROLE},
    {"type": "lambda", "function_arn": f"{FN}:live", "invocation": "async", "role_arn": ROLE},
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "role_arn": ROLE},
    {
        "type": "sqs",
        "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/q.fifo",
        "message_group_id": "g-1",
        "role_arn": ROLE,
    },
    {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "role_arn": ROLE},
    {
        "type": "eventbridge",
        "event_bus_name": "default",
        "source": "my.app",
        "detail_type": "tick",
        "role_arn": ROLE,
    },
    {
        "type": "stepfunctions",
        "state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:sm",
        "wait": True,
        "role_arn": "arn:aws:iam::123456789012:role/path/to/r",
    },
]


@pytest.mark.parametrize("data", GOOD, ids=[f"{d['type']}-{i}" for i, d in enumerate(GOOD)])
def test_it_accepts_every_kind_of_well_formed_target(data: dict[str, Any]) -> None:
    # Given a well-formed target of each kind, when it is parsed, then it is that kind with those fields
    spec = parse_target(data)
    assert spec.type == data["type"]
    assert spec.model_dump(include=set(data)) == data


def test_it_fills_the_documented_defaults() -> None:
    http = parse_target({"type": "http", "url": "https://a.example/x"})
    assert isinstance(http, HttpTarget) and (http.method, http.headers, http.timeout_seconds) == (
        "POST",
        {},
        30,
    )
    fn = parse_target({"type": "lambda", "function_arn": FN, "role_arn": ROLE})
    assert isinstance(fn, LambdaTarget) and fn.invocation == "sync"
    sm = parse_target(
        {
            "type": "stepfunctions",
            "state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:s",
            "role_arn": ROLE,
        }
    )
    assert isinstance(sm, StepFunctionsTarget) and sm.wait is False
    assert from_handler("demo.echo") == PythonTarget(handler="demo.echo")


def test_a_fifo_queue_is_known_by_its_name() -> None:
    fifo = SqsTarget(queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo", role_arn=ROLE)
    assert fifo.fifo and not SqsTarget(queue_url="http://127.0.0.1:5000/123456789012/q", role_arn=ROLE).fifo


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown type", {"type": "ftp", "url": "ftp://x"}, "target.type", "must be one of python, http"),
    ("no type", {"url": "https://a.example"}, "target.type", "must be one of"),
    ("missing url", {"type": "http"}, "target.url", "is required"),
    ("url scheme", {"type": "http", "url": "file:///etc/passwd"}, "target.url", "http:// or https://"),
    ("url without host", {"type": "http", "url": "https:///x"}, "target.url", "must name a host"),
    (
        "url with password",
        {"type": "http", "url": "https://u:p@a.example/"},
        "target.url",
        "user or password",
    ),
    ("metadata ipv4", {"type": "http", "url": "http://169.254.169.254/latest"}, "target.url", "metadata"),
    ("link-local", {"type": "http", "url": "http://169.254.1.1/"}, "target.url", "link-local"),
    ("metadata ipv6", {"type": "http", "url": "http://[fd00:ec2::254]/"}, "target.url", "metadata"),
    (
        "metadata v4-mapped",
        {"type": "http", "url": "http://[::ffff:169.254.169.254]/"},
        "target.url",
        "metadata",
    ),
    ("metadata decimal", {"type": "http", "url": "http://2852039166/"}, "target.url", "metadata"),
    ("metadata hex", {"type": "http", "url": "http://0xa9.0xfe.0xa9.0xfe/"}, "target.url", "metadata"),
    ("metadata name", {"type": "http", "url": "http://metadata.google.internal/"}, "target.url", "metadata"),
    ("method", {"type": "http", "url": "https://a.example", "method": "GET"}, "target.method", "'POST'"),
    (
        "timeout",
        {"type": "http", "url": "https://a.example", "timeout_seconds": 0},
        "target.timeout_seconds",
        "",
    ),
    ("unknown field", {"type": "http", "url": "https://a.example", "verb": "POST"}, "target.verb", ""),
    (
        "host header",
        {"type": "http", "url": "https://a.example", "headers": {"Host": "b"}},
        "target.headers",
        "'Host' is reserved",
    ),
    (
        "content-length",
        {"type": "http", "url": "https://a.example", "headers": {"content-length": "1"}},
        "target.headers",
        "reserved",
    ),
    (
        "x-jobsched-*",
        {"type": "http", "url": "https://a.example", "headers": {"X-Jobsched-Signature": "x"}},
        "target.headers",
        "reserved",
    ),
    (
        "idempotency-key",
        {"type": "http", "url": "https://a.example", "headers": {"Idempotency-Key": "k"}},
        "target.headers",
        "reserved",
    ),
    (
        "header injection",
        {"type": "http", "url": "https://a.example", "headers": {"A": "x\r\nHost: b"}},
        "target.headers",
        "line break",
    ),
    (
        "header name",
        {"type": "http", "url": "https://a.example", "headers": {"A B": "x"}},
        "target.headers",
        "not a valid header name",
    ),
    (
        "duplicate header",
        {"type": "http", "url": "https://a.example", "headers": {"A": "1", "a": "2"}},
        "target.headers",
        "given twice",
    ),
    (
        "too many headers",
        {
            "type": "http",
            "url": "https://a.example",
            "headers": {f"H{i}": "v" for i in range(MAX_HEADERS + 1)},
        },
        "target.headers",
        f"the limit is {MAX_HEADERS}",
    ),
    (
        "oversized headers",
        {"type": "http", "url": "https://a.example", "headers": {"Big": "v" * MAX_HEADER_BYTES}},
        "target.headers",
        f"the limit is {MAX_HEADER_BYTES}",
    ),
    (
        "function not an ARN",
        {"type": "lambda", "function_arn": "my-fn", "role_arn": ROLE},
        "target.function_arn",
        "Lambda function ARN",
    ),
    (
        "function is a layer",
        {"type": "lambda", "function_arn": "arn:aws:lambda:us-east-1:123456789012:layer:l", "role_arn": ROLE},
        "target.function_arn",
        "Lambda function ARN",
    ),
    (
        "invocation",
        {"type": "lambda", "function_arn": FN, "invocation": "later", "role_arn": ROLE},
        "target.invocation",
        "",
    ),
    ("missing role", {"type": "lambda", "function_arn": FN}, "target.role_arn", "is required"),
    (
        "role is a user",
        {"type": "lambda", "function_arn": FN, "role_arn": "arn:aws:iam::123456789012:user/u"},
        "target.role_arn",
        "IAM role ARN",
    ),
    (
        "role of no account",
        {
            "type": "sns",
            "topic_arn": "arn:aws:sns:us-east-1:123456789012:t",
            "role_arn": "arn:aws:iam:::role/r",
        },
        "target.role_arn",
        "IAM role ARN",
    ),
    (
        "queue url",
        {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/q", "role_arn": ROLE},
        "target.queue_url",
        "SQS queue URL",
    ),
    (
        "group id",
        {
            "type": "sqs",
            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo",
            "message_group_id": "a b",
            "role_arn": ROLE,
        },
        "target.message_group_id",
        "1 to 128",
    ),
    (
        "topic",
        {"type": "sns", "topic_arn": "arn:aws:sqs:us-east-1:123456789012:t", "role_arn": ROLE},
        "target.topic_arn",
        "SNS topic ARN",
    ),
    (
        "bus",
        {"type": "eventbridge", "event_bus_name": "a b", "source": "s", "detail_type": "d", "role_arn": ROLE},
        "target.event_bus_name",
        "event bus",
    ),
    (
        "aws source",
        {
            "type": "eventbridge",
            "event_bus_name": "default",
            "source": "aws.ec2",
            "detail_type": "d",
            "role_arn": ROLE,
        },
        "target.source",
        "aws.",
    ),
    (
        "no detail type",
        {"type": "eventbridge", "event_bus_name": "default", "source": "s", "role_arn": ROLE},
        "target.detail_type",
        "is required",
    ),
    (
        "state machine",
        {
            "type": "stepfunctions",
            "state_machine_arn": "arn:aws:states:us-east-1:123456789012:execution:sm:x",
            "role_arn": ROLE,
        },
        "target.state_machine_arn",
        "state machine ARN",
    ),
    ("python handler", {"type": "python", "handler": ""}, "target.handler", ""),
]


@pytest.mark.parametrize(("case", "data", "field", "words"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_target_is_refused_naming_its_field(
    case: str, data: dict[str, Any], field: str, words: str
) -> None:
    # Given a target with one bad input, when it is parsed
    with pytest.raises(ValidationFailed) as refused:
        parse_target(data)
    # Then the error names the field, as the API's 400 will, and says what is wrong
    assert refused.value.field == field, case
    assert refused.value.status == 400
    assert str(refused.value).startswith(f"{field}: ")
    assert words in str(refused.value)


def test_headers_just_within_the_limits_are_accepted() -> None:
    # Given MAX_HEADERS headers whose "Name: value\r\n" lines add up to exactly MAX_HEADER_BYTES
    names = [f"H{i:02d}" for i in range(MAX_HEADERS)]
    line_overhead = len("H00: \r\n")
    each = MAX_HEADER_BYTES // MAX_HEADERS - line_overhead
    headers = {name: "v" * each for name in names}
    headers[names[0]] += "v" * (MAX_HEADER_BYTES - sum(len(f"{n}: {v}\r\n") for n, v in headers.items()))
    # When parsed, then they are kept as given
    spec = parse_target({"type": "http", "url": "https://a.example", "headers": headers})
    assert isinstance(spec, HttpTarget) and spec.headers == headers


def test_a_target_is_frozen() -> None:
    spec = HttpTarget(url="https://a.example")
    with pytest.raises(ValueError, match="frozen"):
        spec.url = "https://b.example"  # type: ignore[misc]
