"""Loopback peers the target benchmarks call: a webhook that answers at once, and a Lambda Invoke API.

Both listen on a free 127.0.0.1 port (port 0), answer at once (so what is measured is jobsched's side
of the call, not the peer's work), and stop with `stop()`.

- `Webhook`: answers every POST 200 `{"ok": true}` and records each request's arrival
  (`time.time()` when its body was read) and its JSON body (the envelope).
- `LambdaInvoke`: answers `POST /2015-03-31/functions/<name>/invocations` as the Lambda service does
  for a function that returns at once: RequestResponse 200 with `{"ok": true}` and
  `X-Amz-Executed-Version`, Event 202 with an empty body. boto3's lambda client (and so the worker's
  LambdaInvoker) meets the wire protocol it meets on AWS; the function's own duration, billed to the
  user's account, is none here.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Arrival:
    """One request as the peer read it: when (epoch seconds), its path and its JSON body."""

    at: float
    path: str
    body: Any


@dataclass
class _Peer:
    arrivals: list[Arrival] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, name=type(self).__name__, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        """http://127.0.0.1:<port>"""
        assert self.server is not None, "not started"
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def record(self, path: str, raw: bytes) -> None:
        at = time.time()
        body = json.loads(raw) if raw else None
        with self.lock:
            self.arrivals.append(Arrival(at, path, body))

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)


def _answer(handler: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str]) -> None:
    data = b"" if body is None else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Webhook(_Peer):
    """A webhook answering 200 at once; `arrivals` in order (see the module doc)."""

    def start(self) -> Webhook:
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                peer.record(self.path, raw)
                _answer(self, 200, {"ok": True}, {})

        self._serve(Handler)
        return self


class LambdaInvoke(_Peer):
    """The Lambda Invoke API for functions that return at once (see the module doc)."""

    def start(self) -> LambdaInvoke:
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if not self.path.startswith("/2015-03-31/functions/"):
                    return _answer(self, 404, {}, {"x-amzn-ErrorType": "UnknownOperationException"})
                peer.record(self.path, raw)
                if self.headers.get("X-Amz-Invocation-Type") == "Event":
                    return _answer(self, 202, None, {})
                return _answer(self, 200, {"ok": True}, {"X-Amz-Executed-Version": "$LATEST"})

        self._serve(Handler)
        return self
