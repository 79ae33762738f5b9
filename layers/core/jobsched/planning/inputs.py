"""The capacity model's inputs: the workload, per-run counts, AWS prices and limits, latencies, sizes.

Per-run counts have one home: `PerRunCosts`. Its defaults are the interim counts of a healthy
recurring run; `PerRunCosts.from_mapping` overlays what `make bench` measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

KIB = 1024
SECONDS_PER_DAY = 86_400


@dataclass(frozen=True, slots=True)
class Prices:
    """AWS us-east-1 on-demand list prices, USD (../shared/DESIGN.md, "Prices used for cost figures")."""

    dynamodb_per_million_wru: float = 0.625
    dynamodb_per_million_rru: float = 0.125
    sqs_per_million_requests: float = 0.40
    lambda_per_million_requests: float = 0.20
    lambda_per_gb_second: float = 0.0000133334  # arm64
    sfn_per_million_transitions: float = 25.0


@dataclass(frozen=True, slots=True)
class Limits:
    """AWS limits the plan is checked against. Soft quotas can be raised; the rest cannot."""

    # DynamoDB, hard: per partition (a "<minute>#<shard>" key of the due index is one partition).
    partition_wcu: float = 1_000.0
    partition_rcu: float = 3_000.0
    # DynamoDB, soft: on-demand table-level quota, one value per account and Region that applies to
    # every table and, separately, to every GSI (Service Quotas: "Table-level ... throughput limit").
    table_quota: float = 40_000.0
    # Lambda, soft: concurrent executions per account and Region.
    account_concurrency: int = 1_000
    # Lambda, hard: new execution environments per function, 1,000 every 10 s.
    lambda_scale_per_10s: int = 1_000
    # SQS event-source mapping, standard mode (AWS Lambda developer guide, "Configuring scaling
    # behavior for SQS event source mappings", current version): starts at 5 concurrent invokes,
    # adds up to 300 a minute while messages wait, at most 1,250 per mapping.
    esm_standard_initial: int = 5
    esm_standard_ramp_per_min: int = 300
    esm_standard_max: int = 1_250
    # Provisioned mode: an event poller gives about 10 concurrent invokes (and about 1 MB/s),
    # scales by up to 1,000 concurrency a minute, at most 20,000; minimum pollers 2..200.
    esm_invokes_per_poller: int = 10
    esm_poller_bytes_per_s: float = 1_000_000.0
    esm_provisioned_ramp_per_min: int = 1_000
    esm_provisioned_max: int = 20_000
    esm_min_pollers_max: int = 200
    # SQS, hard: DelaySeconds at most 900 (caps the look-ahead); ~120,000 in-flight per standard queue.
    sqs_max_delay_s: int = 900
    sqs_max_in_flight: int = 120_000
    sqs_batch: int = 10
    # DynamoDB Query: at most 1 MB per page; read units per 4 KB, halved when eventually consistent.
    query_page_bytes: int = 1024 * KIB


@dataclass(frozen=True, slots=True)
class Latencies:
    """Assumed per-call latencies (p50, ms) in-Region; the simulation draws log-normals, p99 = tail * p50."""

    dynamodb_ms: float = 5.0
    sqs_ms: float = 10.0
    invoke_ms: float = 10.0  # the mapping's synchronous Invoke, on top of the function's duration
    cold_start_ms: float = 800.0  # boto3 + powertools (tracer) + pydantic, measured locally (DESIGN.md)
    tail: float = 3.0

    @property
    def sigma(self) -> float:
        """The log-normal's shape: p99 / p50 = tail."""
        return math.log(max(self.tail, 1.0 + 1e-9)) / NormalDist().inv_cdf(0.99)

    @property
    def mean_factor(self) -> float:
        """Mean / p50 of a call's latency (what throughput depends on)."""
        return math.exp(self.sigma**2 / 2)

    def round_ms(self, median_ms: float, calls: int) -> float:
        """Mean duration of `calls` parallel calls (the slowest of them), ms.

        The expected maximum of c standard normals by Blom's approximation, at the log-normal's mean.
        """
        if calls <= 0 or median_ms <= 0:
            return 0.0
        z = NormalDist().inv_cdf((calls - 0.375) / (calls + 0.25))
        return median_ms * math.exp(self.sigma * z + self.sigma**2 / 2)


@dataclass(frozen=True, slots=True)
class ItemSizes:
    """Assumed item sizes, bytes: what turns calls into read and write units."""

    job_item: int = 900  # <= 1 KB: one WRU per job write, one RRU per strongly consistent GetItem
    due_entry: int = 400  # the due index's INCLUDE projection plus keys: one WRU per index write
    run_item: int = 800  # one WRU per history write
    message: int = 200  # a run message on the execution queue


@dataclass(frozen=True, slots=True)
class RunCost:
    """What one run of a kind costs, per run, by table and service (averaged over the kind's runs).

    Dispatch-side units (job stamps, due-index moves and reads) are spent while the dispatcher hands
    the run over; run-side units (the overlap hold on the job, the reads, the history write) when
    the run starts and ends. The defaults are a healthy run of an every-minute job under the default
    overlap policy, `skip`: the hold is a compare-and-set on the job item that returns the job, so
    the job needs no read of its own; the run row is read once, eventually consistent.
    """

    job_writes: float = 0.2  # the dispatcher's stamps per run (one per job per hand-over window, amortized)
    jobs_wru: float = 0.2  # WRU on the jobs table at dispatch: the stamps (a job item is <= 1 KB)
    due_index_wru: float = 0.4  # WRU on the due GSI: each stamp moves the key = a delete plus a put
    hold_wru: float = 1.0  # WRU on the jobs table at run time: the overlap hold (0 under `allow`)
    runs_wru: float = 1.0  # WRU on the runs table: one history write
    jobs_rru: float = 0.0  # RRU on the jobs table at run time: a GetItem of the job (`allow`: 1)
    runs_rru: float = 0.5  # RRU on the runs table at run time: the run row, eventually consistent
    due_index_rru: float = 0.05  # RRU on the due GSI: a page of 100 entries x 400 B = 10 x 4 KB, halved
    sqs_requests: float = 0.3  # SendMessageBatch + ReceiveMessage + DeleteMessageBatch, 0.1 each
    lambda_invocations: float = 0.1  # worker invocations per run: batches of 10
    lambda_gb_seconds: float = 0.015 * 0.25  # worker: ~15 ms of overhead per run at 256 MB (assumed)
    sfn_transitions: float = 0.0  # a healthy run never starts a workflow
    worker_memory_mb: int = 256
    calls: Mapping[str, float] = field(
        default_factory=lambda: {
            "DynamoDB.UpdateItem": 2.2,  # stamps, the hold, the outcome
            "DynamoDB.GetItem": 1.0,
            "DynamoDB.Query": 0.01,
            "SQS.SendMessageBatch": 0.1,
            "SQS.ReceiveMessage": 0.1,
            "SQS.DeleteMessageBatch": 0.1,
            "Lambda.Invoke": 0.1,
        }
    )

    @property
    def dynamodb_wru(self) -> float:
        """Write request units per run, every table and index."""
        return self.jobs_wru + self.due_index_wru + self.hold_wru + self.runs_wru

    @property
    def dynamodb_rru(self) -> float:
        """Read request units per run, every table and index."""
        return self.jobs_rru + self.runs_rru + self.due_index_rru

    @property
    def worker_ms(self) -> float:
        """Worker time per run, ms (from its GB-seconds at its memory size)."""
        return self.lambda_gb_seconds / (self.worker_memory_mb / 1024) * 1000

    def unamortized(self) -> RunCost:
        """The same run for a job with one tick per hand-over window (hourly, daily): one stamp per run."""
        if self.job_writes <= 0:
            return self
        k = 1.0 / self.job_writes
        calls = dict(self.calls)
        if "DynamoDB.UpdateItem" in calls:  # the stamps go from job_writes to one per run
            calls["DynamoDB.UpdateItem"] = calls["DynamoDB.UpdateItem"] + 1.0 - self.job_writes
        return replace(
            self,
            job_writes=1.0,
            jobs_wru=self.jobs_wru * k,
            due_index_wru=self.due_index_wru * k,
            calls=calls,
        )


_TOTALS = ("dynamodb_wru", "dynamodb_rru")
_FIELDS = (
    "job_writes",
    "jobs_wru",
    "due_index_wru",
    "hold_wru",
    "runs_wru",
    "jobs_rru",
    "runs_rru",
    "due_index_rru",
    "sqs_requests",
    "lambda_invocations",
    "lambda_gb_seconds",
    "sfn_transitions",
)


def _number(kind: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or math.isnan(value):
        raise ValueError(f"costs: kinds.{kind}.{key} must be a non-negative number, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class PerRunCosts:
    """The per-run counts by run kind: the one place the model takes them from.

    Kinds: "recurring" (the steady mix) and "burst" (a run of a midnight or top-of-the-hour herd:
    its job has one tick per hand-over window, so its stamp is not amortized; derived from
    "recurring" unless given).
    """

    kinds: Mapping[str, RunCost] = field(
        default_factory=lambda: {"recurring": RunCost(), "burst": RunCost().unamortized()}
    )
    source: str = "interim defaults (healthy recurring run)"

    def __getitem__(self, kind: str) -> RunCost:
        return self.kinds[kind]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "benchmark") -> PerRunCosts:
        """Overlay counts measured by the benchmark on the defaults; missing kinds and keys keep theirs.

        Shape: {"kinds": {"recurring": {"dynamodb_wru": .., "dynamodb_rru": .., "sqs_requests": ..,
        "lambda_invocations": .., "lambda_gb_seconds": .., "sfn_transitions": .., "calls": {..},
        "units": {"dispatch": {"jobs_wru": .., "due_index_wru": .., ..}, "run": {..}}}, ..}}.
        `units` (as `make bench` writes it) gives each table's units by the phase that spent them, and
        sets the per-table fields exactly: the dispatch phase's jobs writes are the stamps, the run
        phase's (and its workflows') jobs writes are the holds. Without it, a measured DynamoDB total
        is split over the tables in the proportions of the defaults, except the due index's share
        when `wru_breakdown` names it ("index:due"). Per-table keys (`jobs_wru`, `hold_wru`, ...)
        override either. The "burst" kind, unless given, is "recurring_hourly" if measured (one tick
        per hand-over window), else "recurring" with one stamp per run.
        """
        raw = data.get("kinds", {})
        if not isinstance(raw, Mapping):
            raise ValueError("costs: 'kinds' must be an object")
        defaults = cls().kinds
        kinds: dict[str, RunCost] = dict(defaults)
        for kind, given in raw.items():
            if not isinstance(given, Mapping):
                raise ValueError(f"costs: kinds.{kind} must be an object")
            base = defaults.get(kind, defaults["recurring"])
            kinds[kind] = cls._overlay(str(kind), base, given)
        if "burst" not in raw:
            kinds["burst"] = (
                kinds["recurring_hourly"] if "recurring_hourly" in raw else kinds["recurring"].unamortized()
            )
        return cls(kinds=kinds, source=source)

    @staticmethod
    def _overlay(kind: str, base: RunCost, given: Mapping[str, Any]) -> RunCost:
        cost = base
        if "dynamodb_wru" in given and base.dynamodb_wru > 0:
            k = _number(kind, "dynamodb_wru", given["dynamodb_wru"]) / base.dynamodb_wru
            cost = replace(
                cost,
                jobs_wru=cost.jobs_wru * k,
                due_index_wru=cost.due_index_wru * k,
                hold_wru=cost.hold_wru * k,
                runs_wru=cost.runs_wru * k,
            )
        breakdown = given.get("wru_breakdown")
        if isinstance(breakdown, Mapping) and "index:due" in breakdown:
            due = _number(kind, "wru_breakdown.index:due", breakdown["index:due"])
            rest = max(0.0, cost.dynamodb_wru - due)
            tables = cost.jobs_wru + cost.hold_wru + cost.runs_wru
            k = rest / tables if tables > 0 else 0.0
            cost = replace(
                cost,
                due_index_wru=due,
                jobs_wru=cost.jobs_wru * k,
                hold_wru=cost.hold_wru * k,
                runs_wru=cost.runs_wru * k,
            )
        if "dynamodb_rru" in given and base.dynamodb_rru > 0:
            k = _number(kind, "dynamodb_rru", given["dynamodb_rru"]) / base.dynamodb_rru
            cost = replace(
                cost,
                jobs_rru=cost.jobs_rru * k,
                runs_rru=cost.runs_rru * k,
                due_index_rru=cost.due_index_rru * k,
            )
        units = given.get("units")
        if units is not None:
            cost = replace(cost, **PerRunCosts._by_phase(kind, units))
        updates: dict[str, Any] = {
            key: _number(kind, key, given[key]) for key in _FIELDS if key in given and key not in _TOTALS
        }
        if "calls" in given:
            calls = given["calls"]
            if not isinstance(calls, Mapping):
                raise ValueError(f"costs: kinds.{kind}.calls must be an object")
            updates["calls"] = {
                **dict(base.calls),
                **{str(k): _number(kind, f"calls.{k}", v) for k, v in calls.items()},
            }
        return replace(cost, **updates)

    @staticmethod
    def _by_phase(kind: str, units: Any) -> dict[str, Any]:
        """The per-table fields from units by phase ("dispatch", "run", "workflow"; "api" is not planned)."""
        if not isinstance(units, Mapping) or not all(isinstance(v, Mapping) for v in units.values()):
            raise ValueError(f"costs: kinds.{kind}.units must map phases to objects")

        def unit(phase: str, key: str) -> float:
            value = units.get(phase, {}).get(key, 0.0)
            return _number(kind, f"units.{phase}.{key}", value)

        run_side = ("run", "workflow")
        stamps = unit("dispatch", "jobs_wru")
        return {
            "job_writes": stamps,  # a job item is <= 1 KB: one WRU per stamp
            "jobs_wru": stamps,
            "due_index_wru": unit("dispatch", "due_index_wru"),
            "due_index_rru": unit("dispatch", "due_index_rru"),
            "hold_wru": sum(unit(p, "jobs_wru") for p in run_side),
            "runs_wru": sum(unit(p, "runs_wru") for p in run_side),
            "jobs_rru": sum(unit(p, "jobs_rru") for p in run_side),
            "runs_rru": sum(unit(p, "runs_rru") for p in run_side),
        }


@dataclass(frozen=True, slots=True)
class Workload:
    """What the fleet must carry."""

    jobs: int  # registered jobs
    burst: int  # runs due on the same second (00:00:00)
    window_s: float  # the burst must be drained within this
    steady_rate: float | None = None  # runs/s outside the burst; None: jobs / 10,000 (seeds: 10K/s per 100M)
    bursts_per_day: int = 1
    spread_s: float = 0.0  # 0: the whole burst is due on one second; > 0: jitter spreads it uniformly
    handler_ms: float = 0.0  # the handlers' own time per run, on top of jobsched's overhead
    p99_targets_s: tuple[float, ...] = (1.0, 5.0)  # jobsched's own target, and the seeds'

    @property
    def rate(self) -> float:
        """The steady rate, runs/s."""
        return self.jobs / 10_000 if self.steady_rate is None else self.steady_rate

    @property
    def runs_per_day(self) -> float:
        """Steady runs plus the bursts."""
        return self.rate * SECONDS_PER_DAY + self.burst * self.bursts_per_day
