"""The http target: POST (or PUT/PATCH) the envelope to the user's URL, signed, and read the outcome.

One attempt:

    vet the URL (ssrf.vet: one DNS lookup)  ── refused ──> AddressRefused (final)
        v
    connect to the vetted address, Host/SNI = the URL's host; body = the envelope's JSON
        headers: Idempotency-Key: <effect_key>, X-Jobsched-Run-Id: <run_id>,
                 X-Jobsched-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
        v
    2xx ──> success, the first 4 KiB of the body as the result (JSON if it parses)
    307/308 to the same origin ──> followed (method and signed body kept), at most MAX_REDIRECTS
    any other 3xx, or one to another origin ──> HTTP<code>, final (not followed)
    408 / 425 / 429 / 5xx ──> HTTP<code>, retryable (Retry-After on the error)
    other 4xx ──> HTTP<code>, final
    no connection / a timeout ──> HTTPConnectionError / HTTPTimeout, retryable

A crash anywhere here re-runs the attempt: the receiver may see one run's request twice, with the
same Idempotency-Key (effect_key, the same for every attempt and delivery of one run), which is
what it deduplicates on. The signature's t is the sending time, so a replayed capture grows stale.

Redirects: 301/302/303 turn a POST into a GET without the body (the envelope would never arrive),
and a redirect to another host would carry the signed request, and the SSRF guard's decision,
somewhere else: neither is followed. Only 307/308 to the same scheme, host and port are.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError, TimeoutError

from jobsched.adapters.targets.ssrf import (
    AddressPolicy,
    Destination,
    Resolver,
    same_origin,
    system_resolve,
    vet,
)
from jobsched.domain.targets import RETRYABLE_STATUSES, FinalTargetFailure, HttpTarget, TargetFailed
from jobsched.handlers import RunContext
from jobsched.ports import Clock, SystemClock

MAX_RESULT_BYTES = 4 * 1024
MAX_REDIRECTS = 3
MAX_RETRY_AFTER_SECONDS = 86_400  # the backoff's own ceiling; the retry policy bounds it further
SIGNATURE_HEADER = "X-Jobsched-Signature"
RUN_ID_HEADER = "X-Jobsched-Run-Id"
USER_AGENT = "jobsched/1"

SigningSecret = Callable[[str], str]
"""tenant -> that tenant's current signing secret."""


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Jobsched-Signature value: t=<timestamp>,v1=<hex HMAC-SHA256 of "<t>.<body>">."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def envelope_body(envelope: Mapping[str, Any]) -> bytes:
    """The request body: the envelope as compact JSON (the bytes the signature covers)."""
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()


class HttpCaller:
    """jobsched.ports.Target for an http target spec."""

    def __init__(
        self,
        spec: HttpTarget,
        *,
        signing_secret: SigningSecret,
        policy: AddressPolicy | None = None,
        resolve: Resolver = system_resolve,
        clock: Clock | None = None,
        ca_certs: str | None = None,
    ) -> None:
        self.spec = spec
        self._secret = signing_secret
        self._policy = policy or AddressPolicy.aws()
        self._resolve = resolve
        self._clock = clock or SystemClock()
        self._ca_certs = ca_certs

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """One request (plus same-origin 307/308 hops); raises TargetFailed as the module doc says."""
        body = envelope_body(envelope)
        url = self.spec.url
        destination = vet(url, self._policy, self._resolve)
        for _hop in range(MAX_REDIRECTS + 1):
            status, headers, data = self._send(destination, body, envelope)
            if 200 <= status < 300:
                return _result(data)
            if status in (307, 308) and headers.get("location"):
                url = urljoin(url, headers["location"])
                following = same_origin(destination, url)
                if following is not None:
                    destination = following  # the vetted address still: no second lookup
                    continue
                raise FinalTargetFailure(
                    f"HTTP {status}: redirect to another origin ({url}) not followed",
                    error_type=f"HTTP{status}",
                )
            raise self._failure(status, headers, data)
        raise FinalTargetFailure(f"more than {MAX_REDIRECTS} redirects", error_type="HTTP308")

    def _send(
        self, destination: Destination, body: bytes, envelope: Mapping[str, Any]
    ) -> tuple[int, dict[str, str], bytes]:
        now = int(self._clock.now().timestamp())
        headers = {
            **self.spec.headers,
            "Host": _host_header(destination),
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": str(envelope["effect_key"]),
            RUN_ID_HEADER: str(envelope["run_id"]),
            SIGNATURE_HEADER: signature(self._secret(str(envelope["tenant"])), now, body),
        }
        timeout = urllib3.Timeout(total=self.spec.timeout_seconds)
        pool: urllib3.HTTPConnectionPool
        if destination.scheme == "https":
            pool = urllib3.HTTPSConnectionPool(
                destination.address,
                destination.port,
                timeout=timeout,
                retries=False,
                cert_reqs="CERT_REQUIRED",
                ca_certs=self._ca_certs,
                server_hostname=destination.host,
                assert_hostname=destination.host,
            )
        else:
            pool = urllib3.HTTPConnectionPool(
                destination.address, destination.port, timeout=timeout, retries=False
            )
        try:
            response = pool.urlopen(
                self.spec.method,
                destination.target,
                body=body,
                headers=headers,
                redirect=False,
                retries=False,
                preload_content=False,
                assert_same_host=False,
            )
            try:
                data = response.read(MAX_RESULT_BYTES + 1)
            finally:
                response.release_conn()
            return response.status, {k.lower(): v for k, v in response.headers.items()}, data
        except NewConnectionError as exc:  # before TimeoutError: urllib3 derives it from ConnectTimeoutError
            raise TargetFailed(f"{destination.host}: {exc}", error_type="HTTPConnectionError") from exc
        except TimeoutError as exc:
            raise TargetFailed(
                f"no answer within timeout_seconds={self.spec.timeout_seconds}", error_type="HTTPTimeout"
            ) from exc
        except HTTPError as exc:
            raise TargetFailed(f"{destination.host}: {exc}", error_type="HTTPConnectionError") from exc
        finally:
            pool.close()

    def _failure(self, status: int, headers: Mapping[str, str], data: bytes) -> TargetFailed:
        excerpt = data[:200].decode("utf-8", errors="replace")
        message = f"HTTP {status}: {excerpt}".strip()
        error_type = f"HTTP{status}"
        if status in RETRYABLE_STATUSES or status >= 500:
            return TargetFailed(message, error_type=error_type, retry_after=self._retry_after(headers))
        return FinalTargetFailure(message, error_type=error_type)

    def _retry_after(self, headers: Mapping[str, str]) -> float | None:
        """Retry-After in seconds from now (delta-seconds or an HTTP date), within [0, one day]."""
        value = headers.get("retry-after", "").strip()
        if not value:
            return None
        seconds: float
        if value.isdigit():
            seconds = float(value)
        else:
            try:
                when: datetime = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                return None
            seconds = (when - self._clock.now()).total_seconds()
        return min(max(0.0, seconds), MAX_RETRY_AFTER_SECONDS)


def _host_header(destination: Destination) -> str:
    host = f"[{destination.host}]" if ":" in destination.host else destination.host
    default = 443 if destination.scheme == "https" else 80
    return host if destination.port == default else f"{host}:{destination.port}"


def _result(data: bytes) -> object:
    """The response body as the run's result: its JSON when whole and parseable, else its text."""
    if not data:
        return None
    truncated = len(data) > MAX_RESULT_BYTES
    data = data[:MAX_RESULT_BYTES]
    if not truncated:
        try:
            return json.loads(data)
        except ValueError:
            pass
    text = data.decode("utf-8", errors="ignore")
    return {"body": text, "truncated": True} if truncated else text
