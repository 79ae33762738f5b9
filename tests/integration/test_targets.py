"""Targets against real peers: an HTTP server on loopback, moto for AWS, a Lambda Invoke server.

- http: a `http.server` the test starts on a free loopback port, scripted per path (a status,
  a Retry-After, a hang, a redirect); it records every request and verifies the signature itself
  with the secret, using hmac directly, not the adapter's code.
- sqs, sns, eventbridge, stepfunctions, sts: boto3 against the embedded moto server (the local
  stack's, Step Functions executing for real), every call made with credentials from AssumeRole.
- lambda: boto3's real lambda client pointed at a loopback server that speaks Lambda's Invoke
  wire protocol (see LambdaInvokeServer for why that is faithful).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import boto3
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jobsched.adapters.targets import (
    AssumedRoles,
    EventBridgePutter,
    HttpCaller,
    LambdaInvoker,
    SnsPublisher,
    SqsSender,
    StepFunctionsStarter,
)
from jobsched.adapters.targets.credentials import REFRESH_MARGIN
from jobsched.adapters.targets.lambda_ import LAMBDA_CONFIG
from jobsched.adapters.targets.ssrf import AddressPolicy
from jobsched.domain.targets import (
    ADDRESS_REFUSED,
    EventBridgeTarget,
    FinalTargetFailure,
    HttpTarget,
    LambdaTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
    TargetFailed,
)
from jobsched.handlers import RunContext
from jobsched.local import loopback
from jobsched.ports import FakeClock

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SECRET = "whsec_" + "k" * 32
TENANT = "tenant-a"
ROLE = "arn:aws:iam::123456789012:role/jobsched-target"


def envelope(attempt: int = 1, job_id: str = "job-1") -> dict[str, Any]:
    run_id = f"{job_id}-{int(T0.timestamp() * 1000)}"
    return {
        "job_id": job_id,
        "run_id": run_id,
        "tenant": TENANT,
        "scheduled_for": T0.isoformat(),
        "attempt": attempt,
        "effect_key": run_id,
        "payload": {"n": 1, "text": "héllo"},
    }


def context(env: dict[str, Any], beats: list[int] | None = None) -> RunContext:
    return RunContext(
        job_id=env["job_id"],
        run_id=env["run_id"],
        tenant=env["tenant"],
        scheduled_for=T0,
        attempt=env["attempt"],
        effect_key=env["effect_key"],
        beat=(lambda: beats.append(1)) if beats is not None else None,
    )


# -- http -----------------------------------------------------------------------------------------
@dataclass
class Seen:
    """One request the hook server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    signature_valid: bool


Route = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class HookServer:
    """A webhook receiver on a free loopback port; each path answers as its route says."""

    secret: str
    clock: FakeClock
    routes: dict[str, Route] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def start(self) -> HookServer:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                hook.seen.append(
                    Seen(self.command, self.path, dict(self.headers.items()), body, hook.verify(self, body))
                )
                hook.routes.get(self.path, _status(404))(self)

            do_POST = do_PUT = do_PATCH = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = loopback.serve(Handler, name="hook-server")
        return self

    @property
    def url(self) -> str:
        return self.server.url

    def verify(self, request: BaseHTTPRequestHandler, body: bytes) -> bool:
        """The receiver's check: t fresh within 5 min, v1 = HMAC-SHA256(secret, "<t>.<body>")."""
        header = request.headers.get("X-Jobsched-Signature", "")
        match = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", header)
        if not match:
            return False
        t, given = match.group(1), match.group(2)
        expected = hmac.new(self.secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
        fresh = abs(self.clock.now().timestamp() - int(t)) <= 300
        return fresh and hmac.compare_digest(expected, given)

    def stop(self) -> None:
        self.release.set()
        self.server.stop()


def _status(code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Route:
    def answer(request: BaseHTTPRequestHandler) -> None:
        request.send_response(code)
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    return answer


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def hook(clock: FakeClock) -> Iterator[HookServer]:
    server = HookServer(SECRET, clock).start()
    yield server
    server.stop()


def caller(url: str, clock: FakeClock, policy: AddressPolicy | None = None, **spec: Any) -> HttpCaller:
    secrets = {TENANT: SECRET}
    return HttpCaller(
        HttpTarget(url=url, **spec),
        signing_secret=lambda tenant: secrets[tenant],
        policy=policy or AddressPolicy.local(),
        clock=clock,
    )


def call(target: HttpCaller, env: dict[str, Any] | None = None) -> object:
    env = env or envelope()
    return target.invoke(env, context(env))


def test_a_2xx_succeeds_with_the_envelope_signed_and_keyed_and_its_answer_as_the_result(
    hook: HookServer, clock: FakeClock
) -> None:
    # Given a receiver that answers 200 with JSON
    hook.routes["/hook"] = _status(200, b'{"accepted": true}', {"Content-Type": "application/json"})
    env = envelope()
    # When the http target calls it
    result = call(caller(f"{hook.url}/hook", clock, headers={"X-Team": "blue"}), env)
    # Then the answer is the result, and the receiver got the envelope as the JSON body, with the
    # run's idempotency key, its run id, the user's header, and a signature it verifies itself
    assert result == {"accepted": True}
    (seen,) = hook.seen
    assert seen.method == "POST" and json.loads(seen.body) == env
    assert seen.headers["Idempotency-Key"] == env["effect_key"]
    assert seen.headers["X-Jobsched-Run-Id"] == env["run_id"]
    assert seen.headers["X-Team"] == "blue"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Host"] == hook.url.removeprefix("http://")
    assert seen.signature_valid
    assert seen.headers["X-Jobsched-Signature"].startswith(f"t={int(T0.timestamp())},v1=")


def test_every_attempt_of_one_run_carries_the_same_idempotency_key(
    hook: HookServer, clock: FakeClock
) -> None:
    hook.routes["/hook"] = _status(204)
    target = caller(f"{hook.url}/hook", clock)
    assert call(target, envelope(attempt=1)) is None
    clock.advance(60)
    assert call(target, envelope(attempt=2)) is None
    first, second = hook.seen
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"] == envelope()["effect_key"]
    assert first.headers["X-Jobsched-Signature"] != second.headers["X-Jobsched-Signature"]  # new t, body
    assert first.signature_valid and second.signature_valid


def test_a_signature_made_with_another_secret_does_not_verify(hook: HookServer, clock: FakeClock) -> None:
    # Given a receiver holding the tenant's secret, and a target signing with a rotated-away one
    hook.routes["/hook"] = _status(200)
    target = HttpCaller(
        HttpTarget(url=f"{hook.url}/hook"),
        signing_secret=lambda tenant: "old-secret",
        policy=AddressPolicy.local(),
        clock=clock,
    )
    call(target)
    # Then the receiver's own check fails: the signature really depends on the secret
    assert hook.seen[0].signature_valid is False


def test_a_signature_older_than_the_receivers_window_does_not_verify(
    hook: HookServer, clock: FakeClock
) -> None:
    hook.routes["/hook"] = _status(200)
    target = caller(f"{hook.url}/hook", clock)
    call(target)
    # When the receiver's clock is 10 minutes on (a replayed capture), the same request is stale
    clock.advance(600)
    assert not hook.verify(_Replayed(hook.seen[0].headers), hook.seen[0].body)


class _Replayed:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


def test_the_result_keeps_at_most_4_kib_of_the_body(hook: HookServer, clock: FakeClock) -> None:
    hook.routes["/hook"] = _status(200, b"x" * 10_000)
    result = call(caller(f"{hook.url}/hook", clock))
    assert result == {"body": "x" * 4096, "truncated": True}


@pytest.mark.parametrize("code", [408, 425, 429, 500, 502, 503, 504])
def test_a_408_425_429_or_5xx_is_a_retryable_failure_named_after_its_status(
    hook: HookServer, clock: FakeClock, code: int
) -> None:
    hook.routes["/hook"] = _status(code, b"busy")
    with pytest.raises(TargetFailed) as failed:
        call(caller(f"{hook.url}/hook", clock))
    assert failed.value.error_type == f"HTTP{code}"
    assert not isinstance(failed.value, FinalTargetFailure)
    assert "busy" in str(failed.value)


def test_retry_after_is_exposed_on_the_error_in_seconds_or_as_a_date(
    hook: HookServer, clock: FakeClock
) -> None:
    # Given a 429 with Retry-After in seconds, and a 503 with an HTTP date 90 s from now
    hook.routes["/seconds"] = _status(429, headers={"Retry-After": "7"})
    hook.routes["/date"] = _status(
        503, headers={"Retry-After": format_datetime(T0 + timedelta(seconds=90), True)}
    )
    hook.routes["/forever"] = _status(429, headers={"Retry-After": "99999999"})
    waits = []
    for path in ("/seconds", "/date", "/forever"):
        with pytest.raises(TargetFailed) as failed:
            call(caller(f"{hook.url}{path}", clock))
        waits.append(failed.value.retry_after)
    # Then the error carries the wait in seconds, capped at a day, for the retry policy to honour
    assert waits == [7.0, 90.0, 86_400.0]


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 422])
def test_any_other_4xx_is_a_final_failure_named_after_its_status(
    hook: HookServer, clock: FakeClock, code: int
) -> None:
    hook.routes["/hook"] = _status(code, b"nope")
    with pytest.raises(FinalTargetFailure) as failed:
        call(caller(f"{hook.url}/hook", clock))
    assert failed.value.error_type == f"HTTP{code}"
    assert len(hook.seen) == 1


def test_a_receiver_that_hangs_past_the_timeout_is_a_retryable_timeout(
    hook: HookServer, clock: FakeClock
) -> None:
    # Given a receiver that never answers (until the test ends)
    hook.routes["/hang"] = lambda request: hook.release.wait(30) and None
    # When the target calls it with a short timeout, then the attempt fails as HTTPTimeout
    with pytest.raises(TargetFailed) as failed:
        call(caller(f"{hook.url}/hang", clock, timeout_seconds=0.3))
    assert failed.value.error_type == "HTTPTimeout" and not isinstance(failed.value, FinalTargetFailure)
    assert len(hook.seen) == 1


def test_nothing_listening_is_a_retryable_connection_error(clock: FakeClock) -> None:
    # Given a port nobody listens on (bound, then closed)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    with pytest.raises(TargetFailed) as failed:
        call(caller(f"http://127.0.0.1:{port}/hook", clock))
    assert failed.value.error_type == "HTTPConnectionError" and not isinstance(
        failed.value, FinalTargetFailure
    )


def test_a_307_to_the_same_origin_is_followed_with_the_method_and_signed_body(
    hook: HookServer, clock: FakeClock
) -> None:
    hook.routes["/old"] = _status(307, headers={"Location": "/new"})
    hook.routes["/new"] = _status(200, b'"moved"')
    assert call(caller(f"{hook.url}/old", clock, method="PUT")) == "moved"
    first, second = hook.seen
    assert (second.method, second.path, second.body) == ("PUT", "/new", first.body)
    assert second.signature_valid


@pytest.mark.parametrize("code", [301, 302, 303])
def test_a_redirect_that_would_drop_the_body_is_a_final_failure_and_not_followed(
    hook: HookServer, clock: FakeClock, code: int
) -> None:
    hook.routes["/old"] = _status(code, headers={"Location": "/new"})
    with pytest.raises(FinalTargetFailure) as failed:
        call(caller(f"{hook.url}/old", clock))
    assert failed.value.error_type == f"HTTP{code}"
    assert [s.path for s in hook.seen] == ["/old"]


def test_a_redirect_to_another_host_is_not_followed(hook: HookServer, clock: FakeClock) -> None:
    # Given a second receiver (another origin: another port) and a 308 pointing there
    other = HookServer(SECRET, clock).start()
    try:
        other.routes["/stolen"] = _status(200)
        hook.routes["/old"] = _status(308, headers={"Location": f"{other.url}/stolen"})
        # When the target calls the first, then it fails finally and the second sees nothing
        with pytest.raises(FinalTargetFailure, match="another origin") as failed:
            call(caller(f"{hook.url}/old", clock))
        assert failed.value.error_type == "HTTP308"
        assert other.seen == []
    finally:
        other.stop()


def test_on_aws_loopback_and_plain_http_are_refused_at_invoke_time_and_nothing_is_sent(
    hook: HookServer, clock: FakeClock
) -> None:
    hook.routes["/hook"] = _status(200)
    with pytest.raises(FinalTargetFailure) as failed:
        call(caller(f"{hook.url}/hook", clock, policy=AddressPolicy.aws()))
    assert failed.value.error_type == ADDRESS_REFUSED
    allow_http = AddressPolicy(allow_http=True)
    with pytest.raises(FinalTargetFailure, match="non-public"):
        call(caller(f"{hook.url}/hook", clock, policy=allow_http))
    assert hook.seen == []


def test_a_name_that_later_resolves_to_metadata_is_a_final_failure(
    hook: HookServer, clock: FakeClock
) -> None:
    # Given a target accepted for a public name, whose DNS now answers the metadata address
    target = HttpCaller(
        HttpTarget(url="https://hooks.example.com/x"),
        signing_secret=lambda tenant: SECRET,
        policy=AddressPolicy.local(),
        resolve=lambda host, port: ["169.254.169.254"],
        clock=clock,
    )
    # When it is called, then it fails finally without connecting anywhere
    with pytest.raises(FinalTargetFailure) as failed:
        call(target)
    assert failed.value.error_type == ADDRESS_REFUSED


def test_the_vetted_address_is_the_one_connected_to_and_the_name_goes_in_host(
    hook: HookServer, clock: FakeClock
) -> None:
    # Given a name only the target's resolver knows, resolving to the hook server, which
    # redirects within its origin once
    hook.routes["/hook"] = _status(307, headers={"Location": "/final?x=1"})
    hook.routes["/final?x=1"] = _status(200)
    port = hook.server.port
    lookups: list[str] = []
    target = HttpCaller(
        HttpTarget(url=f"http://hooks.internal.test:{port}/hook"),
        signing_secret=lambda tenant: SECRET,
        policy=AddressPolicy.local(),
        resolve=lambda host, p: lookups.append(host) or ["127.0.0.1"],
        clock=clock,
    )
    # When it is called, then both requests reached the vetted address after one lookup (the
    # redirect resolved nothing again), with the name (not the address) as their Host
    call(target)
    assert lookups == ["hooks.internal.test"]
    assert [s.path for s in hook.seen] == ["/hook", "/final?x=1"]
    assert {s.headers["Host"] for s in hook.seen} == {f"hooks.internal.test:{port}"}


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for `name` (and its key), self-signed: the test's own CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def test_https_connects_to_the_vetted_address_with_the_name_as_sni_and_verifies_the_certificate(
    hook: HookServer, clock: FakeClock, tmp_path: Path
) -> None:
    # Given the hook server behind TLS with a certificate for hooks.internal.test, a name only the
    # target's resolver knows (it answers loopback)
    name = "hooks.internal.test"
    cert, key = self_signed(tmp_path, name)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server_names: list[str | None] = []
    tls.sni_callback = lambda sock, server_name, ctx: server_names.append(server_name)  # type: ignore[assignment,misc,unused-ignore]
    hook.server.http.socket = tls.wrap_socket(hook.server.http.socket, server_side=True)
    hook.routes["/hook"] = _status(200, b'"over tls"')
    port = hook.server.port

    def target(url_host: str, ca: Path) -> HttpCaller:
        return HttpCaller(
            HttpTarget(url=f"https://{url_host}:{port}/hook"),
            signing_secret=lambda tenant: SECRET,
            policy=AddressPolicy(allow_private=True),  # https only, loopback allowed
            resolve=lambda host, p: ["127.0.0.1"],
            clock=clock,
            ca_certs=str(ca),
        )

    # When the target calls it, then TLS was made to the vetted address with the name as SNI, the
    # certificate checked against the name, and the signed request arrived
    assert call(target(name, cert)) == "over tls"
    assert server_names == [name]
    assert hook.seen[0].headers["Host"] == f"{name}:{port}" and hook.seen[0].signature_valid
    # And when the server presents a (trusted) certificate of another name, the attempt fails
    (tmp_path / "other").mkdir()
    other_cert, other_key = self_signed(tmp_path / "other", "someone-else.test")
    tls.load_cert_chain(other_cert, other_key)
    with pytest.raises(TargetFailed, match=r"hostname mismatch|doesn.t match") as failed:
        call(target(name, other_cert))
    assert failed.value.error_type == "HTTPConnectionError"
    assert len(hook.seen) == 1


# -- AWS targets through assumed roles, against moto ------------------------------------------------
@pytest.fixture
def admin(endpoint: str) -> Callable[[str], Any]:
    """Set-up clients (the test's own account), against the embedded moto server."""
    return lambda service: boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def roles(endpoint: str) -> AssumedRoles:
    """Assumed-role clients against moto: the sts client is the scheduler's, the rest the tenant's."""
    services = ("sqs", "sns", "events", "stepfunctions")
    return AssumedRoles(
        boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1"),
        region="us-east-1",
        endpoints={service: endpoint for service in services},
    )


def assumed_identity(roles: AssumedRoles, endpoint: str) -> str:
    creds = roles.credentials(ROLE, TENANT)
    sts = boto3.client(
        "sts",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=creds.access_key_id,
        aws_secret_access_key=creds.secret_access_key,
        aws_session_token=creds.session_token,
    )
    return str(sts.get_caller_identity()["Arn"])


def test_a_role_is_assumed_with_the_tenant_as_external_id_and_cached_until_5_minutes_before_expiry(
    endpoint: str,
) -> None:
    # Given assumed roles on a clock, and the AssumeRole requests they make recorded
    sts = boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1")
    asked: list[dict[str, Any]] = []
    sts.meta.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **_: asked.append(dict(params))
    )
    clock = FakeClock(datetime.now(UTC))
    roles = AssumedRoles(sts, region="us-east-1", clock=clock)
    # When the tenant's role is asked for, then STS was asked with ExternalId = the tenant
    first = roles.credentials(ROLE, TENANT)
    assert asked == [
        {
            "RoleArn": ROLE,
            "RoleSessionName": f"jobsched-{TENANT}",
            "ExternalId": TENANT,
            "DurationSeconds": 3600,
        }
    ]
    # and the credentials act as that role's session, named after the tenant
    assert (
        assumed_identity(roles, endpoint)
        == f"arn:aws:sts::123456789012:assumed-role/jobsched-target/jobsched-{TENANT}"
    )
    # Then until 5 minutes before expiry the same credentials come back without another AssumeRole
    clock.set(first.expiration - REFRESH_MARGIN - timedelta(seconds=1))
    assert roles.credentials(ROLE, TENANT) is first and roles.assumed == 1
    # and from then on they are assumed afresh
    clock.set(first.expiration - REFRESH_MARGIN)
    assert roles.credentials(ROLE, TENANT) is not first and roles.assumed == 2
    # and another tenant naming the same role gets its own session, with its own ExternalId
    roles.credentials(ROLE, "tenant-b")
    assert asked[-1]["ExternalId"] == "tenant-b" and roles.assumed == 3


def test_clients_are_built_once_per_session(roles: AssumedRoles) -> None:
    assert roles.client("sqs", ROLE, TENANT) is roles.client("sqs", ROLE, TENANT)
    assert roles.client("sqs", ROLE, TENANT) is not roles.client("sqs", ROLE, "tenant-b")


def test_a_tenant_id_sts_cannot_take_as_external_id_fails_the_attempt_by_name(roles: AssumedRoles) -> None:
    with pytest.raises(TargetFailed) as failed:
        roles.credentials(ROLE, "t")  # ExternalId is 2 characters at least
    assert failed.value.error_type == "InvalidParameter"


def received(admin: Callable[[str], Any], queue_url: str, want: int = 1) -> list[dict[str, Any]]:
    """Every message in the queue (it is short), with its attributes."""
    sqs = admin("sqs")
    got: list[dict[str, Any]] = []
    for _ in range(5):
        answer = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], WaitTimeSeconds=1
        )
        got.extend(answer.get("Messages", []))
        if len(got) >= want:
            break
    return got


def test_the_sqs_target_sends_the_envelope_to_a_standard_queue(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    url = admin("sqs").create_queue(QueueName=f"t-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    env = envelope()
    result = SqsSender(SqsTarget(queue_url=url, role_arn=ROLE), roles=roles).invoke(env, context(env))
    (message,) = received(admin, url)
    assert json.loads(message["Body"]) == env
    assert result == {"message_id": message["MessageId"]}


def test_the_sqs_target_deduplicates_a_redelivered_run_on_a_fifo_queue(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    # Given a FIFO queue (content-based deduplication off: only the dedup id can drop a copy)
    url = admin("sqs").create_queue(
        QueueName=f"t-{uuid.uuid4().hex[:8]}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    target = SqsSender(SqsTarget(queue_url=url, role_arn=ROLE), roles=roles)
    # When one run is sent twice (a retry: attempt 2 has another body, the same effect key)
    for attempt in (1, 2):
        env = envelope(attempt=attempt)
        target.invoke(env, context(env))
    # Then the queue holds one message, grouped by job, deduplicated by the effect key
    depth = admin("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert depth["Attributes"]["ApproximateNumberOfMessages"] == "1"
    (message,) = received(admin, url)
    assert message["Attributes"]["MessageGroupId"] == "job-1"
    assert message["Attributes"]["MessageDeduplicationId"] == envelope()["effect_key"]
    assert json.loads(message["Body"])["attempt"] == 1


def subscribed_queue(admin: Callable[[str], Any], topic_arn: str, fifo: bool = False) -> str:
    sqs = admin("sqs")
    name = f"s-{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"} if fifo else {})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    admin("sns").subscribe(
        TopicArn=topic_arn, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
    )
    return str(url)


def test_the_sns_target_publishes_the_envelope(admin: Callable[[str], Any], roles: AssumedRoles) -> None:
    topic = admin("sns").create_topic(Name=f"t-{uuid.uuid4().hex[:8]}")["TopicArn"]
    queue = subscribed_queue(admin, topic)
    env = envelope()
    result = SnsPublisher(SnsTarget(topic_arn=topic, role_arn=ROLE), roles=roles).invoke(env, context(env))
    (message,) = received(admin, queue)
    assert json.loads(message["Body"]) == env
    assert set(result) == {"message_id"}  # type: ignore[arg-type]


def test_the_sns_target_groups_and_deduplicates_on_a_fifo_topic(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    # Given a FIFO topic (SNS refuses a FIFO publish without a group id) with a FIFO queue behind it
    topic = admin("sns").create_topic(
        Name=f"t-{uuid.uuid4().hex[:8]}.fifo", Attributes={"FifoTopic": "true"}
    )["TopicArn"]
    queue = subscribed_queue(admin, topic, fifo=True)
    env = envelope()
    SnsPublisher(SnsTarget(topic_arn=topic, role_arn=ROLE), roles=roles).invoke(env, context(env))
    (message,) = received(admin, queue)
    assert json.loads(message["Body"]) == env
    assert message["Attributes"]["MessageGroupId"] == "job-1"


def test_the_eventbridge_target_puts_one_event_whose_detail_is_the_envelope(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    # Given a bus whose rule sends the app's events to a queue
    events, sqs = admin("events"), admin("sqs")
    bus = f"b-{uuid.uuid4().hex[:8]}"
    events.create_event_bus(Name=bus)
    url = sqs.create_queue(QueueName=f"e-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="all", EventBusName=bus, EventPattern=json.dumps({"source": ["my.app"]}))
    events.put_targets(Rule="all", EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])
    env = envelope()
    spec = EventBridgeTarget(event_bus_name=bus, source="my.app", detail_type="jobsched.run", role_arn=ROLE)
    # When the target runs
    result = EventBridgePutter(spec, roles=roles).invoke(env, context(env))
    # Then the rule delivered one event of that source and type, whose detail is the envelope
    (message,) = received(admin, url)
    event = json.loads(message["Body"])
    assert (event["source"], event["detail-type"], event["detail"]) == ("my.app", "jobsched.run", env)
    assert result == {"event_id": event["id"]}


def test_an_event_eventbridge_drops_is_a_failure_and_a_missing_bus_names_its_error(
    roles: AssumedRoles,
) -> None:
    # Given an entry EventBridge drops (its Detail garbled on the way: PutEvents then answers 200
    # with FailedEntryCount 1 and the entry's ErrorCode)
    spec = EventBridgeTarget(event_bus_name="default", source="my.app", detail_type="x", role_arn=ROLE)
    client = roles.client("events", ROLE, TENANT)

    def garble(params: dict[str, Any], **_: Any) -> None:
        params["Entries"][0]["Detail"] = "not json"

    client.meta.events.register("provide-client-params.events.PutEvents", garble)
    try:
        with pytest.raises(TargetFailed) as dropped:
            EventBridgePutter(spec, roles=roles).invoke(envelope(), context(envelope()))
    finally:
        client.meta.events.unregister("provide-client-params.events.PutEvents", garble)
    # Then the attempt fails with that error code as its type
    assert dropped.value.error_type == "MalformedDetail"
    # And a bus that does not exist: the AWS error code is the error type
    missing = EventBridgePutter(spec.model_copy(update={"event_bus_name": "no-such-bus"}), roles=roles)
    with pytest.raises(TargetFailed) as failed:
        missing.invoke(envelope(), context(envelope()))
    assert failed.value.error_type == "ResourceNotFoundException"


def state_machine(admin: Callable[[str], Any], states: dict[str, Any], start: str) -> str:
    sfn = admin("stepfunctions")
    return str(
        sfn.create_state_machine(
            name=f"sm-{uuid.uuid4().hex[:8]}",
            roleArn=ROLE,
            definition=json.dumps({"StartAt": start, "States": states}),
        )["stateMachineArn"]
    )


def test_the_stepfunctions_target_starts_one_execution_per_run_named_after_it(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    arn = state_machine(admin, {"Go": {"Type": "Pass", "End": True}}, "Go")
    target = StepFunctionsStarter(StepFunctionsTarget(state_machine_arn=arn, role_arn=ROLE), roles=roles)
    env = envelope()
    # When the run's attempt is delivered twice (a worker died after the start)
    first = target.invoke(env, context(env))
    again = target.invoke(env, context(env))
    # Then one execution exists, named after the run, with the envelope as its input
    executions = admin("stepfunctions").list_executions(stateMachineArn=arn)["executions"]
    assert [e["name"] for e in executions] == [env["run_id"]]
    assert first == again == {"execution_arn": executions[0]["executionArn"]}
    described = admin("stepfunctions").describe_execution(executionArn=executions[0]["executionArn"])
    assert json.loads(described["input"]) == env


def test_a_waiting_stepfunctions_target_takes_a_succeeded_executions_output_as_the_result(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    arn = state_machine(admin, {"Go": {"Type": "Pass", "Result": {"done": 42}, "End": True}}, "Go")
    spec = StepFunctionsTarget(state_machine_arn=arn, wait=True, role_arn=ROLE)
    beats: list[int] = []
    env = envelope()
    result = StepFunctionsStarter(spec, roles=roles, poll_seconds=0.05, timeout_seconds=60).invoke(
        env, context(env, beats)
    )
    assert result == {"done": 42}


def test_a_waiting_stepfunctions_target_fails_with_the_executions_error_and_a_retry_starts_anew(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    arn = state_machine(
        admin, {"Boom": {"Type": "Fail", "Error": "OrderRejected", "Cause": "no stock"}}, "Boom"
    )
    spec = StepFunctionsTarget(state_machine_arn=arn, wait=True, role_arn=ROLE)
    target = StepFunctionsStarter(spec, roles=roles, poll_seconds=0.05, timeout_seconds=60)
    # When attempt 1 runs, then it fails with the execution's error as the error type
    with pytest.raises(TargetFailed, match="no stock") as failed:
        target.invoke(envelope(attempt=1), context(envelope(attempt=1)))
    assert failed.value.error_type == "OrderRejected"
    # And attempt 2 (a retry) starts its own execution instead of re-reading the failed one
    with pytest.raises(TargetFailed):
        target.invoke(envelope(attempt=2), context(envelope(attempt=2)))
    names = sorted(
        e["name"] for e in admin("stepfunctions").list_executions(stateMachineArn=arn)["executions"]
    )
    run_id = envelope()["run_id"]
    assert names == sorted([run_id, f"{run_id}-a2"])


def test_a_waiting_stepfunctions_target_stops_the_execution_at_its_timeout(
    admin: Callable[[str], Any], roles: AssumedRoles
) -> None:
    # Given an execution that waits an hour, and a target whose polls advance a fake clock
    arn = state_machine(admin, {"Long": {"Type": "Wait", "Seconds": 3600, "End": True}}, "Long")
    clock = FakeClock(T0)
    spec = StepFunctionsTarget(state_machine_arn=arn, wait=True, role_arn=ROLE)
    target = StepFunctionsStarter(
        spec, roles=roles, timeout_seconds=30, poll_seconds=10, clock=clock, sleep=lambda s: clock.advance(s)
    )
    beats: list[int] = []
    # When it runs, then the attempt fails as Timeout after the polls, heartbeating between them
    with pytest.raises(TargetFailed) as failed:
        target.invoke(envelope(), context(envelope(), beats))
    assert failed.value.error_type == "Timeout"
    assert len(beats) == 3
    # And the execution was stopped, not left running
    (execution,) = admin("stepfunctions").list_executions(stateMachineArn=arn)["executions"]
    assert execution["status"] == "ABORTED"


# -- lambda ---------------------------------------------------------------------------------------
class LambdaInvokeServer:
    """A loopback server that answers Lambda's Invoke API as Lambda does, running Python functions.

    Why this is faithful: the client is boto3's real lambda client, so the request is serialized,
    SigV4-signed and sent, and the answer parsed, by botocore's Lambda service model, exactly as
    against AWS; only the far end is ours, and it speaks Invoke's documented wire contract:
    POST /2015-03-31/functions/<name, URL-encoded>/invocations with the body as the event and
    X-Amz-Invocation-Type RequestResponse|Event; 200 with the function's JSON answer, or with
    X-Amz-Function-Error: Unhandled and the Python runtime's error body {"errorMessage",
    "errorType", "stackTrace"}; 202 with no body for Event; 404 with x-amzn-ErrorType:
    ResourceNotFoundException for an unknown function. (moto's Lambda needs Docker to run code,
    which this machine lacks.) It also records the signing key id, so a test sees that the
    tenant's assumed credentials made the call.
    """

    def __init__(self) -> None:
        self.functions: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.calls: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                match = re.fullmatch(r"/2015-03-31/functions/([^/]+)/invocations", self.path.split("?")[0])
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if match is None:
                    return self._answer(
                        404, b'{"message":"no such route"}', {"x-amzn-ErrorType": "UnknownOperation"}
                    )
                name = unquote(match.group(1))
                kind = self.headers.get("X-Amz-Invocation-Type", "RequestResponse")
                credential = re.search(r"Credential=([^/]+)/", self.headers.get("Authorization", ""))
                server.calls.append(
                    {
                        "function": name,
                        "type": kind,
                        "event": json.loads(body),
                        "key_id": credential.group(1) if credential else None,
                        "token": self.headers.get("X-Amz-Security-Token"),
                    }
                )
                fn = server.functions.get(name.rsplit(":function:", 1)[-1].split(":")[0])
                if fn is None:
                    message = json.dumps({"Type": "User", "message": f"Function not found: {name}"}).encode()
                    return self._answer(404, message, {"x-amzn-ErrorType": "ResourceNotFoundException"})
                if kind == "Event":
                    return self._answer(202, b"", {})
                try:
                    answer, headers = json.dumps(fn(json.loads(body))).encode(), {}
                except Exception as exc:  # the Python runtime's report of an unhandled exception
                    error = {"errorMessage": str(exc), "errorType": type(exc).__name__, "stackTrace": []}
                    answer, headers = json.dumps(error).encode(), {"X-Amz-Function-Error": "Unhandled"}
                self._answer(200, answer, {"X-Amz-Executed-Version": "$LATEST", **headers})

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = loopback.serve(Handler, name="lambda-invoke")

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()


class OrderRejected(Exception):
    """A user function's own error type."""


@pytest.fixture
def lambdas(endpoint: str) -> Iterator[tuple[LambdaInvokeServer, AssumedRoles]]:
    fake = LambdaInvokeServer()

    def reject(event: dict[str, Any]) -> None:
        raise OrderRejected(f"order {event['payload']['n']} rejected")

    fake.functions.update({"echo": lambda event: {"got": event}, "reject": reject})
    roles = AssumedRoles(
        boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1"),
        region="us-east-1",
        endpoints={"lambda": fake.url},
        config={"lambda": LAMBDA_CONFIG},
    )
    yield fake, roles
    fake.stop()


def fn_arn(name: str) -> str:
    return f"arn:aws:lambda:us-east-1:123456789012:function:{name}"


def test_a_sync_lambda_target_returns_the_functions_answer_called_with_the_tenants_credentials(
    lambdas: tuple[LambdaInvokeServer, AssumedRoles],
) -> None:
    fake, roles = lambdas
    env = envelope()
    result = LambdaInvoker(LambdaTarget(function_arn=fn_arn("echo"), role_arn=ROLE), roles=roles).invoke(
        env, context(env)
    )
    assert result == {"got": env}
    (called,) = fake.calls
    creds = roles.credentials(ROLE, TENANT)
    assert (called["type"], called["function"], called["event"]) == ("RequestResponse", fn_arn("echo"), env)
    assert (called["key_id"], called["token"]) == (creds.access_key_id, creds.session_token)


def test_a_function_error_fails_the_attempt_with_the_functions_error_type(
    lambdas: tuple[LambdaInvokeServer, AssumedRoles],
) -> None:
    fake, roles = lambdas
    target = LambdaInvoker(LambdaTarget(function_arn=fn_arn("reject"), role_arn=ROLE), roles=roles)
    with pytest.raises(TargetFailed, match="order 1 rejected") as failed:
        target.invoke(envelope(), context(envelope()))
    assert failed.value.error_type == "OrderRejected"  # what non_retryable_errors can name
    assert len(fake.calls) == 1  # one try: botocore does not retry inside the attempt


def test_an_async_lambda_target_succeeds_once_lambda_accepts_the_event(
    lambdas: tuple[LambdaInvokeServer, AssumedRoles],
) -> None:
    fake, roles = lambdas
    spec = LambdaTarget(function_arn=fn_arn("reject"), invocation="async", role_arn=ROLE)
    env = envelope()
    # The function would fail, but an async invoke only hands the event over: accepted is success
    assert LambdaInvoker(spec, roles=roles).invoke(env, context(env)) == {
        "accepted": True,
        "status_code": 202,
    }
    assert [(c["type"], c["event"]) for c in fake.calls] == [("Event", env)]


def test_a_missing_function_fails_with_lambdas_error_code(
    lambdas: tuple[LambdaInvokeServer, AssumedRoles],
) -> None:
    _, roles = lambdas
    target = LambdaInvoker(LambdaTarget(function_arn=fn_arn("gone"), role_arn=ROLE), roles=roles)
    with pytest.raises(TargetFailed, match="Function not found") as failed:
        target.invoke(envelope(), context(envelope()))
    assert failed.value.error_type == "ResourceNotFoundException"
