"""`jobsched console --api URL`: the operator console for a deployed stack, on a loopback server.

    browser ──GET /console/*──> this server ──> the package's console files (jobsched/console)
            ──/api/*─────────> this server ──SigV4 (execute-api, the operator's credentials)──> URL/api/*

The browser talks to 127.0.0.1 only and never holds an AWS key: the deployed API is IAM-authorized,
so each call is signed here, with the credentials of the default boto3 session (environment,
profile, SSO, role), resolved once at start and refreshed by botocore when they expire. The tenant
is the signing principal, so the browser's X-Tenant header is not forwarded. Only the headers the
API reads are forwarded (Content-Type, Idempotency-Key, Accept), and nothing signed is logged.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from jobsched import console
from jobsched.cli.http import region_of
from jobsched.local import loopback

if TYPE_CHECKING:
    from botocore.credentials import Credentials

FORWARDED_HEADERS = ("Content-Type", "Idempotency-Key", "Accept")
MAX_BODY = 1024 * 1024
"""Bigger than the API's own 64 KiB limit (which answers 413 itself), small enough to hold in memory."""
UPSTREAM_TIMEOUT = 30.0


class Signer:
    """SigV4 for execute-api with one set of credentials and the API's region."""

    def __init__(self, credentials: Credentials, region: str) -> None:
        self.credentials = credentials
        self.region = region

    @classmethod
    def from_default_session(cls, api: str) -> Signer:
        """The default boto3 session's credentials; SystemExit naming the fix when there are none."""
        import boto3

        session = boto3.session.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise SystemExit(
                "jobsched console: no AWS credentials (environment, profile or role) to sign with"
            )
        return cls(credentials, region_of(api, session.region_name))

    def sign(self, method: str, url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(request)
        return dict(request.headers.items())


def handler_for(api: str, signer: Signer) -> type[BaseHTTPRequestHandler]:
    """The request handler: console files, a signed proxy for /api/*, 404 for anything else."""
    base = api.rstrip("/")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(413, "application/json", _error("payload_too_large", "the body is over 1 MiB"))
                self.close_connection = True
                return
            body = self.rfile.read(length) if length else b""
            path = self.path
            if path in ("/", ""):
                self.send_response(302)
                self.send_header("Location", console.PREFIX + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif console.is_console_path(path):
                if self.command != "GET":
                    self._answer(405, "application/json", _error("method_not_allowed", "GET only"))
                else:
                    self._answer(*console.asset(path))
            elif path == "/api" or path.startswith("/api/"):
                self._proxy(path, body)
            else:
                self._answer(404, "application/json", _error("not_found", "no such path"))

        def _proxy(self, path: str, body: bytes) -> None:
            url = base + path
            headers = {k: v for k in FORWARDED_HEADERS if (v := self.headers.get(k))}
            signed = signer.sign(self.command, url, body, headers)
            request = urllib.request.Request(url, data=body or None, headers=signed, method=self.command)
            try:
                with urllib.request.urlopen(request, timeout=UPSTREAM_TIMEOUT) as response:
                    status, payload = response.status, response.read()
                    content_type = response.headers.get("Content-Type", "application/json")
            except urllib.error.HTTPError as err:
                status, payload = err.code, err.read()
                content_type = err.headers.get("Content-Type", "application/json")
            except (urllib.error.URLError, TimeoutError, OSError) as err:
                reason = getattr(err, "reason", err)
                status, content_type = 502, "application/json"
                payload = _error("unavailable", f"the API at {base} did not answer: {reason}")
            self._answer(status, content_type, payload)

        def _answer(self, status: int, content_type: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # no access log: paths carry job ids, and nothing here should echo a signed request

    return Handler


def serve(api: str, signer: Signer, host: str = "127.0.0.1", port: int = 0) -> loopback.Server:
    """Start the console server for `api` (on a daemon thread); stop() it when done."""
    scheme = urllib.parse.urlsplit(api).scheme
    if scheme not in ("http", "https"):
        raise SystemExit(f"jobsched console: --api must be an http(s) URL, got {api!r}")
    return loopback.serve(handler_for(api, signer), host, port, "jobsched-console")


def cmd_console(args: argparse.Namespace) -> int:
    """Serve the console for a deployed API until Ctrl-C."""
    import threading

    signer = Signer.from_default_session(args.api)
    # Loopback only, on purpose: anyone who reaches this port acts with the operator's credentials.
    server = serve(args.api, signer, "127.0.0.1", args.port)
    print(
        f"jobsched console: {server.url}/console/  (API {args.api}, signed as your AWS identity)", flush=True
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def add_parser(sub: Any) -> None:
    """The `console` subcommand."""
    p = sub.add_parser("console", help="serve the operator console for a deployed API (SigV4-signed proxy)")
    p.add_argument("--api", required=True, help="the deployed API's base URL (https://<id>.execute-api...)")
    p.add_argument("--port", type=int, default=8181, help="port (default 8181; 0: any free port)")
    p.set_defaults(func=cmd_console)


def _error(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()
