"""`jobsched local`: embedded AWS + API Gateway, EventBridge and SQS event-source-mapping players.

    HTTP :8080 ──> api entry point ─┐
    tick thread (every N s) ──> dispatcher entry point ──> moto (DynamoDB, SQS, Step Functions)
    poller threads <── SQS ──> worker invocations ─┘  (up to `invocations` batches at once)

Each piece calls the same entry point CDK deploys, in this process; boto3 reaches the
embedded moto server (or $AWS_ENDPOINT_URL) over loopback, as it reaches AWS in the cloud.

It keeps AWS's limits (issue 11, item 7):
- a worker invocation past the Lambda worker's timeout (resources.WORKER_TIMEOUT_SECONDS) is killed
  as Lambda kills its sandbox: not in a child process, by a deadline. Its batch is acknowledged in
  no part, its environment is thrown away, its heartbeat stops (Worker.alive), and the run's thread,
  which Python cannot stop, dies at its next crash point (the handler's end, before any record), so
  nothing it does after the deadline is written: its messages return after their visibility timeout;
- ECS-placed runs (jobsched.domain.compute) go to the ECS queue, which the ECS worker's own entry
  point (`python -m jobsched.ecsworker`, as in the Fargate task) drains in a child process: started
  with the stack, sent SIGTERM (then killed) on stop. No Docker: the same package, not an image
  (`python -m jobsched.local.ecsworker`: that entry point, its runs' lines shipped as Fargate's log
  driver would ship them);
- container targets (`target.type` "ecs") run there too, their `command` as a local process with a
  Fargate task's lifecycle (jobsched.adapters.targets.local_process): no image is pulled or run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import ModuleType
from typing import Any

import boto3

from jobsched import console, resources
from jobsched import constants as c
from jobsched.local import events, lambdas, loopback
from jobsched.local.aws import MOTO_SENDER_ID, EmbeddedAws
from jobsched.local.runlogs import ship_run_logs
from jobsched.ports import Crash

DEFAULT_PREFIX = "jobsched-local"


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalConfig:
    """What the local stack runs with (from the environment by default)."""

    api_port: int = c.DEFAULT_API_PORT
    host: str = "127.0.0.1"
    tick_seconds: int = 60
    lookahead_seconds: int = 90
    lease_seconds: int = 30
    shard_count: int = 4
    pollers: int = 4
    # Worker invocations in flight at once (see _poll_loop): each one batch, in an execution
    # environment of its own. On AWS the event-source mapping adds invocations while messages wait
    # (hundreds a minute); here 16 batches of slow handlers can run before a fresh tick has to wait
    # for one to end. Enough: this process runs about 30 healthy runs a second (moto serves one
    # request at a time), so only slow handlers hold a slot for long; 16 x 10 handler threads and at
    # most 16 worker modules (each about 1.6 MB and a 0.4 s cold start, loaded only when every warm
    # one is busy) are a modest cost for one machine.
    invocations: int = 16
    batch_size: int = resources.WORKER_EVENT_SOURCE.batch_size
    poll_interval: float = 0.1
    prefix: str = DEFAULT_PREFIX
    endpoint_url: str | None = None
    # The Lambda worker's timeout, enforced on each invocation (tests shorten it).
    lambda_timeout_seconds: float = resources.WORKER_TIMEOUT_SECONDS
    # Start the ECS worker's process (False: ECS-placed runs wait in the ECS queue).
    ecs_worker: bool = True

    @classmethod
    def from_env(cls) -> LocalConfig:
        """Defaults, overridden by JOBSCHED_* and AWS_ENDPOINT_URL."""
        env = os.environ
        cfg = cls()
        cfg.api_port = int(env.get(c.API_PORT_ENV, cfg.api_port))
        cfg.tick_seconds = int(env.get(c.TICK_SECONDS_ENV, cfg.tick_seconds))
        cfg.lookahead_seconds = int(
            env.get(c.LOOKAHEAD_SECONDS_ENV, max(cfg.lookahead_seconds, cfg.tick_seconds + 30))
        )
        cfg.lease_seconds = int(env.get(c.LEASE_SECONDS_ENV, cfg.lease_seconds))
        cfg.shard_count = int(env.get(c.SHARD_COUNT_ENV, cfg.shard_count))
        cfg.prefix = env.get(c.RESOURCE_PREFIX_ENV, cfg.prefix)
        cfg.endpoint_url = env.get(c.AWS_ENDPOINT_URL_ENV) or None
        cfg.lambda_timeout_seconds = float(env.get(c.LOCAL_LAMBDA_TIMEOUT_ENV, cfg.lambda_timeout_seconds))
        return cfg


@dataclass
class LocalStack:
    """The whole scheduler on one machine. start() returns once it serves; stop() ends every thread."""

    config: LocalConfig = field(default_factory=LocalConfig.from_env)
    _threads: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _moto: Any = None
    _http: loopback.Server | None = None
    api: ModuleType | None = None
    dispatcher: ModuleType | None = None
    worker: ModuleType | None = None
    reconciler: ModuleType | None = None
    _apis: lambdas.Environments | None = None
    queue_url: str = ""
    dlq_url: str = ""
    dlq_arn: str = ""
    queue_arn: str = ""
    endpoint_url: str = ""
    crashes: int = 0
    timeouts: int = 0  # worker invocations killed at the Lambda timeout
    ecs_url: str = ""
    ecs_process: subprocess.Popen[bytes] | None = None
    _workers: lambdas.Environments | None = None
    _slots: threading.BoundedSemaphore | None = None
    _in_flight: set[threading.Thread] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_url(self) -> str:
        """Base URL of the API."""
        port = self._http.port if self._http else self.config.api_port
        return f"http://{self.config.host}:{port}"

    def start(self) -> LocalStack:
        """Start AWS, create resources, load the entry points and start serving."""
        self._start_aws()
        self._create_resources()
        self.api = lambdas.load("api")
        self.dispatcher = lambdas.load("dispatcher")
        self.worker = lambdas.load("worker")
        self._ship_run_logs()
        self.reconciler = lambdas.load("reconciler")
        self._workers = lambdas.Environments("worker", first=self.worker)
        # One request per API environment at a time, as on Lambda: the resolver keeps the request
        # it serves on itself, so two requests at once in one (a worker's long-poll beside a create)
        # would read each other's bodies and tenants.
        self._apis = lambdas.Environments("api", first=self.api)
        self._slots = threading.BoundedSemaphore(self.config.invocations)
        handler = _handler_for(self)
        self._http = loopback.serve(handler, self.config.host, self.config.api_port, "jobsched-http")
        self._spawn("jobsched-tick", self._tick_loop)
        for i in range(self.config.pollers):
            self._spawn(f"jobsched-poller-{i}", self._poll_loop)
        self._spawn("jobsched-dlq-poller", self._dlq_loop)
        if self.config.ecs_worker:
            self._start_ecs_worker()
        return self

    def _start_ecs_worker(self) -> None:
        """The ECS worker's entry point in a child process, as the Fargate task runs it (with its runs'
        lines shipped as the task's log driver would: jobsched.local.ecsworker)."""
        env = {
            **os.environ,
            c.WORKER_LANE_ENV: "ecs",
            c.ECS_POLL_SECONDS_ENV: "0",  # the embedded AWS serves one request at a time: no long polls
            c.ECS_GRACE_SECONDS_ENV: "2",
            # A local stack killed -9 runs no stop(): the child watches for it (ecsworker.watch_parent).
            c.ECS_PARENT_PID_ENV: str(os.getpid()),
        }
        self.ecs_process = subprocess.Popen([sys.executable, "-m", "jobsched.local.ecsworker"], env=env)

    def _stop_ecs_worker(self) -> None:
        process, self.ecs_process = self.ecs_process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()  # SIGTERM, as ECS stops a task: it drains, hands back, exits
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def stop(self) -> None:
        """Stop serving, ticking and polling, then the embedded AWS."""
        self._stop.set()
        self._stop_ecs_worker()
        if self._http:
            self._http.stop()
        deadline = time.monotonic() + 10
        with self._lock:
            invocations = list(self._in_flight)
        for thread in [*self._threads, *invocations]:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._moto is not None:
            self._moto.stop()

    # -- AWS -----------------------------------------------------------------------------------
    def _start_aws(self) -> None:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        os.environ.setdefault("AWS_REGION", os.environ["AWS_DEFAULT_REGION"])
        os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
        os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "jobsched")
        # One process plays every function: keep its console readable (AWS keeps them on).
        os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
        os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
        if self.config.endpoint_url:
            self.endpoint_url = self.config.endpoint_url
        else:
            self._moto = EmbeddedAws(self.config.host, free_port(self.config.host)).start()
            self.endpoint_url = self._moto.endpoint_url
        os.environ[c.AWS_ENDPOINT_URL_ENV] = self.endpoint_url

    def _create_resources(self) -> None:
        ddb = boto3.client("dynamodb", endpoint_url=self.endpoint_url)
        sqs = boto3.client("sqs", endpoint_url=self.endpoint_url)
        made = resources.create_local_resources(
            prefix=self.config.prefix,
            dynamodb=ddb,
            sqs=sqs,
            sns=boto3.client("sns", endpoint_url=self.endpoint_url),
            stepfunctions=boto3.client("stepfunctions", endpoint_url=self.endpoint_url),
            kms=boto3.client("kms", endpoint_url=self.endpoint_url),
            logs=boto3.client("logs", endpoint_url=self.endpoint_url),
        )
        self.dlq_url = made[resources.EXECUTION_DLQ.logical_id]
        self.dlq_arn = sqs.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.queue_url = made[resources.EXECUTION_QUEUE.logical_id]
        self.queue_arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.ecs_url = made[resources.ECS_QUEUE.logical_id]
        for url in (self.queue_url, self.ecs_url):
            sqs.set_queue_attributes(
                QueueUrl=url, Attributes={"VisibilityTimeout": str(self.config.lease_seconds)}
            )
        os.environ.update(
            {
                c.JOBS_TABLE_ENV: made[resources.JOBS_TABLE.logical_id],
                c.RUNS_TABLE_ENV: made[resources.RUNS_TABLE.logical_id],
                c.EXECUTION_QUEUE_URL_ENV: self.queue_url,
                c.EXECUTION_DLQ_URL_ENV: self.dlq_url,
                c.ECS_QUEUE_URL_ENV: self.ecs_url,
                c.FAILURE_WORKFLOW_ARN_ENV: made[resources.FAILURE_WORKFLOW.logical_id],
                c.DAG_WORKFLOW_ARN_ENV: made[resources.DAG_WORKFLOW.logical_id],
                c.ALERT_TOPIC_ARN_ENV: made[resources.ALERT_TOPIC.logical_id],
                c.ALERTS_TABLE_ENV: made[resources.ALERTS_TABLE.logical_id],
                c.LIMITS_TABLE_ENV: made[resources.LIMITS_TABLE.logical_id],
                c.QUOTAS_TABLE_ENV: made[resources.QUOTAS_TABLE.logical_id],
                c.FARGATE_VCPU_TABLE_ENV: made[resources.FARGATE_VCPU_TABLE.logical_id],
                c.WORKERS_TABLE_ENV: made[resources.WORKERS_TABLE.logical_id],
                c.SHARD_COUNT_ENV: str(self.config.shard_count),
                c.LOOKAHEAD_SECONDS_ENV: str(self.config.lookahead_seconds),
                c.TICK_SECONDS_ENV: str(self.config.tick_seconds),
                c.LEASE_SECONDS_ENV: str(self.config.lease_seconds),
                c.TENANT_SOURCE_ENV: "header",
                c.DEMO_HANDLERS_ENV: "true",  # always on the local stack (the design's public contract)
                c.SIGNING_SECRETS_TABLE_ENV: made[resources.SIGNING_SECRETS_TABLE.logical_id],
                c.SIGNING_KEY_ARN_ENV: made[resources.SIGNING_KEY.logical_id],
                # http targets may reach loopback and plain http here (a developer's webhooks).
                c.TARGET_POLICY_ENV: "local",
                c.TRUSTED_SENDERS_ENV: os.environ.get(c.TRUSTED_SENDERS_ENV) or MOTO_SENDER_ID,
                c.WORKER_LOG_GROUP_ENV: made[resources.WORKER_LOG_GROUP.logical_id],
                # No Docker here: container targets run their command as a local process.
                c.CONTAINER_RUNNER_ENV: "local",
            }
        )
        self._sqs = sqs

    def _ship_run_logs(self) -> None:
        """Lambda's log delivery, played (jobsched.local.runlogs): a run's lines (its handler's own and
        the worker's) go to the worker's log group in the embedded AWS, as on AWS."""
        assert self.worker is not None
        ship_run_logs(
            self.worker.logger,
            client=boto3.client("logs", endpoint_url=self.endpoint_url),
            log_group=os.environ[c.WORKER_LOG_GROUP_ENV],
            stream=f"local/{os.getpid()}",
        )

    # -- EventBridge: the once-a-minute rule ----------------------------------------------------------
    def tick(self) -> dict[str, Any]:
        """Invoke the dispatcher as the EventBridge rule would."""
        assert self.dispatcher is not None
        result: dict[str, Any] = self.dispatcher.lambda_handler(
            events.scheduled_event(), lambdas.LambdaContext("jobsched-dispatcher")
        )
        return result

    def _tick_loop(self) -> None:
        # At a fixed rate, as EventBridge's rate() fires: a pass's own duration does not push the
        # next one back.
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a failed pass is retried by the next tick, as on AWS
                print(f"jobsched local: dispatcher pass failed: {exc!r}", flush=True)
            due += self.config.tick_seconds
            self._stop.wait(max(0.0, due - time.monotonic()))

    # -- SQS event-source mapping ------------------------------------------------------------------
    # The mapping as AWS runs it: pollers receive batches, and each batch is one invocation, many
    # at once. A poller takes an invocation slot before it receives, and hands the batch to an
    # invocation thread of its own, so a slow handler holds its own batch's slot, never a poller:
    #
    #   poller 0  [slot][receive: sleep20, echo@:00]──hand over──[slot][receive: echo@:10]──hand over──
    #   invocation A            ├ sleep20 ─────────────────────────────────────┤ delete, slot free
    #                           ├ echo@:00 ┤   (a batch's runs at once: worker_concurrency)
    #   invocation B                                          ├ echo@:10 ┤ delete, slot free
    #
    # With every slot busy the pollers wait for one to free up without calling SQS (no message
    # sits received but unstarted while its lease runs out). Polls are short (the embedded AWS
    # serves one request at a time, see local/aws.py): an idle poller waits poll_interval, which
    # bounds the lateness it adds, and the pollers' ReceiveMessage rate does not grow with the slots.
    def _poll_loop(self) -> None:
        assert self._slots is not None
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            try:
                messages = self._receive(self.queue_url)
            except Exception as exc:
                self._slots.release()
                print(f"jobsched local: poller error: {exc!r}", flush=True)
                self._stop.wait(1)
                continue
            if not messages:
                self._slots.release()
                self._stop.wait(self.config.poll_interval)
                continue
            thread = threading.Thread(
                target=self._invocation, args=(messages,), name="jobsched-worker-invocation", daemon=True
            )
            with self._lock:
                self._in_flight.add(thread)
            thread.start()

    def _invocation(self, messages: list[Any]) -> None:
        """One worker invocation of one batch, in an idle execution environment; frees its slot."""
        assert self._workers is not None and self._slots is not None
        try:
            function = self._workers.acquire()
            if self._invoke_within_timeout(function, messages):
                self._workers.release(function)
            # else: killed at the Lambda timeout; a dead sandbox serves no further invocation
        except Exception as exc:  # a cold start that failed: the batch returns after its lease
            print(f"jobsched local: worker invocation failed: {exc!r}", flush=True)
        finally:
            self._slots.release()
            with self._lock:
                self._in_flight.discard(threading.current_thread())

    def _invoke_within_timeout(self, function: ModuleType, messages: list[Any]) -> bool:
        """Invoke as _invoke does, but kill the invocation at the Lambda timeout; False if killed.

            deadline ──> sandbox dead: Worker.alive() is False (no more heartbeats), every crash point
                         raises Crash (no record, no result), no message is deleted; they return
                         after their visibility timeout, as on Lambda
        """
        sandbox = _sandbox_of(function)
        response: dict[str, Any] = {}
        event = events.sqs_event(messages, queue_arn=self.queue_arn)

        def call() -> None:
            try:
                response["out"] = function.lambda_handler(event, lambdas.LambdaContext("jobsched-worker"))
            except BaseException as exc:  # a Crash too: whatever ends the invocation
                response["error"] = exc

        thread = threading.Thread(target=call, name="jobsched-worker-sandbox", daemon=True)
        thread.start()
        thread.join(self.config.lambda_timeout_seconds)
        if thread.is_alive():
            sandbox.kill()
            with self._lock:
                self.timeouts += 1
            print(
                f"jobsched local: worker invocation timed out after {self.config.lambda_timeout_seconds:g} s "
                f"(the Lambda worker's timeout): {len(messages)} message(s) return after their visibility",
                flush=True,
            )
            return False
        self._settle(messages, response, self.queue_url)
        return True

    def _settle(self, messages: list[Any], response: dict[str, Any], queue_url: str) -> None:
        """What the mapping does at an invocation's end: delete what did not fail (see _invoke)."""
        error = response.get("error")
        if isinstance(error, Crash):
            with self._lock:
                self.crashes += 1
            return
        if error is not None:
            print(f"jobsched local: worker invocation failed: {type(error).__name__}: {error}", flush=True)
            return
        failed = {f["itemIdentifier"] for f in response["out"].get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self._sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )

    def _dlq_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.poll_once(dead_letters=True):
                    self._stop.wait(1.0)
            except Exception as exc:
                print(f"jobsched local: reconciler error: {exc!r}", flush=True)
                self._stop.wait(1)

    def poll_once(self, *, wait_seconds: int = 0, dead_letters: bool = False) -> int:
        """Receive one batch and invoke its function; delete what it did not report failed.

        The execution queue feeds the worker; its redrive DLQ feeds the reconciler.
        """
        function = self.reconciler if dead_letters else self.worker
        queue_url, queue_arn = (
            (self.dlq_url, self.dlq_arn) if dead_letters else (self.queue_url, self.queue_arn)
        )
        assert function is not None
        messages = self._receive(queue_url, wait_seconds=wait_seconds)
        if messages:
            self._invoke(function, messages, queue_url, queue_arn)
        return len(messages)

    def _receive(self, queue_url: str, *, wait_seconds: int = 0) -> list[Any]:
        out = self._sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=self.config.batch_size,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["All"],
        )
        return list(out.get("Messages", []))

    def _invoke(self, function: ModuleType, messages: list[Any], queue_url: str, queue_arn: str) -> int:
        """Invoke `function` with one batch; delete what it did not report failed; answers its size."""
        try:
            response = function.lambda_handler(
                events.sqs_event(messages, queue_arn=queue_arn), lambdas.LambdaContext("jobsched-worker")
            )
        except Crash:
            # A simulated process death: nothing is acknowledged, the messages come back after
            # their visibility timeout, exactly as when a Lambda sandbox dies mid-batch.
            with self._lock:
                self.crashes += 1
            return len(messages)
        except Exception as exc:
            # An invocation error returns the whole batch to the queue, as the mapping does on AWS.
            # str(), not repr(): powertools' BatchProcessingError ("All records failed processing.
            # N individual errors logged separately below.") lists each record's traceback in its
            # str(), as the Lambda runtime logs it on AWS; its repr() is the first line alone.
            print(f"jobsched local: worker invocation failed: {type(exc).__name__}: {exc}", flush=True)
            return len(messages)
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self._sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        return len(messages)

    # -- API Gateway ---------------------------------------------------------------------------------
    def invoke_api(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> dict[str, Any]:
        """Turn one HTTP request into a REST proxy event for the api entry point."""
        assert self.api is not None
        api = self._apis.acquire() if self._apis is not None else self.api
        try:
            result: dict[str, Any] = api.lambda_handler(
                events.api_gateway_event(method, path, headers, body), lambdas.LambdaContext("jobsched-api")
            )
        finally:
            if self._apis is not None:
                self._apis.release(api)
        return result

    def _spawn(self, name: str, target: Any) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)


class _Sandbox:
    """One worker environment's life: killed at the Lambda timeout, it beats and records no more."""

    def __init__(self, worker: Any) -> None:
        self.killed = False
        self._inner = worker.crash  # a test's own crash points still fire first

        def crash(point: str) -> None:
            self._inner(point)
            if self.killed:
                raise Crash(f"{point}: the invocation was killed at the Lambda timeout")

        worker.crash = crash
        worker.alive = lambda: not self.killed

    def kill(self) -> None:
        self.killed = True


def _sandbox_of(function: ModuleType) -> _Sandbox:
    """The environment's sandbox, installed on its worker at its first invocation."""
    sandbox = getattr(function, "_jobsched_sandbox", None)
    if sandbox is None:
        sandbox = _Sandbox(function.services.worker)
        function._jobsched_sandbox = sandbox  # type: ignore[attr-defined]
    return sandbox


_NOT_ALLOWED = b'{"error": {"code": "method_not_allowed", "message": "the console is read with GET"}}'


def _handler_for(stack: LocalStack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            if console.is_console_path(self.path):
                self._serve_console()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            try:
                result = stack.invoke_api(self.command, self.path, dict(self.headers.items()), body)
            except Exception as exc:  # the api entry point answers errors itself; a bug guard
                result = {
                    "statusCode": 500,
                    "headers": {"Content-Type": "application/json"},
                    "body": json.dumps({"error": {"code": "internal_error", "message": repr(exc)}}),
                }
            payload = (result.get("body") or "").encode()
            self.send_response(int(result.get("statusCode", 500)))
            for key, value in (result.get("headers") or {}).items():
                if key.lower() not in ("content-length", "connection"):
                    self.send_header(key, str(value))
            for key, values in (result.get("multiValueHeaders") or {}).items():
                if key.lower() not in ("content-length", "connection") and key not in (
                    result.get("headers") or {}
                ):
                    for value in values:
                        self.send_header(key, str(value))
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _serve_console(self) -> None:
            """The console's static files, same origin as /api (so the browser needs no CORS)."""
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.command != "GET":
                status, content_type, payload = 405, "application/json", _NOT_ALLOWED
            else:
                status, content_type, payload = console.asset(self.path)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-cache")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = do_OPTIONS = do_QUERY = do_TRACE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            if os.environ.get("JOBSCHED_LOCAL_ACCESS_LOG"):
                super().log_message(format, *args)

    return Handler


def serve_forever(config: LocalConfig | None = None) -> None:
    """Run the local stack until SIGINT/SIGTERM (what `make run` does)."""
    import signal

    # The signal handlers go in before the API serves: a Ctrl-C that arrives as soon as /api/health
    # answers must stop the stack cleanly, not raise KeyboardInterrupt out of start-up.
    done = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    stack = LocalStack(config or LocalConfig.from_env()).start()
    print(f"jobsched local stack: API {stack.api_url}  (embedded AWS {stack.endpoint_url})", flush=True)
    print(
        f"  tick every {stack.config.tick_seconds}s, "
        f"look-ahead {stack.config.lookahead_seconds}s; Ctrl-C stops",
        flush=True,
    )
    while not done.wait(0.5):
        pass
    print("jobsched local stack: stopping", flush=True)
    stack.stop()
    time.sleep(0)
