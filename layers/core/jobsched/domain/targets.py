"""Targets: what a run calls, as frozen, validated value objects (a union tagged by "type").

Every field is checked here, before anything is written, with a message that names it: a target
is refused at create or PATCH, never discovered broken at its first tick. What only the network
can tell (where a host name resolves today) is checked again at every call by
jobsched.adapters.targets.ssrf; what is checked here is what the spec itself says.

Limits chosen where AWS or HTTP leave them open:
- HTTP headers: at most MAX_HEADERS (50) user headers and MAX_HEADER_BYTES (8 KiB) in all, counted
  as the bytes of "Name: value\\r\\n" in UTF-8 (8 KiB is the smallest request-header limit of the
  common servers and proxies: nginx's default large_client_header_buffers line, AWS ALB's 16 KiB
  per header is larger); a receiver that refuses them would fail every attempt, the same way.
- Headers jobsched sets itself (Idempotency-Key, X-Jobsched-*), and those that describe the framing
  of the request (Host, Content-Length, Transfer-Encoding, Connection), cannot be given: a user
  value would either break the signature contract or smuggle a second request.
- A URL is at most 2048 characters, names no user or password (they would sit in every log line
  that names the target), and its scheme is http or https.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from jobsched.errors import JobschedError, ValidationFailed

MAX_HEADERS = 50
MAX_HEADER_BYTES = 8 * 1024
MAX_URL_CHARS = 2048
MAX_HTTP_TIMEOUT_SECONDS = 900  # the longest a worker Lambda lives
FORBIDDEN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "idempotency-key"}
)
RESERVED_HEADER_PREFIX = "x-jobsched-"

# Link-local (IPv4 169.254.0.0/16 holds the EC2, ECS and Lambda metadata/credential endpoints;
# IPv6 fe80::/10) and the EC2 IPv6 metadata address: refused always, whatever the operator allows.
METADATA_NETWORKS = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::254/128"),
)
# Names that mean the metadata service on some cloud, refused without asking DNS.
METADATA_NAMES = frozenset(
    {"instance-data", "instance-data.ec2.internal", "metadata", "metadata.google.internal"}
)

_PARTITION = r"aws(?:-cn|-us-gov|-iso|-iso-b)?"
_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d"
_ACCOUNT = r"\d{12}"
_ROLE_ARN = re.compile(
    rf"^arn:{_PARTITION}:iam::{_ACCOUNT}:role/(?:[\x21-\x7e]{{1,510}}/)?[\w+=,.@-]{{1,64}}$"
)
_LAMBDA_ARN = re.compile(
    rf"^arn:{_PARTITION}:lambda:{_REGION}:{_ACCOUNT}:function:[A-Za-z0-9_-]{{1,64}}(?::(?:\$LATEST|[A-Za-z0-9_-]{{1,128}}))?$"
)
_TOPIC_ARN = re.compile(rf"^arn:{_PARTITION}:sns:{_REGION}:{_ACCOUNT}:[A-Za-z0-9_-]{{1,256}}(?:\.fifo)?$")
_STATE_MACHINE_ARN = re.compile(
    rf"^arn:{_PARTITION}:states:{_REGION}:{_ACCOUNT}:stateMachine:[A-Za-z0-9_-]{{1,80}}$"
)
_BUS_NAME = re.compile(r"^[/.\-_A-Za-z0-9]{1,256}$")
_BUS_ARN = re.compile(rf"^arn:{_PARTITION}:events:{_REGION}:{_ACCOUNT}:event-bus/[/.\-_A-Za-z0-9]{{1,256}}$")
_QUEUE_PATH = re.compile(rf"^/{_ACCOUNT}/[A-Za-z0-9_-]{{1,80}}(?:\.fifo)?$")
# SQS MessageGroupId: 1..128 of alphanumerics and punctuation.
_GROUP_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
# RFC 9110 token characters: what a header name may hold.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def _role(value: str) -> str:
    if not _ROLE_ARN.match(value):
        raise ValueError("must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
    return value


RoleArn = Annotated[str, Field(max_length=2048, description="The tenant's IAM role jobsched assumes.")]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _AwsSpec(_Spec):
    role_arn: RoleArn
    """The caller's role, assumed with ExternalId = <tenant>: the target acts with its rights only."""

    @field_validator("role_arn")
    @classmethod
    def _role_arn(cls, value: str) -> str:
        return _role(value)


class PythonTarget(_Spec):
    """A handler of the worker's registry (jobsched.handlers), called with (payload, context)."""

    type: Literal["python"] = "python"
    handler: str = Field(min_length=1, max_length=200)


class HttpTarget(_Spec):
    """A webhook: the envelope as the JSON body, signed, with the run's idempotency key."""

    type: Literal["http"] = "http"
    url: str = Field(max_length=MAX_URL_CHARS)
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    """Methods with a body: the body is the envelope the signature covers."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers (see the module docstring for the limits and the forbidden names)."""
    timeout_seconds: float = Field(default=30, gt=0, le=MAX_HTTP_TIMEOUT_SECONDS)
    """Longest the call may take, connect to last byte (the job's timeout_seconds bounds the attempt)."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https"):
            raise ValueError("must be an http:// or https:// URL")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not hold a user or password (use headers)")
        try:
            host = parts.hostname
            _ = parts.port  # a non-numeric port raises here
        except ValueError as exc:
            raise ValueError(f"is not a valid URL: {exc}") from None
        if not host:
            raise ValueError("must name a host")
        if address_literal(host) is None:
            try:
                host.encode("idna")  # what the resolver does first: an empty or 64+ char label fails
            except UnicodeError:
                raise ValueError(f"{host!r} is not a valid host name") from None
        refused = metadata_reason(host)
        if refused:
            raise ValueError(refused)
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_HEADERS:
            raise ValueError(f"has {len(value)} headers; the limit is {MAX_HEADERS}")
        seen: set[str] = set()
        total = 0
        for name, text in value.items():
            lower = name.lower()
            if not _TOKEN.match(name):
                raise ValueError(f"{name!r} is not a valid header name")
            if lower in FORBIDDEN_HEADERS or lower.startswith(RESERVED_HEADER_PREFIX):
                raise ValueError(f"{name!r} is reserved (jobsched sets it) and cannot be given")
            if lower in seen:
                raise ValueError(f"{name!r} is given twice")
            if any(ch in text for ch in "\r\n\x00"):
                raise ValueError(f"{name!r} holds a line break or NUL")
            seen.add(lower)
            total += len(f"{name}: {text}\r\n".encode())
        if total > MAX_HEADER_BYTES:
            raise ValueError(f"are {total} bytes; the limit is {MAX_HEADER_BYTES}")
        return value


class LambdaTarget(_AwsSpec):
    """A Lambda function: sync waits for its answer (RequestResponse); async only hands it over (Event)."""

    type: Literal["lambda"] = "lambda"
    function_arn: str = Field(max_length=256)
    invocation: Literal["sync", "async"] = "sync"

    @field_validator("function_arn")
    @classmethod
    def _function_arn(cls, value: str) -> str:
        if not _LAMBDA_ARN.match(value):
            raise ValueError(
                "must be a Lambda function ARN (arn:aws:lambda:<region>:<account>:function:<name>)"
            )
        return value


class SqsTarget(_AwsSpec):
    """An SQS queue: the envelope is the message body (FIFO: deduplicated by the run's effect key)."""

    type: Literal["sqs"] = "sqs"
    queue_url: str = Field(max_length=MAX_URL_CHARS)
    message_group_id: str | None = None
    """FIFO queues: the message group (default: the job id, so one job's runs stay in order)."""

    @field_validator("queue_url")
    @classmethod
    def _queue_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or not _QUEUE_PATH.match(parts.path):
            raise ValueError("must be an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)")
        return value

    @field_validator("message_group_id")
    @classmethod
    def _group(cls, value: str | None) -> str | None:
        if value is not None and not _GROUP_ID.match(value):
            raise ValueError("must be 1 to 128 letters, digits or punctuation")
        return value

    @property
    def fifo(self) -> bool:
        """Whether the queue is FIFO (its name ends in .fifo)."""
        return urlsplit(self.queue_url).path.endswith(".fifo")


class SnsTarget(_AwsSpec):
    """An SNS topic: the envelope is the message (FIFO: grouped by job, deduplicated by effect key)."""

    type: Literal["sns"] = "sns"
    topic_arn: str = Field(max_length=512)

    @field_validator("topic_arn")
    @classmethod
    def _topic_arn(cls, value: str) -> str:
        if not _TOPIC_ARN.match(value):
            raise ValueError("must be an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)")
        return value

    @property
    def fifo(self) -> bool:
        """Whether the topic is FIFO (its name ends in .fifo)."""
        return self.topic_arn.endswith(".fifo")


class EventBridgeTarget(_AwsSpec):
    """An EventBridge bus: one event whose detail is the envelope."""

    type: Literal["eventbridge"] = "eventbridge"
    event_bus_name: str = Field(max_length=1600)
    source: str = Field(min_length=1, max_length=256)
    detail_type: str = Field(min_length=1, max_length=128)

    @field_validator("event_bus_name")
    @classmethod
    def _bus(cls, value: str) -> str:
        if not (_BUS_NAME.match(value) or _BUS_ARN.match(value)):
            raise ValueError("must be an event bus name or ARN")
        return value

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if value.startswith("aws."):
            raise ValueError("must not start with 'aws.' (EventBridge reserves it for AWS services)")
        return value


class StepFunctionsTarget(_AwsSpec):
    """A state machine: one execution per run, named after it; with wait, the run takes its outcome."""

    type: Literal["stepfunctions"] = "stepfunctions"
    state_machine_arn: str = Field(max_length=256)
    wait: bool = False

    @field_validator("state_machine_arn")
    @classmethod
    def _state_machine_arn(cls, value: str) -> str:
        if not _STATE_MACHINE_ARN.match(value):
            raise ValueError(
                "must be a state machine ARN (arn:aws:states:<region>:<account>:stateMachine:<name>)"
            )
        return value


# A Fargate task definition, by ARN with its revision (what RunTask takes and a run can be pinned to).
_TASK_DEFINITION_ARN = re.compile(
    rf"^arn:{_PARTITION}:ecs:{_REGION}:{_ACCOUNT}:task-definition/[A-Za-z0-9_-]{{1,255}}:\d{{1,10}}$"
)
# An image reference: [registry/]repository[:tag][@digest], printable ASCII without spaces.
_IMAGE = re.compile(r"^[a-z0-9][\x21-\x7e]{0,1023}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
# Environment names jobsched sets on a container target's task (the run's envelope): not the caller's.
RESERVED_ENV_PREFIX = "JOBSCHED_"
# RunTask refuses overrides above 8 KiB (the containerOverrides JSON): the caller's share of it.
MAX_CONTAINER_OVERRIDE_BYTES = 4096


class EcsTarget(_Spec):
    """A container: one Fargate task per run, sized by the job's resources (domain.compute), from
    `image` (jobsched registers a task definition for it) or the caller's `task_definition_arn`
    (exactly one of them). Exit code 0 succeeds; any other fails the attempt with ExitCode."""

    type: Literal["ecs"] = "ecs"
    image: str | None = Field(default=None, max_length=1024)
    task_definition_arn: str | None = Field(default=None, max_length=2048)
    command: list[Annotated[str, Field(max_length=1024)]] = Field(default_factory=list, max_length=100)
    """The container's command (overrides the image's or the task definition's)."""
    environment: dict[str, Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict, max_length=50
    )
    """Extra environment variables; names starting JOBSCHED_ are jobsched's (the run's envelope)."""

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and not _IMAGE.match(value):
            raise ValueError("must be an image reference ([registry/]repository[:tag][@digest], no spaces)")
        return value

    @field_validator("task_definition_arn")
    @classmethod
    def _task_definition_arn(cls, value: str | None) -> str | None:
        if value is not None and not _TASK_DEFINITION_ARN.match(value):
            raise ValueError(
                "must be a task definition ARN with its revision "
                "(arn:aws:ecs:<region>:<account>:task-definition/<family>:<revision>)"
            )
        return value

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if name.upper().startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{name!r}: names starting {RESERVED_ENV_PREFIX} are jobsched's")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> EcsTarget:
        if (self.image is None) == (self.task_definition_arn is None):
            raise ValueError("give exactly one of image and task_definition_arn")
        size = len(json.dumps({"command": self.command, "environment": self.environment}).encode())
        if size > MAX_CONTAINER_OVERRIDE_BYTES:
            raise ValueError(
                f"command and environment are {size} bytes as JSON; "
                f"the limit is {MAX_CONTAINER_OVERRIDE_BYTES}"
            )
        return self


class WorkerTarget(_Spec):
    """A handler run by an external worker of the tenant's pool (jobsched.services.workers), from the
    worker's own registry; placed by best fit on a worker whose labels carry every one of `labels`."""

    type: Literal["worker"] = "worker"
    pool: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    handler: str = Field(min_length=1, max_length=200)
    labels: dict[str, str] = Field(default_factory=dict, max_length=20)


TargetSpec = Annotated[
    PythonTarget
    | HttpTarget
    | LambdaTarget
    | SqsTarget
    | SnsTarget
    | EventBridgeTarget
    | StepFunctionsTarget
    | EcsTarget
    | WorkerTarget,
    Field(discriminator="type"),
]
"""A job's target: one of the kinds above, chosen by its "type"."""
TARGET_TYPES = ("python", "http", "lambda", "sqs", "sns", "eventbridge", "stepfunctions", "ecs", "worker")
AwsTarget = LambdaTarget | SqsTarget | SnsTarget | EventBridgeTarget | StepFunctionsTarget

_ADAPTER: TypeAdapter[TargetSpec] = TypeAdapter(TargetSpec)


def parse_target(data: Mapping[str, Any]) -> TargetSpec:
    """The target `data` describes; raises ValidationFailed naming the field (target.<name>)."""
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = target_field(first["loc"], first["type"])
        if field == "target" and data.get("type") == "ecs":
            field = "target.image"  # the ecs target's own check: exactly one of image, task_definition_arn
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            msg = f"must be one of {', '.join(TARGET_TYPES)}"
        elif first["type"] == "missing":
            msg = "is required"
        raise ValidationFailed(f"{field}: {msg}", field=field) from None


def describe(spec: TargetSpec) -> str:
    """One line naming what `spec` calls (alerts and logs): the handler, or "<type> <resource>"."""
    if isinstance(spec, PythonTarget):
        return spec.handler
    if isinstance(spec, HttpTarget):
        return f"http {spec.method} {spec.url}"
    if isinstance(spec, WorkerTarget):
        return f"worker {spec.pool} {spec.handler}"
    if isinstance(spec, EcsTarget):
        return f"ecs {spec.image or spec.task_definition_arn}"
    resource = {
        "lambda": getattr(spec, "function_arn", ""),
        "sqs": getattr(spec, "queue_url", ""),
        "sns": getattr(spec, "topic_arn", ""),
        "eventbridge": getattr(spec, "event_bus_name", ""),
        "stepfunctions": getattr(spec, "state_machine_arn", ""),
    }[spec.type]
    return f"{spec.type} {resource}"


def from_handler(handler: str) -> PythonTarget:
    """The shorthand `handler` as its target."""
    return PythonTarget(handler=handler)


def target_field(loc: Sequence[int | str], error_type: str = "") -> str:
    """The caller's name of the field a target validation error is about: `target.<field>`.

    pydantic's loc of a tagged union starts with the tag ("http", "url"): the tag is the value
    of `type`, not a field, so it is dropped.
    """
    if error_type in ("union_tag_invalid", "union_tag_not_found"):
        return "target.type"
    parts = [str(p) for p in loc]
    if parts and parts[0] in TARGET_TYPES:
        parts = parts[1:]
    return ".".join(["target", *parts])


def metadata_reason(host: str) -> str | None:
    """Why `host` (a URL's host: a name or an address literal) is never a target; None if not known bad.

    Address literals in every form a resolver accepts are read as addresses: "169.254.169.254",
    "[fd00:ec2::254]", "::ffff:169.254.169.254", and the legacy forms inet_aton takes
    ("2852039166", "0xa9.0xfe.0xa9.0xfe"), which getaddrinfo would otherwise resolve to metadata.
    """
    name = host.strip("[]").rstrip(".").lower()
    if name in METADATA_NAMES:
        return f"names a cloud metadata service ({name}): refused"
    address = address_literal(name)
    if address is not None and is_metadata(address):
        return f"is a link-local or metadata address ({address}): refused"
    return None


def address_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `host` spells, or None when it is a name (see metadata_reason for the forms)."""
    name = host.strip("[]")
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", name):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    return None


def is_metadata(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `address` is link-local or a cloud metadata address (also as IPv4-mapped IPv6)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in net for net in METADATA_NETWORKS if net.version == address.version)


# -- how a call to a target fails -------------------------------------------------------------------
# HTTP statuses that say "try again later" (RFC 9110 408, RFC 8470 425, RFC 6585 429).
RETRYABLE_STATUSES = frozenset({408, 425, 429})
ADDRESS_REFUSED = "AddressRefused"
# A container stopped because its run was cancelled (POST /api/runs/{id}/cancel): what it did is
# its outcome, and a cancel is never answered with another attempt.
CANCELLED = "Cancelled"
_FINAL_HTTP = re.compile(r"^HTTP[34]\d\d$")


def final_error_type(error_type: str) -> bool:
    """Whether an attempt that failed with `error_type` is never retried, whatever the job's policy.

    A target's final answer: an HTTP 3xx that was not followed or a 4xx other than 408/425/429
    (`HTTP<code>`), an address the SSRF guard refused, or a container its run's cancel stopped.
    Derived from the stored error type, so a worker that died between recording the failure and
    handing it over decides the same way.
    """
    if error_type in (ADDRESS_REFUSED, CANCELLED):
        return True
    return bool(_FINAL_HTTP.match(error_type)) and int(error_type[4:]) not in RETRYABLE_STATUSES


class TargetFailed(JobschedError):
    """An attempt's call to its target failed; `error_type` is the run's error type.

    The job's policy decides about a retry (non_retryable_errors name error types); `retry_after`
    is the target's own hint (HTTP Retry-After, in seconds), for the retry policy to honour within
    its backoff bounds.
    """

    status = 502
    code = "target_failed"

    def __init__(self, message: str, *, error_type: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.retry_after = retry_after


class FinalTargetFailure(TargetFailed):
    """A failure no retry can mend (final_error_type holds for its error type): dead-lettered at once."""

    def __init__(self, message: str, *, error_type: str) -> None:
        if not final_error_type(error_type):
            raise ValueError(f"{error_type} is not a final error type")
        super().__init__(message, error_type=error_type)
