"""Real peers the targets call in the end-to-end tests: a webhook server and a Lambda Invoke server.

Both listen on a free loopback port, record what they receive, and stop with the test.

The Lambda peer answers the Lambda Invoke API (`POST /2015-03-31/functions/<name>/invocations`)
as the Lambda service does for a Python function, so boto3's own lambda client, and with it the
worker's LambdaInvoker, meet the wire protocol they meet on AWS:
- it loads the function's code as the local stack loads its own functions
  (jobsched.local.lambdas.load: functions/<name>/handler.py under a private module, a cold start)
  and calls `lambda_handler(event, context)` with a jobsched.local.lambdas.LambdaContext;
- RequestResponse: 200 and the handler's return value as JSON; a raised exception is still a 200,
  with `X-Amz-Function-Error: Unhandled` and the body `{"errorMessage", "errorType", "stackTrace"}`
  the Python runtime writes (errorType is the exception's class name), and `X-Amz-Executed-Version`;
- Event: 202 with an empty body, the function run afterwards (an async invoke is only accepted);
- an unknown function: 404 with `x-amzn-ErrorType: ResourceNotFoundException`, as AWS answers.
What it does not play: concurrency limits, throttles, payload limits, IAM on the function.
"""

from __future__ import annotations

import json
import re
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from jobsched.local import lambdas, loopback

_INVOKE = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")


@dataclass
class Received:
    """One request a peer received."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Webhooks:
    """A webhook server: each path answers from its script (a list of answers, the last repeated)."""

    scripts: dict[str, list[Answer]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: loopback.Server | None = None

    def start(self) -> Webhooks:
        peer = self

        class Handler(loopback.QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with peer.lock:
                    peer.received.append(Received(self.path, dict(self.headers.items()), body))
                    script = peer.scripts.get(self.path.split("?")[0], [(404, {}, b"no such hook")])
                    status, headers, data = script.pop(0) if len(script) > 1 else script[0]
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = loopback.serve(Handler, name=type(self).__name__)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@dataclass
class LambdaPeer:
    """The Lambda Invoke API over functions/<name>/handler.py files in `functions_dir` (see module doc)."""

    functions_dir: Path
    invocations: list[tuple[str, str, Any]] = field(default_factory=list)
    """(function name, invocation type, event) of every invoke, in order."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: loopback.Server | None = None

    def start(self, monkeypatch: pytest.MonkeyPatch) -> LambdaPeer:
        monkeypatch.setenv(lambdas.FUNCTIONS_DIR_ENV, str(self.functions_dir))
        peer = self

        class Handler(loopback.QuietHandler):
            def do_POST(self) -> None:
                match = _INVOKE.match(self.path.split("?")[0])
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if match is None:
                    return loopback.answer(self, 404, {}, {"x-amzn-ErrorType": "UnknownOperationException"})
                name = unquote(match["name"]).split("function:")[-1].split(":")[0]
                kind = self.headers.get("X-Amz-Invocation-Type", "RequestResponse")
                if not (peer.functions_dir / name / "handler.py").exists():
                    return loopback.answer(
                        self,
                        404,
                        {"Type": "User", "message": f"Function not found: {name}"},
                        {"x-amzn-ErrorType": "ResourceNotFoundException"},
                    )
                event = json.loads(body) if body else {}
                with peer.lock:
                    peer.invocations.append((name, kind, event))
                run = peer.runner(name, event)
                if kind == "Event":
                    threading.Thread(target=run, daemon=True).start()
                    return loopback.answer(self, 202)
                result, error = run()
                headers = {"X-Amz-Executed-Version": "$LATEST"}
                if error is not None:
                    headers["X-Amz-Function-Error"] = "Unhandled"
                    return loopback.answer(self, 200, error, headers)
                return loopback.answer(self, 200, result, headers)

        self.server = loopback.serve(Handler, name=type(self).__name__)
        return self

    def runner(self, name: str, event: Any) -> Callable[[], tuple[Any, dict[str, Any] | None]]:
        def run() -> tuple[Any, dict[str, Any] | None]:
            module = lambdas.load(name)  # a cold start per invoke: enough for a test peer
            try:
                return module.lambda_handler(event, lambdas.LambdaContext(name)), None
            except Exception as exc:  # what the Python runtime reports for an unhandled error
                return None, {
                    "errorMessage": str(exc),
                    "errorType": type(exc).__name__,
                    "stackTrace": traceback.format_tb(exc.__traceback__),
                }

        return run

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
