"""`python -m bench.costs`: what jobsched costs on AWS per healthy run, by run kind.

The real services run in-process against moto (as the integration tests drive them), with a fake
clock that plays minutes in milliseconds, and every AWS request they make goes through a billing
model (bench/billing.py) instead of a call counter: DynamoDB write and read request units as on-demand
bills them (index writes, transactional doubling, index key moves, refused conditional writes), SQS
requests (64 KB chunks), Step Functions Standard state transitions from the executions' histories,
and Lambda invocations and GB-seconds from the worker's (and API's, dispatcher's) own measured time.
The services get the settings the CDK stack gives the functions (its literal JOBSCHED_* values, e.g.
the hand-over horizon), overridable with JOBSCHED_* variables in the environment.

Kinds (each a fresh moto account):
  recurring           `* * * * *`, default policy (overlap skip), created beforehand
  recurring_allow     the same with overlap_policy allow
  recurring_hourly    `0 * * * *`
  one_off             created through POST /api/jobs/batch (100 a request), due in 5 min: found by
                      the dispatcher (the path of one due hours ahead)
  one_off_due_soon    the same, due in 30 s: handed to SQS by the request itself
  one_off_single      created one by one through POST /api/jobs, due in 5 min
  retried_once        `* * * * *` running demo.flaky that fails its first attempt (1 s backoff)
  retried_twice       the same failing twice
  dag_member          one-off DAGs created through the API: roots A, B -> C (fan-in) -> D; per node

The dispatcher reads every shard every minute whatever the load: that per-pass cost is measured on
its own (passes with nothing due, at the stack's shard count) and reported per minute and per shard,
and it is subtracted from each kind's window rather than divided by the benchmark's few runs.

Assumptions (printed with the table):
- Lambda's SQS event source mapping receives and deletes for the worker: one ReceiveMessage, one
  DeleteMessageBatch and one worker invocation per batch of `batch_size` messages (the CDK event
  source's, read from infra/), i.e. full batches as at scale; the "batch 1" column prices every
  run alone (a sparse load: one SendMessageBatch, ReceiveMessage, DeleteMessageBatch, invocation each).
- The kinds' jobs all sit on one shard so the dispatcher's SendMessageBatch fills as at scale.
  Minute-cron windows are whole hand-over-horizon cycles, so the due entry's moves amortise exactly.
- GB-seconds = time of jobsched's own code (Worker.process without the handler; the API request;
  the dispatcher's hand-over of the run) against in-process moto, times the function's memory from
  infra/, arm64 price. Measured as the thread's CPU time, which is its wall time on an idle core (moto
  runs in the thread, standing in for the services' latency) but, unlike wall time, survives a busy
  shared machine; wall time is in the JSON too. Lambda's per-invocation overhead is not in it.
- Idle ESM long polls (estimate: 5 pollers x 3 twenty-second polls a minute, on both the execution
  queue and its redrive queue) are a fixed cost per minute; scheduled EventBridge rules are free;
  X-Ray, CloudWatch Logs/metrics and storage are not counted.

Results: a table on stdout and JSON (bench/results/costs.json, or --out); per kind, besides the
priced amounts, `units`: every table's read and write units per run by the phase that spent them
("dispatch": the hand-over's stamps and index moves; "run": the worker's hold, reads and history;
"api"; "workflow": the Step Functions integrations), which `jobsched capacity --costs` plans with.
`run(quick)` and
`render(results)` are what `python -m bench` calls. It runs against whatever `jobsched` is first on
the path (e.g. PYTHONPATH=/tmp/before/layers/core to measure another checkout's core).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "jobsched")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3
from moto import mock_aws

from jobsched.adapters.targets import TargetFactory

if __package__:
    from bench.billing import Meter, Usage, add_time, clocks, shapes_from_specs, time_of
    from bench.peers import LambdaInvoke, Webhook
else:  # run as a file (python bench/costs.py): the model beside it, whatever `bench` is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from billing import (  # type: ignore[no-redef,import-not-found]
        Meter,
        Usage,
        add_time,
        clocks,
        shapes_from_specs,
        time_of,
    )
    from peers import LambdaInvoke, Webhook  # type: ignore[no-redef,import-not-found]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
REGION = "us-east-1"
PREFIX = "bench"
TENANT = "bench"
# Passes run at second 20 of each minute (EventBridge's rate(1 minute) fires at some second).
T0 = datetime(2026, 11, 30, 12, 0, 20, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
# The phase a timed function's AWS units are booked to (bench/billing.py: Meter.phase), for the
# capacity plan: what the dispatcher spends ahead of the runs, and what the runs spend themselves.
PHASES = {"dispatcher": "dispatch", "handover": "dispatch", "worker": "run", "api": "api"}
MONTH_MINUTES = 30 * 24 * 60

# ../shared/DESIGN.md, "Prices used for cost figures" (us-east-1 list prices, on demand), in $ per unit.
PRICES: dict[str, float] = {
    "dynamodb_wru": 0.625e-6,
    "dynamodb_rru": 0.125e-6,
    "sqs_request": 0.40e-6,
    "lambda_request": 0.20e-6,
    "lambda_gb_second_arm64": 0.0000133334,
    "sfn_standard_transition": 25e-6,
    "api_gateway_rest_request": 3.50e-6,
    "eventbridge_scheduler_invocation": 1.00e-6,
    # Not in DESIGN.md's list: AWS's us-east-1 list price, $0.03 per 10,000 KMS requests (an http
    # target's worker decrypts its tenant's signing secret once per cached minute). STS is free.
    "kms_request": 0.03 / 10_000,
    # DESIGN.md's Fargate (Linux/ARM) prices, billed per second with a one-minute minimum.
    "fargate_vcpu_hour_arm64": 0.03238,
    "fargate_gb_hour_arm64": 0.00356,
}
# The role a tenant's AWS targets name (moto's account): assumed with ExternalId = the tenant.
TARGET_ROLE = "arn:aws:iam::123456789012:role/tenant-targets"
TARGET_FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:tenant-fn"
# Lambda's SQS event source mapping when the queue is empty: 5 pollers long-polling 20 s (estimate).
ESM_IDLE_RECEIVES_PER_MINUTE = 5 * 3
ESM_QUEUES = 2  # the worker's execution queue and the reconciler's redrive queue


# -- what infra/ deploys (read from the CDK sources, without starting CDK) ------------------------------


@dataclass(frozen=True)
class InfraFacts:
    """The deployed shape the prices depend on."""

    memory_mb: dict[str, int]
    worker_batch_size: int
    shard_count: int
    environment: dict[str, str]  # the functions' JOBSCHED_* settings the stack sets as literals
    dispatcher_invocations: int = 1  # per tick (a fleet may split the shards over several)


def infra_root() -> Path:
    """The checkout the measured core comes from (its infra/ describes what that core is deployed as)."""
    import jobsched

    root = Path(jobsched.__file__).resolve().parents[3]
    return root if (root / "infra" / "jobsched_infra").is_dir() else ROOT


def _module_constant(tree: ast.Module, name: str) -> Any:
    """What a module-level NAME = <literal> or NAME = resources.<SPEC>.<field> assigns."""
    return next(
        _literal_or_spec(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    )


def _literal_or_spec(node: ast.expr) -> Any:
    """A literal, or a field of a jobsched.resources spec (the one definition the stack reads)."""
    from jobsched import resources

    path: list[str] = []
    while isinstance(node, ast.Attribute):
        path.insert(0, node.attr)
        node = node.value
    if not path:
        return ast.literal_eval(node)
    if not (isinstance(node, ast.Name) and node.id == "resources"):
        raise ValueError(f"not a literal nor a jobsched.resources field: {ast.dump(node)}")
    value: Any = resources
    for attr in path:
        value = getattr(value, attr)
    return value


def infra_facts(root: Path | None = None) -> InfraFacts:
    """Lambda memory per function, the worker's SQS batch size and the shard count, from infra/'s sources."""
    root = root or infra_root()
    constructs = root / "infra" / "jobsched_infra" / "constructs"
    stack = ast.parse((root / "infra" / "jobsched_infra" / "stack.py").read_text())
    default_memory = _param_default(
        ast.parse((constructs / "functions.py").read_text()), "JobschedFunction", "memory_size"
    )
    memory: dict[str, int] = {}
    batch: int | None = None
    for path in sorted(constructs.glob("*.py")):
        tree = ast.parse(path.read_text())
        for call in _calls(tree, "JobschedFunction"):
            kw = {k.arg: k.value for k in call.keywords}
            if not isinstance(kw["name"], ast.Constant):  # QueueFunction's own call: the stack names those
                continue
            name = ast.literal_eval(kw["name"])
            memory[name] = ast.literal_eval(kw["memory_size"]) if "memory_size" in kw else default_memory
    for call in _calls(stack, "QueueFunction"):
        kw = {k.arg: k.value for k in call.keywords}
        name = ast.literal_eval(kw["name"])
        memory[name] = default_memory
        if name == "worker":
            batch = _literal_or_spec(kw["source"]).batch_size  # resources.WORKER_EVENT_SOURCE
    shards = _module_constant(stack, "DEFAULT_SHARD_COUNT")
    if batch is None or not {"worker", "dispatcher", "api"} <= set(memory):
        raise RuntimeError(f"could not read the functions' memory or the batch size from {constructs}")
    try:
        invocations = _param_default(stack, "JobschedStack", "dispatcher_invocations")
    except RuntimeError:  # a stack without the parameter ticks one invocation
        invocations = 1
    return InfraFacts(
        memory_mb=dict(sorted(memory.items())),
        worker_batch_size=int(batch),
        shard_count=int(shards),
        environment=_stack_env(stack),
        dispatcher_invocations=invocations,
    )


def _stack_env(stack: ast.AST) -> dict[str, str]:
    """The stack's `shared_env` entries whose value is a literal or str(<module constant>)."""
    from jobsched import constants

    consts: dict[str, Any] = {}
    for node in getattr(stack, "body", []):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            consts.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    out: dict[str, str] = {}
    for node in ast.walk(stack):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)):
            continue
        if not any(isinstance(t, ast.Name) and t.id == "shared_env" for t in node.targets):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            if not (isinstance(key, ast.Attribute) and hasattr(constants, key.attr)):
                continue
            if isinstance(value, ast.Constant):
                out[getattr(constants, key.attr)] = str(value.value)
            elif (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "str"
                and len(value.args) == 1
                and isinstance(value.args[0], ast.Name)
                and value.args[0].id in consts
            ):
                out[getattr(constants, key.attr)] = str(consts[value.args[0].id])
            elif (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "str"
                and len(value.args) == 1
                and isinstance(value.args[0], ast.Attribute)
            ):
                out[getattr(constants, key.attr)] = str(_literal_or_spec(value.args[0]))
    return out


def _calls(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                yield node


def _param_default(tree: ast.AST, class_name: str, param: str) -> int:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    args = fn.args
                    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                        if arg.arg == param and default is not None:
                            return int(ast.literal_eval(default))
                    positional = args.args[len(args.args) - len(args.defaults) :]
                    for arg, default in zip(positional, args.defaults, strict=True):
                        if arg.arg == param:
                            return int(ast.literal_eval(default))
    raise RuntimeError(f"no default for {class_name}({param}=...)")


# -- one metered moto account with the stack's resources ----------------------------------------------


@dataclass
class Clocks:
    """Seconds of jobsched's own code, per function, with the meter's and the handlers' time taken out."""

    worker: float = 0.0
    dispatcher: float = 0.0  # whole passes
    handover: float = 0.0  # the part of passes that handed due runs over (Dispatcher.hand_over)
    api: float = 0.0
    # A target's call (TargetFactory's adapter: http, lambda, sqs), taken out of `worker` like a
    # python handler's time; the worker's Lambda is billed for its wall time (it waits on the peer).
    target: float = 0.0


@dataclass
class Account:
    """Services wired to moto, metered, on a fake clock; a pump that plays the SQS event source mapping."""

    settings: Any
    svc: Any
    clock: Any
    meter: Meter
    plain: Any  # a session whose calls are serialised but not billed (the ESM's, the meter's reads)
    app: Any
    handler_time: dict[int, list[float]]  # per thread, [CPU, wall] seconds inside handlers
    sqs: Any = None  # plain clients: the event source mapping's receives and deletes, workflow reads
    sfn: Any = None
    seconds: Clocks = field(default_factory=Clocks)  # thread CPU time: what GB-s are priced on
    wall: Clocks = field(default_factory=Clocks)  # wall time, for reference (noisy on a shared machine)
    in_calls: Clocks = field(default_factory=Clocks)  # the part of `seconds` spent inside AWS calls (moto)
    deliveries: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    api_requests: int = 0
    in_pass: bool = False
    held: list[dict[str, Any]] = field(default_factory=list)  # received, not due yet
    peers: dict[str, Any] = field(default_factory=dict)  # the loopback peers targets call (bench/peers.py)
    user_queue_url: str = ""  # the tenant's own queue an sqs target sends to

    # -- timing ----------------------------------------------------------------------------------------
    @contextmanager
    def timed(self, function: str, *, process_wide: bool = False) -> Iterator[None]:
        """Add the block's time, minus the meter's and the handlers', to `function`'s.

        CPU time is what GB-s are priced on: moto runs in-process, standing in for the services'
        latency, and CPU time is what a shared, busy machine leaves intact (wall time is kept for
        reference). This thread's CPU time, unless `process_wide`: the dispatcher hands a page over
        on helper threads, and nothing else runs during a pass (workflows are settled before it).
        """
        thread = None if process_wide else threading.get_ident()

        def cpu() -> tuple[float, float]:
            return (time.process_time() if process_wide else time.thread_time()), time.perf_counter()

        def totals() -> tuple[list[float], ...]:
            return tuple(
                time_of(t, thread) for t in (self.meter.hook_time, self.meter.call_time, self.handler_time)
            )

        before, start = totals(), cpu()
        phase, self.meter.phase = self.meter.phase, PHASES[function]
        try:
            yield
        finally:
            self.meter.phase = phase
            end, after = cpu(), totals()
            for i, into in enumerate((self.seconds, self.wall)):
                spent = end[i] - start[i] - (after[0][i] - before[0][i]) - (after[2][i] - before[2][i])
                setattr(into, function, getattr(into, function) + max(0.0, spent))
            self.in_calls_add(function, after[1][0] - before[1][0])

    def in_calls_add(self, function: str, seconds: float) -> None:
        """Record CPU seconds spent inside AWS calls (moto) for `function`."""
        setattr(self.in_calls, function, getattr(self.in_calls, function) + seconds)

    # -- the pieces AWS runs -----------------------------------------------------------------------------
    def dispatch(self) -> int:
        """One dispatcher pass (the EventBridge tick); runs handed over."""
        self.in_pass = True
        try:
            report = self.svc.dispatcher.dispatch_all()
        finally:
            self.in_pass = False
        return int(report.runs_sent)

    def time_dispatcher(self) -> None:
        """Clock each shard pass in the thread that runs it, and its per-run part (hand_over) apart."""
        dispatcher = self.svc.dispatcher
        shard_pass, hand_over = dispatcher.dispatch_shard, dispatcher.hand_over

        def timed_shard_pass(*args: Any, **kwargs: Any) -> Any:
            with self.timed("dispatcher", process_wide=True):
                return shard_pass(*args, **kwargs)

        def timed_hand_over(*args: Any, **kwargs: Any) -> Any:
            if not self.in_pass:  # the API handing a due-soon job over: the API's time
                return hand_over(*args, **kwargs)
            with self.timed("handover", process_wide=True):
                return hand_over(*args, **kwargs)

        dispatcher.dispatch_shard, dispatcher.hand_over = timed_shard_pass, timed_hand_over

    def post(self, body: dict[str, Any]) -> str:
        """POST /api/jobs through the API Lambda's resolver; the new job's id."""
        from jobsched.api import guard_body
        from jobsched.local import events, lambdas

        headers = {"Content-Type": "application/json", "X-Tenant": TENANT}
        event = events.api_gateway_event("POST", "/api/jobs", headers, json.dumps(body).encode())
        with self.timed("api"):
            out = guard_body(event) or self.app.resolve(event, lambdas.LambdaContext("api"))
        self.api_requests += 1
        if out["statusCode"] != 201:
            raise RuntimeError(f"POST /api/jobs answered {out['statusCode']}: {out.get('body')}")
        return str(json.loads(out["body"])["job_id"])

    def post_batch(self, bodies: list[dict[str, Any]], *, key: str) -> list[str]:
        """POST /api/jobs/batch (up to 100 jobs, with the batch's Idempotency-Key, as `jobsched submit
        --file` sends them) through the API Lambda's resolver; the new jobs' ids."""
        from jobsched.api import guard_body
        from jobsched.local import events, lambdas

        headers = {"Content-Type": "application/json", "X-Tenant": TENANT, "Idempotency-Key": key}
        body = json.dumps({"jobs": bodies}).encode()
        event = events.api_gateway_event("POST", "/api/jobs/batch", headers, body)
        with self.timed("api"):
            out = guard_body(event) or self.app.resolve(event, lambdas.LambdaContext("api"))
        self.api_requests += 1
        items = json.loads(out["body"]).get("items", []) if out["statusCode"] == 200 else []
        if len(items) != len(bodies) or any("job_id" not in i for i in items):
            raise RuntimeError(f"POST /api/jobs/batch answered {out['statusCode']}: {out.get('body')}")
        return [str(i["job_id"]) for i in items]

    def pump(self, until: datetime) -> int:
        """Deliver every message due by `until`, oldest first, each to Worker.process; returns deliveries.

        Plays SQS's DelaySeconds with the fake clock: messages were sent undelayed, so each is
        received at once and held (invisible for hours of real time) until the clock reaches its
        second. A message left in the queue by the worker (another holds its run) is held again and
        tried on the next call, as its visibility timeout would bring it back.
        """
        from jobsched.services.run import Delivery, InFlightElsewhere

        done, tried = 0, set()
        while True:
            self._receive()
            ready = sorted(
                (m for m in self.held if m["MessageId"] not in tried and m["due"] <= until),
                key=lambda m: m["due"],
            )
            if not ready:
                return done
            for m in ready:
                self.held.remove(m)
                tried.add(m["MessageId"])
                if m["due"] > self.clock.now():
                    self.clock.set(m["due"])  # SQS held it back until its second
                self.deliveries += 1
                done += 1
                try:
                    with self.timed("worker"):
                        outcome = self.svc.worker.process(
                            Delivery(m["MessageId"], m["ReceiptHandle"], m["Body"])
                        )
                except InFlightElsewhere:
                    self.outcomes["left"] += 1
                    self.held.append(m)
                    continue
                self.outcomes[str(getattr(outcome, "value", outcome))] += 1
                self.sqs.delete_message(
                    QueueUrl=self.settings.execution_queue_url, ReceiptHandle=m["ReceiptHandle"]
                )

    def _receive(self) -> None:
        from jobsched.domain import times
        from jobsched.domain.models import RunMessage

        url = self.settings.execution_queue_url
        while got := self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=43_200
        ).get("Messages", []):
            for m in got:
                m["due"] = times.parse_stored(RunMessage.model_validate_json(m["Body"]).scheduled_for)
                self.held.append(m)

    def executions(self) -> list[dict[str, Any]]:
        """Every workflow execution so far (failure and DAG workflows)."""
        out: list[dict[str, Any]] = []
        for arn in (self.settings.failure_workflow_arn, self.settings.dag_workflow_arn):
            kwargs: dict[str, Any] = {"stateMachineArn": arn, "maxResults": 1000}
            while True:
                page = self.sfn.list_executions(**kwargs)
                out.extend(page["executions"])
                if not page.get("nextToken"):
                    break
                kwargs["nextToken"] = page["nextToken"]
        return out

    def settle(self, timeout: float = 120) -> None:
        """Wait for running workflows, delivering what they enqueue, until nothing is left to do now."""
        deadline = time.monotonic() + timeout
        while True:
            running = any(e["status"] == "RUNNING" for e in self.executions())
            delivered = self.pump(self.clock.now())
            if not running and not delivered:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("workflows still running after the timeout")
            if not delivered:
                time.sleep(0.05)

    def minute(self, at: datetime) -> int:
        """A dispatcher pass at `at`, then everything due before the next pass; returns runs handed over."""
        self.clock.set(at)
        sent = self.dispatch()
        self.settle()
        self.pump(at + MINUTE - timedelta(microseconds=1))
        self.settle()
        return sent

    def transitions(self) -> int:
        """State transitions billed so far: every state entered, over every execution."""
        total = 0
        for execution in self.executions():
            if execution["status"] != "SUCCEEDED":
                raise RuntimeError(f"workflow execution {execution['name']} ended {execution['status']}")
            kwargs: dict[str, Any] = {"executionArn": execution["executionArn"], "maxResults": 1000}
            while True:
                page = self.sfn.get_execution_history(**kwargs)
                total += sum(e["type"].endswith("StateEntered") for e in page["events"])
                if not page.get("nextToken"):
                    break
                kwargs["nextToken"] = page["nextToken"]
        return total

    def usage(self, passes: int = 0) -> Window:
        """Everything so far: billed usage, seconds per function, deliveries, API requests, transitions."""
        return Window(
            usage=self.meter.snapshot(),
            seconds=dataclasses.replace(self.seconds),
            wall=dataclasses.replace(self.wall),
            in_calls=dataclasses.replace(self.in_calls),
            deliveries=self.deliveries,
            api_requests=self.api_requests,
            transitions=self.transitions(),
            passes=passes,
        )


@contextmanager
def account(shards: int, environment: dict[str, str]) -> Iterator[Account]:
    """A fresh moto account holding every resource jobsched.resources defines, metered.

    `environment`: JOBSCHED_* settings (as the functions would read them) on top of the defaults.
    """
    from jobsched import constants as c
    from jobsched import resources
    from jobsched.adapters.idempotency import persistence
    from jobsched.adapters.targets import AddressPolicy, AssumedRoles
    from jobsched.api import build_app
    from jobsched.handlers import HandlerRegistry, registry
    from jobsched.ports import FakeClock
    from jobsched.settings import Settings
    from jobsched.wiring import build

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        plain = boto3.session.Session(region_name=REGION)
        meter = Meter(tables=shapes_from_specs(PREFIX), reader=None)
        meter.serialise(plain)
        meter.reader = plain.client("dynamodb")
        made = resources.create_local_resources(
            prefix=PREFIX,
            dynamodb=plain.client("dynamodb"),
            sqs=plain.client("sqs"),
            sns=plain.client("sns"),
            stepfunctions=plain.client("stepfunctions"),
            kms=plain.client("kms"),
        )
        settings = Settings.from_env(
            {
                c.LEASE_SECONDS_ENV: str(resources.EXECUTION_QUEUE.visibility_timeout_seconds),
                c.DEMO_HANDLERS_ENV: "true",  # the workloads run demo.* (on AWS: -c demo_handlers=true)
                **environment,  # what the stack sets, then the caller's JOBSCHED_* overrides
                c.JOBS_TABLE_ENV: made[resources.JOBS_TABLE.logical_id],
                c.RUNS_TABLE_ENV: made[resources.RUNS_TABLE.logical_id],
                c.EXECUTION_QUEUE_URL_ENV: made[resources.EXECUTION_QUEUE.logical_id],
                c.EXECUTION_DLQ_URL_ENV: made[resources.EXECUTION_DLQ.logical_id],
                c.FAILURE_WORKFLOW_ARN_ENV: made[resources.FAILURE_WORKFLOW.logical_id],
                c.DAG_WORKFLOW_ARN_ENV: made[resources.DAG_WORKFLOW.logical_id],
                c.ALERT_TOPIC_ARN_ENV: made[resources.ALERT_TOPIC.logical_id],
                c.SHARD_COUNT_ENV: str(shards),
                c.SIGNING_SECRETS_TABLE_ENV: made[resources.SIGNING_SECRETS_TABLE.logical_id],
                c.SIGNING_KEY_ARN_ENV: made[resources.SIGNING_KEY.logical_id],
                c.TARGET_POLICY_ENV: "local",  # the http target's peer listens on loopback
            }
        )
        # The pump receives ahead of time and puts back what is not due yet; those receives are
        # not failures and must not move a message to the redrive queue.
        sqs = plain.client("sqs")
        attrs = sqs.get_queue_attributes(
            QueueUrl=settings.execution_queue_url, AttributeNames=["RedrivePolicy"]
        )
        policy = json.loads(attrs["Attributes"]["RedrivePolicy"])
        policy["maxReceiveCount"] = 100_000
        sqs.set_queue_attributes(
            QueueUrl=settings.execution_queue_url, Attributes={"RedrivePolicy": json.dumps(policy)}
        )

        # The Step Functions integrations call DynamoDB and SQS through boto3's default session.
        boto3.setup_default_session(region_name=REGION)
        meter.attach(boto3.DEFAULT_SESSION, source="sfn")
        billed = boto3.session.Session(region_name=REGION)
        meter.attach(billed, source="app")

        handler_time: dict[int, list[float]] = {}
        handlers = HandlerRegistry()
        for name in registry.names():
            handlers.register(name, _timed_handler(registry.get(name), handler_time))
        clock = FakeClock(T0)
        svc = build(
            settings,
            dynamodb=billed.client("dynamodb"),
            sqs=billed.client("sqs"),
            stepfunctions=billed.client("stepfunctions"),
            clock=clock,
            handlers=handlers,
            kms=billed.client("kms"),
            sts=billed.client("sts"),
        )
        # The AWS targets' clients, built on each tenant's assumed credentials, billed as "target"
        # (their calls land on the tenant's account); the Lambda Invoke API is the loopback peer.
        webhook, invoke = Webhook().start(), LambdaInvoke().start()
        roles = AssumedRoles(
            billed.client("sts"), region=REGION, clock=clock, endpoints={"lambda": invoke.url}
        )
        roles_client = roles.client

        def metered_client(service: str, role_arn: str, tenant: str) -> Any:
            client = roles_client(service, role_arn, tenant)
            if not getattr(client, "_bench_metered", False):
                meter.attach(client, source="target")
                client._bench_metered = True
            return client

        roles.client = metered_client  # type: ignore[method-assign]
        seconds, wall = Clocks(), Clocks()
        svc.worker.targets = TimedTargets(
            handlers=handlers,
            roles=roles,
            signing_secret=svc.signing_secret,
            policy=AddressPolicy.local(),
            clock=clock,
            handler_time=handler_time,
            meter=meter,
            seconds=seconds,
            wall=wall,
        )
        svc.worker.sleep = clock.advance
        svc.dispatcher.max_workers = 1  # moto in-process: one call at a time (the meter also serialises)
        # SQS would hold each message back in real time; the pump plays the delay with the fake clock.
        queue, send = svc.queue, svc.queue.send
        queue.send = lambda outgoing: send([dataclasses.replace(o, delay_seconds=0) for o in outgoing])  # type: ignore[method-assign]
        app = build_app(
            svc.job_service,
            svc.failures,
            svc.schedule,
            idempotency=persistence(svc.jobs.client, settings.jobs_table),  # type: ignore[attr-defined]  # the DynamoDB store's
            tenant_source="header",
        )
        acct = Account(
            settings,
            svc,
            clock,
            meter,
            plain,
            app,
            handler_time,
            sqs=sqs,
            sfn=plain.client("stepfunctions"),
            seconds=seconds,
            wall=wall,
            peers={"webhook": webhook, "lambda": invoke},
            user_queue_url=plain.client("sqs").create_queue(QueueName="tenant-own-queue")["QueueUrl"],
        )
        acct.time_dispatcher()
        try:
            yield acct
        finally:
            webhook.stop()
            invoke.stop()


class TimedTargets(TargetFactory):
    """TargetFactory whose adapters' calls are timed: out of the worker's own time, into `seconds`."""

    def __init__(
        self, *, handler_time: dict[int, list[float]], meter: Meter, seconds: Clocks, wall: Clocks, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.handler_time = handler_time
        self.meter = meter
        self.seconds = seconds
        self.wall = wall

    def for_spec(self, spec: Any, *, timeout_seconds: float | None = None, resources: Any = None) -> Any:
        target = super().for_spec(spec, timeout_seconds=timeout_seconds, resources=resources)
        if getattr(spec, "type", "python") == "python":
            return target  # its handler is timed already (_timed_handler)
        outer = self

        class Timed:
            def invoke(self, envelope: Any, ctx: Any) -> object:
                thread = threading.get_ident()
                start, hooks = clocks(), time_of(outer.meter.hook_time, thread)
                try:
                    return target.invoke(envelope, ctx)
                finally:
                    # Less the meter's own time in the call (the worker's `timed` takes that out already).
                    hooked = [
                        b - a for a, b in zip(hooks, time_of(outer.meter.hook_time, thread), strict=True)
                    ]
                    start = (start[0] + hooked[0], start[1] + hooked[1])
                    end = clocks()
                    add_time(outer.handler_time, start, until=end)
                    outer.seconds.target += end[0] - start[0]
                    outer.wall.target += end[1] - start[1]

        return Timed()


def _timed_handler(fn: Callable[..., Any], totals: dict[int, list[float]]) -> Callable[..., Any]:
    def timed(payload: dict[str, Any], ctx: Any) -> Any:
        start = clocks()
        try:
            return fn(payload, ctx)
        finally:
            add_time(totals, start)

    return timed


# -- measurements -----------------------------------------------------------------------------------


@dataclass
class Window:
    """What a stretch of simulated time cost, with the passes it held."""

    usage: Usage
    seconds: Clocks
    wall: Clocks
    in_calls: Clocks
    deliveries: int
    api_requests: int
    transitions: int
    passes: int

    def __sub__(self, other: Window) -> Window:
        def minus(a: Clocks, b: Clocks) -> Clocks:
            return Clocks(
                **{f.name: getattr(a, f.name) - getattr(b, f.name) for f in dataclasses.fields(Clocks)}
            )

        return Window(
            usage=self.usage - other.usage,
            seconds=minus(self.seconds, other.seconds),
            wall=minus(self.wall, other.wall),
            in_calls=minus(self.in_calls, other.in_calls),
            deliveries=self.deliveries - other.deliveries,
            api_requests=self.api_requests - other.api_requests,
            transitions=self.transitions - other.transitions,
            passes=self.passes - other.passes,
        )


@contextmanager
def window(acct: Account, passes: list[int]) -> Iterator[list[Window]]:
    """Measure the block; `passes` is a one-element counter the block increments per dispatcher pass."""
    start = acct.usage()
    out: list[Window] = []
    yield out
    out.append(acct.usage(passes[0]) - start)


def idle_passes(acct: Account, count: int, start: datetime) -> Window:
    """`count` dispatcher passes with nothing due (after the shards' first pass ever, unmeasured)."""
    acct.clock.set(start)
    acct.dispatch()
    passes = [0]
    with window(acct, passes) as measured:
        for i in range(1, count + 1):
            acct.clock.set(start + i * MINUTE)
            acct.dispatch()
            passes[0] += 1
    return measured[0]


@dataclass(frozen=True)
class Kind:
    """One run kind and how to produce its runs."""

    name: str
    title: str
    drive: Callable[[Account, bool], tuple[Window, int]]


def _recurring(
    cron: str, minutes: int, quick_minutes: int, jobs: int, **extra: Any
) -> Callable[[Account, bool], tuple[Window, int]]:
    def drive(acct: Account, quick: bool) -> tuple[Window, int]:
        n, m = (max(2, jobs // 2), quick_minutes) if quick else (jobs, minutes)
        horizon = int(getattr(acct.settings, "handover_horizon_seconds", 0))
        if cron == "* * * * *" and horizon >= 120:
            # A due entry moves once per hand-over horizon: measure whole cycles of it.
            cycle = horizon // 60
            m = math.ceil(m / cycle) * cycle
        for i in range(n):
            acct.post(
                {"type": "recurring", "cron_expr": cron, "handler": "demo.echo", "name": f"r{i}", **extra}
            )
        # Two unmeasured minutes: the tick the request itself handed over, and the first pass's.
        for k in range(2):
            acct.minute(T0 + k * MINUTE)
        passes = [0]
        succeeded = acct.outcomes["succeeded"]
        with window(acct, passes) as measured:
            for k in range(2, 2 + m):
                acct.minute(T0 + k * MINUTE)
                passes[0] += 1
        return measured[0], acct.outcomes["succeeded"] - succeeded

    return drive


def _one_offs(
    due_in: timedelta, jobs: int, *, batch: bool = False
) -> Callable[[Account, bool], tuple[Window, int]]:
    """One-offs created through the API, each its own POST /api/jobs, or (`batch`) POST /api/jobs/batch
    with up to 100 jobs a request and the request's Idempotency-Key (as `jobsched submit --file`), so
    each run bears its share of one request; a batch's one-offs are packed (jobsched.domain.packs)."""

    def drive(acct: Account, quick: bool) -> tuple[Window, int]:
        n = jobs if batch else (max(2, jobs // 2) if quick else jobs)
        passes = [0]
        succeeded = acct.outcomes["succeeded"]
        with window(acct, passes) as measured:
            acct.clock.set(T0 - timedelta(seconds=10))
            bodies = [
                {
                    "type": "one_off",
                    "run_at": (T0 + due_in + timedelta(seconds=i % 30)).isoformat(),
                    "handler": "demo.echo",
                    "name": f"o{i}",
                }
                for i in range(n)
            ]
            if batch:
                for start in range(0, n, 100):
                    acct.post_batch(bodies[start : start + 100], key=f"batch-{due_in}-{start}")
            else:
                for body in bodies:
                    acct.post(body)
            acct.settle()
            _minutes_until(acct, passes, succeeded + n, "one-offs")
        return measured[0], acct.outcomes["succeeded"] - succeeded

    return drive


def _dags(count: int) -> Callable[[Account, bool], tuple[Window, int]]:
    def drive(acct: Account, quick: bool) -> tuple[Window, int]:
        n = max(1, count // 2) if quick else count
        passes = [0]
        succeeded = acct.outcomes["succeeded"]
        with window(acct, passes) as measured:
            acct.clock.set(T0 - timedelta(seconds=10))
            run_at = (T0 + timedelta(minutes=3)).isoformat()
            for d in range(n):
                a = acct.post({"type": "one_off", "run_at": run_at, "handler": "demo.echo", "name": f"a{d}"})
                b = acct.post({"type": "one_off", "run_at": run_at, "handler": "demo.echo", "name": f"b{d}"})
                c = acct.post(
                    {"type": "dependent", "depends_on": [a, b], "handler": "demo.echo", "name": f"c{d}"}
                )
                acct.post({"type": "dependent", "depends_on": [c], "handler": "demo.echo", "name": f"d{d}"})
            _minutes_until(acct, passes, succeeded + 4 * n, "the DAGs")
        return measured[0], acct.outcomes["succeeded"] - succeeded

    return drive


def _minutes_until(acct: Account, passes: list[int], succeeded: int, what: str) -> None:
    """Minutes from T0 (a dispatcher pass, then what is due) until `succeeded` runs have succeeded."""
    for k in range(31):
        if acct.outcomes["succeeded"] >= succeeded:
            return
        acct.minute(T0 + k * MINUTE)
        passes[0] += 1
    if acct.outcomes["succeeded"] < succeeded:
        raise RuntimeError(f"{what} did not all succeed: {acct.outcomes}")


_FLAKY_RETRY = {
    "max_attempts": 3,
    "backoff": {"initial_seconds": 1, "multiplier": 1, "max_seconds": 1, "jitter": False},
}

KINDS: tuple[Kind, ...] = (
    Kind("recurring", "every minute, overlap skip (default)", _recurring("* * * * *", 60, 10, 20)),
    Kind(
        "recurring_allow",
        "every minute, overlap allow",
        _recurring("* * * * *", 30, 5, 20, overlap_policy="allow"),
    ),
    Kind("recurring_hourly", "hourly", _recurring("0 * * * *", 360, 120, 20)),
    Kind(
        "recurring_4kb",
        "every minute, skip, 4 KB payload",
        _recurring("* * * * *", 28, 14, 10, payload={"seconds": 0, "blob": "x" * 4000}),
    ),
    # Found by a dispatcher pass, as one due hours ahead is (the pass's fixed cost is apart).
    Kind("one_off", "one-off via batch API, due in 5 min", _one_offs(timedelta(minutes=5), 100, batch=True)),
    Kind(
        "one_off_due_soon",
        "one-off via batch API, due in 30 s",
        _one_offs(timedelta(seconds=30), 100, batch=True),
    ),
    Kind("one_off_single", "one-off via POST /api/jobs, due in 5 min", _one_offs(timedelta(minutes=5), 20)),
    Kind(
        "retried_once",
        "every minute, fails once then succeeds",
        _recurring("* * * * *", 5, 2, 6, payload={"fail_times": 1}, **_FLAKY_RETRY),
    ),
    Kind(
        "retried_twice",
        "every minute, fails twice then succeeds",
        _recurring("* * * * *", 5, 2, 6, payload={"fail_times": 2}, **_FLAKY_RETRY),
    ),
    Kind("dag_member", "DAG node (A,B -> C -> D, one-off, via API)", _dags(5)),
    # Targets: the same every-minute job calling the tenant's work instead of a python handler.
    Kind(
        "target_http",
        "every minute, http target (loopback peer answering at once)",
        _recurring("* * * * *", 10, 4, 20),
    ),
    Kind(
        "target_sqs",
        "every minute, sqs target (SendMessage as the tenant's role)",
        _recurring("* * * * *", 10, 4, 20),
    ),
    Kind(
        "target_lambda",
        "every minute, lambda target, sync (Invoke peer answering at once)",
        _recurring("* * * * *", 10, 4, 20),
    ),
)
_TARGETS: dict[str, Callable[[Account], dict[str, Any]]] = {
    "target_http": lambda acct: {"type": "http", "url": f"{acct.peers['webhook'].url}/hook"},
    "target_sqs": lambda acct: {"type": "sqs", "queue_url": acct.user_queue_url, "role_arn": TARGET_ROLE},
    "target_lambda": lambda acct: {
        "type": "lambda",
        "function_arn": TARGET_FUNCTION,
        "invocation": "sync",
        "role_arn": TARGET_ROLE,
    },
}
_HANDLERS = {"retried_once": "demo.flaky", "retried_twice": "demo.flaky", "recurring_4kb": "demo.sleep"}


# -- pricing ----------------------------------------------------------------------------------------------


def price(amounts: dict[str, float]) -> float:
    """$ for the given amounts (keys as in a kind's result)."""
    return (
        amounts["dynamodb_wru"] * PRICES["dynamodb_wru"]
        + amounts["dynamodb_rru"] * PRICES["dynamodb_rru"]
        + amounts["sqs_requests"] * PRICES["sqs_request"]
        + amounts["lambda_invocations"] * PRICES["lambda_request"]
        + amounts["lambda_gb_seconds"] * PRICES["lambda_gb_second_arm64"]
        + amounts["sfn_transitions"] * PRICES["sfn_standard_transition"]
        + amounts.get("api_gateway_requests", 0.0) * PRICES["api_gateway_rest_request"]
        + amounts.get("kms_requests", 0.0) * PRICES["kms_request"]
    )


def units_by_phase(by_phase: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Usage.by_phase per run as `jobsched capacity` reads it: {phase: {"<table>_<wru|rru>": n}}.

    Tables by their local names without the prefix ("table:bench-jobs" -> "jobs"); the due index as
    "due_index".
    """
    out: dict[str, dict[str, float]] = {}
    for key, n in by_phase.items():
        phase, unit, where = key.split("|", 2)
        kind, name = where.split(":", 1)
        name = name.removeprefix(f"{PREFIX}-") if kind == "table" else f"{name}_index"
        field_name = f"{name.replace('-', '_')}_{unit}"
        out.setdefault(phase, {})[field_name] = out.get(phase, {}).get(field_name, 0.0) + n
    return {phase: dict(sorted(units.items())) for phase, units in sorted(out.items())}


def per_run(measured: Window, fixed: Window, runs: int, facts: InfraFacts) -> dict[str, Any]:
    """A kind's cost per run: its window minus the dispatcher's fixed per-pass cost, plus the modelled ESM."""
    if runs <= 0:
        raise RuntimeError("no run succeeded in the window")
    fixed_passes = measured.passes / max(1, fixed.passes)
    marginal = measured.usage - _scaled_usage(fixed.usage, fixed_passes)
    view = marginal.scaled(1 / runs)
    batch = facts.worker_batch_size
    deliveries = measured.deliveries / runs
    api = measured.api_requests / runs
    dispatcher_seconds = measured.seconds.handover
    gb = (
        (
            measured.seconds.worker * facts.memory_mb["worker"]
            + dispatcher_seconds * facts.memory_mb["dispatcher"]
            + measured.seconds.api * facts.memory_mb["api"]
            # The worker waits on a target's call: billed for its wall time, not its CPU time.
            + measured.wall.target * facts.memory_mb["worker"]
        )
        / 1024
        / runs
    )
    calls: dict[str, float] = dict(view["calls"])
    calls["SQS.ReceiveMessage[esm]"] = deliveries / batch
    calls["SQS.DeleteMessageBatch[esm]"] = deliveries / batch
    calls["Lambda.Invoke[worker]"] = deliveries / batch
    if api:
        calls["Lambda.Invoke[api]"] = api
        calls["APIGateway.Request"] = api
    target_calls = {
        op.split(":", 1)[1]: n for op, n in view["calls_by_source"].items() if op.startswith("target:")
    }
    out: dict[str, Any] = {
        "runs": runs,
        "deliveries_per_run": deliveries,
        "kms_requests": sum(n for op, n in calls.items() if op.startswith("KMS.")),
        "dynamodb_wru": view["dynamodb_wru"],
        "dynamodb_rru": view["dynamodb_rru"],
        "sqs_requests": view["sqs_requests"] + 2 * deliveries / batch,
        "lambda_invocations": deliveries / batch + api,
        "lambda_gb_seconds": gb,
        "sfn_transitions": measured.transitions / runs,
        "api_gateway_requests": api,
        "wru_breakdown": view["wru"],
        # Each table's units by the phase that spent them: `jobsched capacity --costs` plans the
        # dispatch phase's ahead of the burst and the run phase's (the overlap hold, the history)
        # while it drains.
        "units": units_by_phase(view["by_phase"]),
        "seconds_per_run": {
            "worker": measured.seconds.worker / runs,
            "dispatcher": dispatcher_seconds / runs,
            "api": measured.seconds.api / runs,
            "target_call_cpu": measured.seconds.target / runs,
            "target_call_wall": measured.wall.target / runs,
        },
        # (The dispatcher's wall time is left out: its helper threads overlap, so it has no clean one.)
        "wall_seconds_per_run": {
            "worker": measured.wall.worker / runs,
            "api": measured.wall.api / runs,
        },
        # Of the CPU seconds, those inside AWS calls (moto in-process standing in for the services).
        "seconds_in_aws_calls_per_run": {
            "worker": measured.in_calls.worker / runs,
            "dispatcher": measured.in_calls.handover / runs,
            "api": measured.in_calls.api / runs,
        },
        "calls": dict(sorted(calls.items())),
        # The part of `calls` the workflows' native integrations made (Step Functions, not jobsched's code).
        "calls_via_workflows": {
            op.split(":", 1)[1]: n for op, n in view["calls_by_source"].items() if op.startswith("sfn:")
        },
        # The target's own AWS calls, made with the tenant's assumed role (SQS.SendMessage is in
        # sqs_requests and priced; a lambda target's Lambda.Invoke and its function's duration are
        # the user's bill: `user_bill_usd_per_million`, not in usd_per_million).
        "target_calls": target_calls,
        "user_bill_usd_per_million": target_calls.get("Lambda.Invoke", 0.0) * PRICES["lambda_request"] * 1e6,
    }
    out["usd_per_million"] = price(out) * 1e6
    # Batches of one: every run its own SendMessageBatch, ReceiveMessage, DeleteMessageBatch, invocation.
    sends = calls.get("SQS.SendMessageBatch", 0.0)
    sparse = dict(out)
    sparse["sqs_requests"] = out["sqs_requests"] + max(0.0, 1.0 - sends) + 2 * deliveries * (1 - 1 / batch)
    sparse["lambda_invocations"] = deliveries + api
    out["usd_per_million_batch_1"] = price(sparse) * 1e6
    out["usd_breakdown_per_million"] = _breakdown(out)
    return out


def _breakdown(amounts: dict[str, Any]) -> dict[str, float]:
    return {
        "dynamodb_writes": amounts["dynamodb_wru"] * PRICES["dynamodb_wru"] * 1e6,
        "dynamodb_reads": amounts["dynamodb_rru"] * PRICES["dynamodb_rru"] * 1e6,
        "sqs": amounts["sqs_requests"] * PRICES["sqs_request"] * 1e6,
        "lambda_requests": amounts["lambda_invocations"] * PRICES["lambda_request"] * 1e6,
        "lambda_duration": amounts["lambda_gb_seconds"] * PRICES["lambda_gb_second_arm64"] * 1e6,
        "step_functions": amounts["sfn_transitions"] * PRICES["sfn_standard_transition"] * 1e6,
        "api_gateway": amounts.get("api_gateway_requests", 0.0) * PRICES["api_gateway_rest_request"] * 1e6,
        "kms": amounts.get("kms_requests", 0.0) * PRICES["kms_request"] * 1e6,
    }


def _scaled_usage(usage: Usage, factor: float) -> Usage:
    def times(counter: Counter[str]) -> Counter[str]:
        return Counter({k: v * factor for k, v in counter.items()})

    return Usage(
        times(usage.calls),
        times(usage.wru),
        usage.rru * factor,
        usage.sqs_requests * factor,
        times(usage.sources),
        times(usage.by_phase),
    )


def fixed_per_minute(idle: Window, facts: InfraFacts, shards: int) -> dict[str, Any]:
    """The dispatcher's every-minute cost over all shards (it reads every shard whatever is due)."""
    passes = max(1, idle.passes)
    view = idle.usage.scaled(1 / passes)
    gb = idle.seconds.dispatcher / passes * facts.memory_mb["dispatcher"] / 1024
    esm = ESM_IDLE_RECEIVES_PER_MINUTE * ESM_QUEUES
    calls = dict(view["calls"])
    calls["Lambda.Invoke[dispatcher]"] = float(facts.dispatcher_invocations)
    calls["SQS.ReceiveMessage[esm idle, estimate]"] = float(esm)
    out: dict[str, Any] = {
        "shards": shards,
        "dispatcher_passes": 1,
        "dynamodb_wru": view["dynamodb_wru"],
        "dynamodb_rru": view["dynamodb_rru"],
        "sqs_requests": view["sqs_requests"] + esm,
        "lambda_invocations": float(facts.dispatcher_invocations),
        "lambda_gb_seconds": gb,
        "sfn_transitions": 0.0,
        "calls": dict(sorted(calls.items())),
        "per_shard": {
            "dynamodb_wru": view["dynamodb_wru"] / shards,
            "dynamodb_rru": view["dynamodb_rru"] / shards,
            "calls": {op: n / shards for op, n in sorted(view["calls"].items())},
        },
        "dispatcher_seconds_per_pass": idle.seconds.dispatcher / passes,
        "dispatcher_seconds_in_aws_calls_per_pass": idle.in_calls.dispatcher / passes,
    }
    out["usd_per_minute"] = price(out)
    out["usd_per_month"] = out["usd_per_minute"] * MONTH_MINUTES
    out["usd_per_month_without_esm_estimate"] = (price(out) - esm * PRICES["sqs_request"]) * MONTH_MINUTES
    return out


def reference_rows(facts: InfraFacts) -> dict[str, Any]:
    """EventBridge Scheduler's price, and the floor: one history write and the SQS minimum per run."""
    batch = facts.worker_batch_size
    floor = {
        "dynamodb_wru": 1.0,
        "dynamodb_rru": 0.0,
        "sqs_requests": 3 / batch,  # send, receive, delete, in full batches
        "lambda_invocations": 1 / batch,
        "lambda_gb_seconds": 0.0,
        "sfn_transitions": 0.0,
    }
    return {
        "eventbridge_scheduler": {"usd_per_million": PRICES["eventbridge_scheduler_invocation"] * 1e6},
        "floor": {**floor, "usd_per_million": price(floor) * 1e6},
        **one_minute_compute(),
    }


def one_minute_compute() -> dict[str, Any]:
    """The compute of a 1-minute run: on the Lambda worker (its memory; Lambda could not actually give
    it a minute: its timeout is resources.WORKER_TIMEOUT_SECONDS) and on Fargate's smallest size, the
    size jobsched.domain.compute resolves a job that asks for nothing but a longer timeout to."""
    from jobsched import resources
    from jobsched.domain.compute import fargate_size

    gb_seconds = resources.WORKER_MEMORY_MIB / 1024 * 60
    size = fargate_size(None)
    hours = 60 / 3600  # a minute: billed per second, one minute at least
    vcpu, gb = size.cpu / 1024, size.memory_mib / 1024
    fargate = hours * (vcpu * PRICES["fargate_vcpu_hour_arm64"] + gb * PRICES["fargate_gb_hour_arm64"])
    lambda_usd = PRICES["lambda_request"] + gb_seconds * PRICES["lambda_gb_second_arm64"]
    return {
        "lambda_1min": {"memory_mib": resources.WORKER_MEMORY_MIB, "usd_per_million": lambda_usd * 1e6},
        "fargate_1min": {"cpu": size.cpu, "memory_mib": size.memory_mib, "usd_per_million": fargate * 1e6},
    }


# -- the run ------------------------------------------------------------------------------------------------


def run(
    quick: bool = False, *, kinds: list[str] | None = None, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure every kind (or `kinds`); the results dict that render() prints and costs.json holds."""
    import jobsched

    say = log or (lambda line: print(line, file=sys.stderr, flush=True))  # progress goes to stderr
    facts = infra_facts()
    # The settings the functions get: the stack's literals, then JOBSCHED_* from this environment.
    environment = {**facts.environment, **{k: v for k, v in os.environ.items() if k.startswith("JOBSCHED_")}}
    shards = int(environment.get("JOBSCHED_SHARD_COUNT", facts.shard_count))
    started = time.perf_counter()
    with account(shards, environment) as acct:
        idle = idle_passes(acct, 3 if quick else 10, T0 - 20 * MINUTE)
        settings = acct.settings.model_dump(mode="json")
    say(f"  fixed per pass ({facts.shard_count} shards): {time.perf_counter() - started:.1f} s")
    results: dict[str, Any] = {
        "kinds": {},
        "fixed_per_minute": fixed_per_minute(idle, facts, shards),
        "reference": reference_rows(facts),
        "prices": PRICES,
        "infra": dataclasses.asdict(facts),
        "settings": {k: v for k, v in settings.items() if not k.endswith(("_table", "_url", "_arn"))},
        "assumptions": ASSUMPTIONS,
        "commit": _commit(Path(jobsched.__file__).resolve().parent),
        "core": str(Path(jobsched.__file__).resolve().parent),
        "quick": quick,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    for kind in KINDS:
        if kinds and kind.name not in kinds:
            continue
        began = time.perf_counter()
        # One shard: the kind's jobs share the dispatcher's pages and SendMessageBatch fills as at scale.
        with account(1, environment) as acct:
            fixed = idle_passes(acct, 3, T0 - 5 * MINUTE)
            if kind.name in _HANDLERS:
                _use_handler(acct, _HANDLERS[kind.name])
            if kind.name in _TARGETS:
                _use_target(acct, _TARGETS[kind.name](acct))
            measured, runs = kind.drive(acct, quick)
            results["kinds"][kind.name] = {"title": kind.title, **per_run(measured, fixed, runs, facts)}
            results["kinds"][kind.name]["outcomes"] = dict(acct.outcomes)
        say(f"  {kind.name}: {runs} runs, {time.perf_counter() - began:.1f} s")
    return results


def _use_handler(acct: Account, handler: str) -> None:
    """Make the kind's posts name `handler` (demo.echo otherwise)."""
    post = acct.post
    acct.post = lambda body: post({**body, "handler": handler})  # type: ignore[method-assign]


def _use_target(acct: Account, target: dict[str, Any]) -> None:
    """Make the kind's posts name `target` instead of a handler."""
    post = acct.post
    acct.post = lambda body: post({**{k: v for k, v in body.items() if k != "handler"}, "target": target})  # type: ignore[method-assign]


ASSUMPTIONS = [
    "Worker: one invocation, one ESM ReceiveMessage and one DeleteMessageBatch per batch of the CDK "
    "event source's batch_size (full batches); '$/M b=1' prices every run alone (sparse load).",
    "The kinds' jobs share one shard so the dispatcher's SendMessageBatch fills as at scale; the "
    "dispatcher's per-pass cost (every shard, every minute) is measured with nothing due and reported "
    "per minute, not per run. Minute-cron windows are whole hand-over-horizon cycles.",
    "GB-s = jobsched's own time (Worker.process minus the handler, the API request, the dispatcher's "
    "hand-over of the run) against in-process moto (standing in for the services' latency) x the "
    "function's memory from infra/; measured as thread CPU time (= wall time on an idle core; wall "
    "time is in the JSON); Lambda's per-invocation runtime overhead is not in it.",
    "Settings: what the CDK stack gives the functions (its literal JOBSCHED_* values), then any "
    "JOBSCHED_* variable in the environment; see 'settings' in the JSON.",
    "Step Functions Standard: every state entered (Map iterations' states included) is a transition; "
    "StartExecution itself is free. The integrations' DynamoDB/SQS calls are billed like jobsched's.",
    "Idle ESM long polls (estimate): 5 pollers x 3 twenty-second polls a minute on the execution queue "
    "and on its redrive queue. Scheduled EventBridge rules are free. X-Ray, CloudWatch and storage "
    "are not counted.",
    "Targets: the peers answer at once on loopback (bench/peers.py), so the worker's GB-s of a "
    "target_* kind adds the call's wall time (the worker waits on it) and nothing of the peer's work. "
    "target_sqs's SendMessage (as the tenant's role) is priced; target_lambda's Invoke request and "
    "its function's duration are the user's bill ('user $/M', the duration not counted). STS "
    "AssumeRole is free and cached per (role, tenant) until 5 min before expiry (1 h sessions): "
    "at scale 1 per 55 min per worker environment. KMS Decrypt of the signing secret: once per "
    "cached minute per tenant per worker environment, at $0.03/10k (not a DESIGN.md price).",
    "One-off and DAG kinds include their creation (POST /api/jobs, or for one_off and one_off_due_soon "
    "each run's share of a POST /api/jobs/batch of 100: API Gateway + API Lambda); "
    "recurring jobs' creation is amortised over their runs (0).",
]


def _commit(path: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    sha = git("rev-parse", "HEAD") or "unknown"
    return f"{sha}+dirty" if git("status", "--porcelain", "--", ".") else sha


# -- the table -------------------------------------------------------------------------------------------


def requests_per_run(kind: dict[str, Any]) -> float:
    """Every AWS request a run makes or shares (DynamoDB, SQS, Lambda invocations, API Gateway)."""
    return float(sum(kind["calls"].values()))


def before_and_after(results: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """Lines comparing each kind with bench/results/costs-before.json, where it has the kind."""
    both = [n for n in results["kinds"] if n in before.get("kinds", {})]
    if not both:
        return []
    title = "Before -> after (bench/results/costs-before.json; per kind, the commit it was measured at):"
    lines = ["", title, ""]
    head = f"{'kind':<18} {'before':>8} {'$/M':>15} {'AWS requests/run':>18}"
    lines += [head, "-" * len(head)]
    for name in both:
        b, a = before["kinds"][name], results["kinds"][name]
        commit = str(b.get("commit") or before.get("commit", "?"))[:7]
        lines.append(
            f"{name:<18} {commit:>8} {b['usd_per_million']:>6.2f} -> {a['usd_per_million']:>5.2f} "
            f"{requests_per_run(b):>8.2f} -> {requests_per_run(a):>5.2f}"
        )
    return lines


def render(results: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """The results as text tables: per kind, calls by operation, the fixed per-minute cost, assumptions;
    and `before` (a costs-before.json) beside them."""
    kinds: dict[str, Any] = results["kinds"]
    commit = str(results.get("commit", "?"))
    lines = [
        f"AWS cost per healthy run (core {commit[:12]}{'+dirty' if commit.endswith('+dirty') else ''} "
        f"at {results.get('core', '?')}; prices from DESIGN.md; "
        f"worker batch {results['infra']['worker_batch_size']}, memory {results['infra']['memory_mb']} MB)",
        "",
    ]
    header = (
        f"{'kind':<18} {'runs':>5} {'WRU':>6} {'RRU':>6} {'SQS req':>7} {'λ inv':>6} {'GB-s':>9} "
        f"{'SFN tr':>6} {'APIGW':>5} {'$/M':>7} {'$/M b=1':>8}"
    )
    lines += [header, "-" * len(header)]
    for name, k in kinds.items():
        lines.append(
            f"{name:<18} {k['runs']:>5} {k['dynamodb_wru']:>6.2f} {k['dynamodb_rru']:>6.2f} "
            f"{k['sqs_requests']:>7.2f} {k['lambda_invocations']:>6.2f} {k['lambda_gb_seconds']:>9.5f} "
            f"{k['sfn_transitions']:>6.2f} {k.get('api_gateway_requests', 0):>5.2f} "
            f"{k['usd_per_million']:>7.2f} {k['usd_per_million_batch_1']:>8.2f}"
        )
    ref = results["reference"]
    lines.append(
        f"{'EventBridge Sched.':<18} {'':>5} {'':>6} {'':>6} {'':>7} {'':>6} {'':>9} {'':>6} {'':>5} "
        f"{ref['eventbridge_scheduler']['usd_per_million']:>7.2f}"
    )
    for key, label in (("lambda_1min", "1-min Lambda run"), ("fargate_1min", "1-min Fargate run")):
        if key in ref:  # compute only (a run's DynamoDB and SQS calls are the rows above)
            lines.append(
                f"{label:<18} {'':>5} {'':>6} {'':>6} {'':>7} {'':>6} {'':>9} {'':>6} {'':>5} "
                f"{ref[key]['usd_per_million']:>7.2f}"
            )
    fl = ref["floor"]
    lines.append(
        f"{'floor':<18} {'':>5} {fl['dynamodb_wru']:>6.2f} {fl['dynamodb_rru']:>6.2f} "
        f"{fl['sqs_requests']:>7.2f} {fl['lambda_invocations']:>6.2f} {fl['lambda_gb_seconds']:>9.5f} "
        f"{0:>6.2f} {0:>5.2f} {fl['usd_per_million']:>7.2f}"
    )
    unhealthy = {
        name: {o: n for o, n in k.get("outcomes", {}).items() if o not in {"succeeded", "failed"}}
        for name, k in kinds.items()
    }
    for name, odd in unhealthy.items():
        if odd:
            lines.append(f"  warning: {name} had deliveries that were not healthy runs: {odd}")
    if before is None:
        baseline = RESULTS / "costs-before.json"
        before = json.loads(baseline.read_text()) if baseline.exists() else {}
    lines += before_and_after(results, before)
    lines += [
        "",
        "AWS requests per run, by operation ([esm]/[worker]/[api]: modelled, not made by jobsched):",
        "",
    ]
    ops = sorted({op for k in kinds.values() for op in k["calls"]})
    short = {name: name.replace("recurring", "rec").replace("retried", "retry")[:12] for name in kinds}
    head = f"{'operation':<32} " + " ".join(f"{short[n]:>12}" for n in kinds)
    lines += [head, "-" * len(head)]
    for op in ops:
        lines.append(f"{op:<32} " + " ".join(f"{kinds[n]['calls'].get(op, 0):>12.2f}" for n in kinds))
    lines.append(f"{'all requests':<32} " + " ".join(f"{requests_per_run(kinds[n]):>12.2f}" for n in kinds))
    lines.append(
        f"{'WRU: table / index / transaction':<32} "
        + " ".join(f"{_wru_parts(kinds[n]['wru_breakdown']):>12}" for n in kinds)
    )
    targeted = {n: k for n, k in kinds.items() if n.startswith("target_")}
    if targeted:
        lines += [
            "",
            "Targets: the call itself (wall ms per run, billed as worker GB-s), its own AWS calls per run "
            "(tenant's role), user's bill:",
            "",
            f"{'kind':<18} {'call ms':>8} {'KMS/run':>8} {'own calls per run':<34} {'user $/M':>8}",
        ]
        for name, k in targeted.items():
            own = ", ".join(f"{op} {n:.2f}" for op, n in sorted(k.get("target_calls", {}).items())) or "-"
            lines.append(
                f"{name:<18} {k['seconds_per_run'].get('target_call_wall', 0) * 1e3:>8.2f} "
                f"{k.get('kms_requests', 0):>8.3f} {own:<34} {k.get('user_bill_usd_per_million', 0):>8.2f}"
            )
    fixed = results["fixed_per_minute"]
    lines += [
        "",
        f"Fixed, every minute whatever is due (dispatcher pass over {fixed['shards']} shards):",
        f"  {fixed['dynamodb_wru']:.1f} WRU ({fixed['per_shard']['dynamodb_wru']:.2f}/shard), "
        f"{fixed['dynamodb_rru']:.1f} RRU ({fixed['per_shard']['dynamodb_rru']:.2f}/shard), "
        f"{fixed['lambda_invocations']:.0f} dispatcher invocation(s) "
        f"({fixed['lambda_gb_seconds']:.4f} GB-s), "
        f"{fixed['sqs_requests']:.0f} SQS requests (idle ESM polls, estimate)",
        "  calls per shard: " + ", ".join(f"{op} {n:.2f}" for op, n in fixed["per_shard"]["calls"].items()),
        f"  = ${fixed['usd_per_minute'] * 1e3:.4f} per 1,000 minutes, ${fixed['usd_per_month']:.2f} a month "
        f"(${fixed['usd_per_month_without_esm_estimate']:.2f} without the ESM estimate)",
        "",
        "Assumptions:",
        *(f"  - {a}" for a in results.get("assumptions", [])),
    ]
    return "\n".join(lines)


def _wru_parts(parts: dict[str, float]) -> str:
    table = parts.get("table", 0.0)
    index = sum(v for k, v in parts.items() if k.startswith("index:"))
    tx = parts.get("transaction", 0.0)
    return f"{table:.1f}/{index:.1f}/{tx:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.costs", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="fewer jobs and minutes (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS / "costs.json", help="where to write the JSON")
    parser.add_argument("--kind", action="append", help="only these kinds (repeatable)")
    args = parser.parse_args(argv)
    results = run(args.quick, kinds=args.kind)
    print(render(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
