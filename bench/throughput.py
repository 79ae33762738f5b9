"""Table b: end-to-end runs per second through jobsched, against the floor of the same AWS calls.

Both sides run in this process against one embedded moto server (the local stack's, with the
tables and queues `resources.create_local_resources` makes), one call at a time, in rounds:

    seed B jobs due now (untimed: items put straight into the jobs table and its due index)
    jobsched (timed): one pass of the dispatcher Lambda handler (what the EventBridge tick invokes),
        then the local stack's SQS event-source mapping (`LocalStack.poll_once`: ReceiveMessage,
        the worker Lambda handler, DeleteMessageBatch) until all B runs are done. Every AWS call
        any client in the process makes is recorded in order: operation, parameters, outcome.
    seed B other jobs (untimed): the same items, the job id differing in one character
    floor (timed): that recorded sequence replayed directly with boto3 (clients built as jobsched
        builds its own) with the other ids: the same operations, items, keys, conditions and message
        bodies, byte for byte the same sizes; receipt handles map to the replay's own receives.

So the call sequence is whatever the code does when the benchmark runs (nothing is hard-coded), and
jobsched / floor is the scheduler's own overhead: its Python (pydantic, powertools, the services),
not AWS's. Kinds: one-off jobs, and recurring jobs (a yearly cron on the due second, so each job
has one tick to hand over; overlap policy skip, the default). A warm-up round (the shards' first
pass looks back an hour) is not counted.
"""

from __future__ import annotations

import copy
import gc
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore import xform_name
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from bench.common import say, table
from jobsched.adapters.dynamodb import job_to_item
from jobsched.domain.models import Job
from jobsched.domain.status import JobStatus
from jobsched.domain.targets import PythonTarget
from jobsched.local import lambdas
from jobsched.local.stack import LocalConfig, LocalStack, free_port
from jobsched.wiring import clients

NAME = "throughput"
KINDS = ("one_off", "recurring")
# Job ids: "job_" + 26 characters like new_job_id()'s; the two sides differ in the 10th character.
JOBSCHED_IDS, FLOOR_IDS = "job_benchj", "job_benchf"


@dataclass
class Call:
    """One AWS call as the code made it."""

    service: str
    operation: str
    params: dict[str, Any]
    thread: int = 0
    error: str | None = None
    handles: list[str] = field(default_factory=list)  # ReceiveMessage: the receipt handles it got

    @property
    def name(self) -> str:
        return f"{self.service}.{self.operation}"


class Recorder:
    """Records every botocore API call made in this process while `active`, in the order made."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.active = False

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        original = getattr(BaseClient, "_make_api_call")  # noqa: B009 (botocore's private method)
        recorder = self

        def recording(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
            if not recorder.active:
                return original(client, operation_name, api_params)
            # A shallow copy now (cheap; a caller may reuse its dict for the next page), deep later.
            call = Call(
                client.meta.service_model.service_name,
                operation_name,
                dict(api_params),
                thread=threading.get_ident(),
            )
            recorder.calls.append(call)
            try:
                result = original(client, operation_name, api_params)
            except ClientError as exc:
                call.error = str(exc.response.get("Error", {}).get("Code", "ClientError"))
                raise
            if operation_name == "ReceiveMessage":
                call.handles = [m["ReceiptHandle"] for m in result.get("Messages", [])]
            return result

        setattr(BaseClient, "_make_api_call", recording)  # noqa: B010
        try:
            yield self
        finally:
            setattr(BaseClient, "_make_api_call", original)  # noqa: B010

    @contextmanager
    def recording(self) -> Iterator[list[Call]]:
        self.calls = []
        self.active = True
        try:
            yield self.calls
        finally:
            self.active = False


@dataclass
class Bench:
    """The embedded AWS with jobsched's resources, its Lambda handlers loaded, and a seeding client."""

    stack: LocalStack
    ddb: Any
    jobs_table: str
    shard_count: int

    @classmethod
    @contextmanager
    def started(cls) -> Iterator[Bench]:
        config = LocalConfig(api_port=free_port(), prefix="jobsched-bench-b")
        stack = LocalStack(config)
        # The local stack's pieces without its threads (no tick loop, no pollers): this benchmark
        # invokes the dispatcher and plays the event-source mapping itself, one call at a time.
        stack._start_aws()
        stack._create_resources()
        stack.dispatcher = lambdas.load("dispatcher")
        stack.worker = lambdas.load("worker")
        try:
            settings = stack.dispatcher.services.settings
            ddb = boto3.client("dynamodb", endpoint_url=stack.endpoint_url)
            yield cls(stack, ddb, settings.jobs_table, settings.shard_count)
        finally:
            stack.stop()

    def seed(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self.ddb.put_item(TableName=self.jobs_table, Item=item)

    def jobsched_round(self, runs: int) -> None:
        """One dispatcher pass, then the event-source mapping until `runs` messages were handled."""
        self.stack.tick()
        handled, empty = 0, 0
        while handled < runs:
            got = self.stack.poll_once()
            handled += got
            empty = 0 if got else empty + 1
            if empty > 100:
                raise SystemExit(f"throughput: only {handled} of {runs} runs reached the queue")


def job_items(
    kind: str, prefix: str, round_no: int, count: int, due: datetime, shards: int
) -> list[dict[str, Any]]:
    """`count` jobs of `kind` whose (only) tick is `due`, as the jobs table stores them."""
    items = []
    for i in range(count):
        job = Job(
            job_id=f"{prefix}{kind[0]}{round_no:04d}{i:015d}",
            tenant="bench",
            type="one_off" if kind == "one_off" else "recurring",
            status=JobStatus.SCHEDULED,
            target=PythonTarget(handler="demo.echo"),
            payload={"n": i},
            run_at=due if kind == "one_off" else None,
            # Yearly, on the due second: one tick to hand over, the next a year away.
            cron_expr=None
            if kind == "one_off"
            else f"{due.second} {due.minute} {due.hour} {due.day} {due.month} *",
            next_run_at=due,
            created_at=due,
            updated_at=due,
        )
        items.append(job_to_item(job, shard_count=shards))
    return items


def swap_ids(value: Any) -> Any:
    """The same value with every jobsched-side job id turned into its floor-side twin."""
    if isinstance(value, str):
        return value.replace(JOBSCHED_IDS, FLOOR_IDS)
    if isinstance(value, dict):
        return {k: swap_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [swap_ids(v) for v in value]
    return value


Step = tuple[Any, Call, dict[str, Any]]


@dataclass
class Replay:
    """A recorded sequence prepared for replay with the floor's ids (the preparation is untimed).

    Calls keep jobsched's concurrency: the calls the main thread made run in order on the replaying
    thread; the calls other threads made in between (the dispatcher's shards run on a thread pool)
    run on as many threads as made them, each thread's calls in their order, and the replay moves
    on when all of them are done, as dispatch_all() waits for its pool.
    """

    waves: list[list[list[Step]]]  # wave -> the threads' step lists -> steps

    @classmethod
    def of(cls, calls: list[Call], floor_clients: dict[str, Any], main: int) -> Replay:
        waves: list[list[list[Step]]] = []
        current: dict[int, list[Step]] = {}
        on_main = True
        for call in calls:
            client = floor_clients.get(call.service)
            if client is None:  # a service jobsched's clients() does not build (none on a healthy run)
                factory: Any = boto3.client
                client = floor_clients[call.service] = factory(call.service)
            step = (getattr(client, xform_name(call.operation)), call, swap_ids(copy.deepcopy(call.params)))
            if (call.thread == main) != on_main and current:
                waves.append(list(current.values()))
                current = {}
            on_main = call.thread == main
            current.setdefault(call.thread, []).append(step)
        if current:
            waves.append(list(current.values()))
        return cls(waves)

    def run(self, pool: ThreadPoolExecutor) -> dict[str, int]:
        """Make every call; returns how many calls ended otherwise than when jobsched made them."""
        handles: dict[str, str] = {}
        diverged = Counter[str]()
        for wave in self.waves:
            if len(wave) == 1:
                self._steps(wave[0], handles, diverged)
            else:
                for future in [pool.submit(self._steps, steps, handles, diverged) for steps in wave]:
                    future.result()
        return dict(diverged)

    @staticmethod
    def _steps(steps: list[Step], handles: dict[str, str], diverged: Counter[str]) -> None:
        for method, call, params in steps:
            _map_handles(params, handles)
            error: str | None = None
            try:
                result = method(**params)
            except ClientError as exc:
                error, result = str(exc.response.get("Error", {}).get("Code")), {}
            if call.operation == "ReceiveMessage":
                got = [m["ReceiptHandle"] for m in result.get("Messages", [])]
                handles.update(zip(call.handles, got, strict=False))
                if len(got) != len(call.handles):
                    diverged[f"{call.name} got {len(got)} for {len(call.handles)}"] += 1
            if error != call.error:
                diverged[f"{call.name} {error or 'ok'} for {call.error or 'ok'}"] += 1


def _map_handles(params: dict[str, Any], handles: dict[str, str]) -> None:
    if "ReceiptHandle" in params:
        params["ReceiptHandle"] = handles.get(params["ReceiptHandle"], params["ReceiptHandle"])
    for entry in params.get("Entries", []):
        if isinstance(entry, dict) and "ReceiptHandle" in entry:
            entry["ReceiptHandle"] = handles.get(entry["ReceiptHandle"], entry["ReceiptHandle"])


def run(quick: bool = False, *, batch: int | None = None, rounds: int | None = None) -> dict[str, Any]:
    """Measure every kind; the results dict that render() prints and throughput.json holds."""
    batch = batch or (50 if quick else 100)
    rounds = rounds or (2 if quick else 5)
    began = time.monotonic()
    results: dict[str, Any] = {"quick": quick, "batch": batch, "rounds": rounds, "kinds": {}}
    # Enough threads for any wave (the dispatcher's shards and their I/O workers: about 40 at 4
    # shards); made once, where jobsched makes its pools per pass (part of its overhead, not AWS's).
    pool = ThreadPoolExecutor(max_workers=128, thread_name_prefix="floor")
    with pool, Bench.started() as bench, Recorder().installed() as recorder:
        ddb, sqs, sfn = clients()
        floor_clients: dict[str, Any] = {"dynamodb": ddb, "sqs": sqs, "stepfunctions": sfn}
        for kind in KINDS:
            totals = {"jobsched": 0.0, "floor": 0.0, "jobsched_cpu": 0.0, "floor_cpu": 0.0}
            ratios: list[float] = []
            calls = Counter[str]()
            diverged = Counter[str]()
            measured = 0
            for round_no in range(rounds + 1):  # round 0 warms up
                due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
                items = job_items(kind, JOBSCHED_IDS, round_no, batch, due, bench.shard_count)
                bench.seed(items)
                gc.collect()
                with recorder.recording() as trace:
                    t0, c0 = time.perf_counter(), time.process_time()
                    bench.jobsched_round(batch)
                    jobsched_s, jobsched_cpu = time.perf_counter() - t0, time.process_time() - c0
                failed = [c.name for c in trace if c.error]
                if failed:
                    raise SystemExit(f"throughput: calls failed in a healthy round: {Counter(failed)}")
                acked = sum(len(c.params["Entries"]) for c in trace if c.operation == "DeleteMessageBatch")
                if acked != batch:
                    raise SystemExit(f"throughput: {acked} of {batch} runs acknowledged")
                replay = Replay.of(trace, floor_clients, main=threading.get_ident())
                bench.seed(swap_ids(items))
                gc.collect()
                t0, c0 = time.perf_counter(), time.process_time()
                diverged.update(replay.run(pool))
                floor_s, floor_cpu = time.perf_counter() - t0, time.process_time() - c0
                if round_no == 0:
                    continue
                measured += batch
                totals["jobsched"] += jobsched_s
                totals["floor"] += floor_s
                totals["jobsched_cpu"] += jobsched_cpu
                totals["floor_cpu"] += floor_cpu
                ratios.append(jobsched_s / floor_s)
                calls.update(c.name for c in trace)
            results["kinds"][kind] = {
                "runs": measured,
                "jobsched_s": round(totals["jobsched"], 3),
                "floor_s": round(totals["floor"], 3),
                "jobsched_runs_per_s": round(measured / totals["jobsched"], 1),
                "floor_runs_per_s": round(measured / totals["floor"], 1),
                "ratio": round(totals["jobsched"] / totals["floor"], 3),
                "ratio_median": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
                "jobsched_cpu_s": round(totals["jobsched_cpu"], 3),
                "floor_cpu_s": round(totals["floor_cpu"], 3),
                "cpu_ratio": round(totals["jobsched_cpu"] / totals["floor_cpu"], 3),
                "overhead_ms_per_run": round(1000 * (totals["jobsched"] - totals["floor"]) / measured, 2),
                "calls_per_run": {op: round(n / measured, 3) for op, n in sorted(calls.items())},
                "floor_diverged": dict(diverged),
            }
            say(f"  throughput: {kind} done ({time.monotonic() - began:.0f} s)")
    results["seconds"] = round(time.monotonic() - began, 1)
    return results


def render(results: dict[str, Any]) -> str:
    kinds = results["kinds"]
    head = (
        f"b. End-to-end runs per second (in-process, one embedded moto server; {results['rounds']} "
        f"rounds of {results['batch']} runs per kind, after a warm-up round)"
    )
    main = table(
        [
            "kind",
            "runs",
            "jobsched runs/s",
            "floor runs/s",
            "jobsched / floor",
            "median round (min-max)",
            "CPU ratio",
            "overhead ms/run",
        ],
        [
            [
                kind,
                r["runs"],
                r["jobsched_runs_per_s"],
                r["floor_runs_per_s"],
                f"{r['ratio']:.3f}",
                f"{r['ratio_median']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})",
                f"{r['cpu_ratio']:.3f}",
                f"{r['overhead_ms_per_run']:.2f}",
            ]
            for kind, r in kinds.items()
        ],
    )
    ops = sorted({op for r in kinds.values() for op in r["calls_per_run"]})
    calls = table(
        ["AWS calls per run (recorded; the floor replays them)", *kinds],
        [[op, *(f"{r['calls_per_run'].get(op, 0):.2f}" for r in kinds.values())] for op in ops]
        + [["total", *(f"{sum(r['calls_per_run'].values()):.2f}" for r in kinds.values())]],
    )
    diverged = {k: r["floor_diverged"] for k, r in kinds.items() if r["floor_diverged"]}
    note = (
        f"\nreplayed calls that ended otherwise than in jobsched: {diverged}"
        if diverged
        else "\nevery replayed call ended as it did in jobsched (same successes, same refusals)"
    )
    return f"{head}\n\n{main}\n\n{calls}{note}"
