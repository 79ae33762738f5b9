"""`python -m bench.pools`: external worker pools: placement latency and cost per worker-pool run.

In-process, against moto, with the real WorkerPools on the DynamoDB adapters (jobs, runs, workers
tables) and every DynamoDB request billed by bench/billing.py's meter. Three workers (2, 4 and 8
vCPUs) play the `jobsched worker` loop in threads: poll -> ack -> started -> finished, while a burst
of runs of 1-2 vCPUs is handed off at once (as the worker Lambda hands due runs off).

- latency: from a run's hand-off (it is due: the worker Lambda just received it) to its `started`
  report, p50/p99. Local: no network between worker and API, no API Gateway; each step is jobsched's
  own code plus moto, and the workers poll back to back (a real worker's long-poll answers as soon as
  a sweep places work on it).
- cost per million runs: DynamoDB units of the hand-off, the sweeps/placements, the polls and the
  reports, priced at the DESIGN prices, plus four API Gateway requests and api invocations per run
  (poll, ack, started, finished; a poll that answers several runs is counted as one per run: the
  price of a sparse load). Heartbeats are a fixed cost per worker (6 a minute), reported apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from bench.billing import Meter, TableShape, shapes_from_specs
from bench.common import table
from jobsched import resources
from jobsched.adapters.dynamodb import JobStore, RunStore
from jobsched.adapters.dynamodb.workers import WorkerStore
from jobsched.domain import times
from jobsched.domain.compute import Resources as JobResources
from jobsched.domain.models import Job
from jobsched.domain.placement import Resources
from jobsched.domain.status import JobStatus
from jobsched.domain.targets import WorkerTarget
from jobsched.ports import SystemClock
from jobsched.services.workers import WorkerPools

PREFIX = "bench-pools"
REGION = "us-east-1"
WRU, RRU = 0.625e-6, 0.125e-6
API_GATEWAY, LAMBDA_REQUEST = 3.5e-6, 0.2e-6
API_CALLS_PER_RUN = 4
CAPACITIES = (2048, 4096, 8192)


def run(quick: bool = False, *, runs: int | None = None) -> dict[str, Any]:
    """One burst of `runs` (default 300, quick 30) over the three workers; what render() prints."""
    runs = runs or (30 if quick else 300)
    with mock_aws():
        plain = boto3.session.Session(region_name=REGION)
        shapes = shapes_from_specs(PREFIX)
        workers_name = resources.physical_name(PREFIX, resources.WORKERS_TABLE)
        shapes[workers_name] = TableShape(name=workers_name, partition_key="PK", sort_key="SK", indexes=())
        meter = Meter(tables=shapes, reader=None)
        meter.serialise(plain)
        meter.reader = plain.client("dynamodb")
        made = resources.create_local_resources(
            prefix=PREFIX, dynamodb=plain.client("dynamodb"), sqs=plain.client("sqs")
        )
        app = boto3.session.Session(region_name=REGION)
        meter.attach(app, source="app")
        ddb = app.client("dynamodb")
        jobs = JobStore(client=ddb, table=made[resources.JOBS_TABLE.logical_id], shard_count=4)
        pools = WorkerPools(
            workers=WorkerStore(client=ddb, table=made[resources.WORKERS_TABLE.logical_id]),
            jobs=jobs,
            runs=RunStore(client=ddb, table=made[resources.RUNS_TABLE.logical_id]),
            clock=SystemClock(),
        )
        now = datetime.now(UTC)
        batch: list[tuple[Job, str]] = []
        for i in range(runs):
            job = Job(
                job_id=f"pool-{i:05d}",
                tenant="t1",
                type="one_off",
                status=JobStatus.SCHEDULED,
                target=WorkerTarget(pool="gpu", handler="bench.noop"),
                payload={},
                run_at=now,
                resources=JobResources(cpu=1024 * (1 + i % 2), memory_mib=512),
                created_at=now,
                updated_at=now,
            )
            jobs.create_with_idempotency(job, idempotency_key=None, request_hash="b", response={}, now=now)
            batch.append((job, times.stored(now + timedelta(milliseconds=i))))
        ids = [
            pools.register(
                tenant="t1", pool="gpu", capacity=Resources(cpu=cpu, memory_mib=16_384), labels={}
            ).worker_id
            for cpu in CAPACITIES
        ]
        before = meter.snapshot()
        handed: dict[str, float] = {}
        started: dict[str, float] = {}
        oversubscribed: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def worker(worker_id: str) -> None:
            beaten = time.monotonic()
            while not stop.is_set():
                if time.monotonic() - beaten > 5:  # a real worker heartbeats every 10 s
                    pools.heartbeat(tenant="t1", worker_id=worker_id, free=None, runs={})
                    beaten = time.monotonic()
                for a in pools.poll(tenant="t1", worker_id=worker_id):
                    if not pools.ack(tenant="t1", worker_id=worker_id, run_id=a.run_id).applied:
                        continue
                    if pools.started(tenant="t1", worker_id=worker_id, run_id=a.run_id).applied:
                        with lock:
                            started[a.run_id] = time.perf_counter()
                    pools.finished(
                        tenant="t1", worker_id=worker_id, run_id=a.run_id, result="null", error=None
                    )
                w = pools.get(tenant="t1", worker_id=worker_id)
                if not w.used().fits_in(w.capacity):
                    oversubscribed.append(worker_id)

        threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in ids]
        for job, sf in batch:
            pools.hand_off(job, sf)
            handed[f"{job.job_id}-{int(times.parse_stored(sf).timestamp() * 1000)}"] = time.perf_counter()
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 600
        while len(started) < runs and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        spent = meter.snapshot() - before
        beat_before = meter.snapshot()
        for worker_id in ids:
            pools.heartbeat(tenant="t1", worker_id=worker_id, free=None, runs={})
        beat = meter.snapshot() - beat_before
    latencies = sorted((started[r] - handed[r]) * 1000 for r in started)
    per_run_wru, per_run_rru = spent.total_wru / runs, spent.rru / runs
    dynamodb = per_run_wru * WRU + per_run_rru * RRU
    api = API_CALLS_PER_RUN * (API_GATEWAY + LAMBDA_REQUEST)
    beat_cost = (beat.total_wru * WRU + beat.rru * RRU) / len(ids) + API_GATEWAY + LAMBDA_REQUEST
    return {
        "runs": runs,
        "started": len(started),
        "workers": dict(zip(ids, CAPACITIES, strict=True)),
        "oversubscribed_samples": len(oversubscribed),
        "latency_ms": {
            "p50": round(statistics.median(latencies), 1),
            "p99": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1),
            "max": round(latencies[-1], 1),
        },
        "per_run": {"dynamodb_wru": round(per_run_wru, 2), "dynamodb_rru": round(per_run_rru, 2)},
        "usd_per_million_runs": {
            "dynamodb": round(dynamodb * 1e6, 2),
            "api_gateway_and_lambda_requests": round(api * 1e6, 2),
            "total": round((dynamodb + api) * 1e6, 2),
        },
        "usd_per_worker_month_of_heartbeats": round(beat_cost * 6 * 60 * 24 * 30, 2),
    }


def render(results: dict[str, Any]) -> str:
    """Table h of `make bench`: placement latency and what a worker-pool run costs."""
    lat, usd = results["latency_ms"], results["usd_per_million_runs"]
    rows = [
        [
            results["runs"],
            len(results["workers"]),
            f"{lat['p50'] / 1000:.2f}",
            f"{lat['p99'] / 1000:.2f}",
            results["oversubscribed_samples"],
            results["per_run"]["dynamodb_wru"],
            results["per_run"]["dynamodb_rru"],
            f"{usd['total']:.2f}",
        ]
    ]
    headers = ["runs", "workers", "p50 s", "p99 s", "oversubscribed", "WRU/run", "RRU/run", "$/M runs"]
    return "\n".join(
        [
            "h. Worker pools: hand-off to `started`, one burst over three workers (2, 4, 8 vCPU; moto",
            "   in-process, the workers poll back to back), and the DynamoDB + API requests a run costs",
            "",
            table(headers, rows),
            "",
            f"  heartbeats: ${results['usd_per_worker_month_of_heartbeats']:.2f} a worker-month (6 a minute)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pools", description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args(argv)
    result = run(runs=args.runs)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
