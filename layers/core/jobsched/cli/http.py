"""The API client of the `jobsched` command line: one request, SigV4-signed for API Gateway."""

from __future__ import annotations

import argparse
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from jobsched import constants as c

DEFAULT_REGION = "us-east-1"
# <api-id>.execute-api.<region>.amazonaws.com[.cn], and the private endpoint's
# <api-id>-<vpce-id>.execute-api.<region>.vpce.amazonaws.com.
_EXECUTE_API_HOST = re.compile(
    r"\.execute-api\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)\.(?:vpce\.)?amazonaws\.com(?:\.cn)?$"
)


def api_url(args: argparse.Namespace) -> str:
    """--api-url, else $JOBSCHED_API_URL, else the local stack's default."""
    url = args.api_url or os.environ.get(c.API_URL_ENV) or f"http://127.0.0.1:{c.DEFAULT_API_PORT}"
    return str(url).rstrip("/")


def region_of(url: str, session_region: str | None) -> str:
    """The region to sign for: the execute-api host's, else the session's, else us-east-1.

    An API's signature is valid only in its own region: signing a call to an eu-west-1 API for the
    session's us-east-1 gets a 403 from API Gateway. A custom domain names no region: then the
    session's (AWS_REGION, the profile) decides.
    """
    match = _EXECUTE_API_HOST.search(urllib.parse.urlsplit(url).hostname or "")
    if match:
        return match.group("region")
    return session_region or DEFAULT_REGION


def signed_headers(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> dict[str, str]:
    """SigV4-sign a request for an IAM-authorized API Gateway (credentials from the boto3 chain)."""
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    session = boto3.session.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise SystemExit("jobsched: --sigv4 needs AWS credentials (environment, profile or role)")
    request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
    region = region_of(url, session.region_name)
    SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
    return dict(request.headers.items())


@dataclass(frozen=True, slots=True)
class Answer:
    """One API answer: the status, and the body as JSON (or as text when it is not JSON)."""

    status: int
    body: Any
    text: str

    @property
    def ok(self) -> bool:
        return self.status < 400


class Unreachable(Exception):
    """The API did not answer (refused, unresolvable, timed out)."""


def request(
    args: argparse.Namespace,
    method: str,
    path: str,
    payload: Any = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """Send one API request; its answer, whatever its status (Unreachable if there is none)."""
    url = api_url(args) + path
    # UTF-8 as it is, not \\u escapes: an "é" is 2 bytes of the 64 KiB body, not 6.
    body = json.dumps(payload, ensure_ascii=False).encode() if payload is not None else None
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if getattr(args, "tenant", None):
        hdrs[c.TENANT_HEADER] = args.tenant
    if getattr(args, "sigv4", False) or ".execute-api." in url:
        hdrs = signed_headers(method, url, body, hdrs)
    prepared = urllib.request.Request(url, data=body, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(prepared, timeout=30) as response:
            text, status = response.read().decode(), response.status
    except urllib.error.HTTPError as err:
        text, status = err.read().decode(), err.code
    except urllib.error.URLError as err:
        raise Unreachable(f"cannot reach {url}: {err.reason}") from err
    try:
        parsed: Any = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    return Answer(status=status, body=parsed, text=text)
