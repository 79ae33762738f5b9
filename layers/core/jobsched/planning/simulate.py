"""A discrete-event simulation of the dispatcher and worker fleet around one burst: it checks a capacity plan.

Time 0 is the burst's due second (00:00:00). heapq orders the events; one seeded random.Random
draws every latency, so a seed gives the same result every time. What one event is:

- Dispatch: a page of due entries of one shard (at most `page_size` runs). A page is a Query, then
  its SendMessageBatch calls, then its stamps, with `dispatcher_parallelism` calls in flight; a round
  of parallel calls lasts as long as the slowest of its draws. A shard's pass starts at each tick,
  the first one look-ahead - `pass_phase_s` before the burst (default phase: one tick, the worst),
  spends the steady load's share of the pass first, and stops at 90% of its lease; the next tick's
  pass resumes where it stopped (entries stay in the index until stamped, as in dispatch.py).
- Rate limits hold per 100 ms window; a call over one waits exactly until there is room (ideal
  back-off: optimistic about real throttling and retries, which is what the plan's headroom is for).
  Limited: the shard's pace, its "<minute>#<shard>" partition (1,000 WCU/s), and the jobs table,
  the due index and the runs table at the plan's quota less what the steady load's dispatch takes.
- Queue: a page's messages become groups of `batch_size`, visible at their due second (DelaySeconds
  is rounded down and the worker waits out the rest) or at once when sent late, received oldest
  first (SQS standard orders best-effort; on one due second the order changes nobody's lateness).
- Workers: one event per batch (at most `batch_size` runs): receive, a cold start when the batch
  needs a new execution environment (at most 1,000 new ones per 10 s), invoke, its runs
  `worker_threads` at a time (each round as slow as its slowest draw), delete. A batch starts only
  while concurrency is
  below the smallest of the mapping's maximum concurrency, the account's concurrency less one per
  shard (the dispatchers), and the mapping's current level, which ramps while messages wait
  (standard: +300 a minute from the steady level; provisioned: +1,000 a minute from minimum
  pollers x 10). A batch takes its runs' reads, overlap holds and history writes from the tables'
  limits first.
- Steady load: batches due as a Poisson process at the steady rate, handed over long before (so
  visible on their due second), sharing the queue, the fleet and the tables with the burst.

- Lanes (`lane_runs`, `lane`): another group's runs due with the burst, `lane_runs` of them: a quiet
  tenant's ("tenant") or high runs ("priority"), their entries hashed over the shards and pages like
  the burst's. Unfair (`fair=False`: arrival order), each rides with the page its place falls in
  and waits in the queue behind what came before it. Fair (services/dispatch.py's fairness), they
  leave with their shard's first page (the slice's order) and the queue serves them apart: a tenant
  lane round-robin with the burst, batch for batch (SQS fair queues with two groups), a priority
  lane before it (high surfaces a second early).

Lateness = handler start - due (due = the jittered fire time when the burst is spread), recorded per
run in 1 ms bins. About 2.6 million runs for the seeds' burst: a few hundred thousand events.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from jobsched.planning.model import slot_cycle_s, steady_pass_seconds
from jobsched.planning.plan import Fleet, Plan

_QUANTILES = 4096

# event kinds
_PASS, _PAGE, _VISIBLE, _DONE, _SCALE, _STEADY = range(6)
_SCALE_EVERY_S = 0.25
_WINDOW_S = 0.1  # rate limits hold per 100 ms window


@dataclass(frozen=True, slots=True)
class SimResult:
    """What the simulation of one burst measured."""

    seed: int
    burst: int
    window_s: float
    drained: bool  # every burst run finished within the horizon
    drain_s: float  # when the last burst run finished (math.inf if not within the horizon)
    caught_up_s: float  # when the queue first emptied after it: the steady runs due meanwhile ran too
    dispatch_done_s: float  # when the last burst message was sent, relative to due (negative: early)
    late_sends: int  # burst runs sent after they were due
    lateness_p50_s: float
    lateness_p95_s: float
    lateness_p99_s: float
    lateness_max_s: float
    steady_p99_s: float  # lateness p99 of the steady runs due while the burst drained
    peak_concurrency: int
    cold_starts: int
    peak_partition_wcu: float  # busiest due-index partition, busiest second
    peak_index_wcu: float
    peak_jobs_wcu: float
    peak_runs_wcu: float
    peak_jobs_rcu: float
    peak_runs_rcu: float
    throttled_s: float  # summed waits of pages and batches on a DynamoDB limit
    events: int
    lane_runs: int = 0
    lane_p99_s: float = math.nan  # lateness p99 of the lane's runs (math.nan without a lane)
    lane_max_s: float = math.nan

    @property
    def met(self) -> bool:
        """The burst drained within the window."""
        return self.drained and self.drain_s <= self.window_s


class _Rate:
    """A rate limit as fixed windows of `window_s` holding rate * window_s units each.

    `take(t, n)` books n units in the first windows from t that have room and answers when the last
    of them opens. Bookings may come in any time order (a batch books at its invoke time, which is
    ahead of the event that started it), which a token bucket or GCRA would get wrong.
    """

    __slots__ = ("cap", "used", "window")

    def __init__(self, rate: float, window_s: float = _WINDOW_S) -> None:
        self.window = window_s
        self.cap = rate * window_s
        self.used: dict[int, float] = {}

    def take(self, t: float, n: float) -> float:
        if n <= 0 or math.isinf(self.cap):
            return t
        if self.cap <= 0:
            return math.inf
        used = self.used
        w = math.floor(t / self.window)
        while True:
            have = used.get(w, 0.0)
            room = self.cap - have
            if room > 1e-9:
                grant = n if n < room else room
                used[w] = have + grant
                n -= grant
                if n <= 1e-9:
                    return max(t, w * self.window)
            w += 1


class _Pacer:
    """A client-side pace for one sequential loop: a request may start n / rate after the previous one."""

    __slots__ = ("interval", "next")

    def __init__(self, rate: float) -> None:
        self.interval = 1 / rate if rate > 0 and math.isfinite(rate) else 0.0
        self.next = -math.inf

    def take(self, t: float, n: float) -> float:
        go = max(t, self.next)
        self.next = go + n * self.interval
        return go


class _Hist:
    """Lateness in 1 ms bins: exact to the millisecond, memory bounded by the horizon."""

    __slots__ = ("bins",)

    def __init__(self, horizon_s: float) -> None:
        self.bins = [0] * (int(horizon_s * 1000) + 2)

    def add(self, seconds: float, count: int = 1) -> None:
        self.bins[min(len(self.bins) - 1, max(0, int(seconds * 1000)))] += count

    def quantile(self, q: float) -> float:
        n = sum(self.bins)
        if n == 0:
            return 0.0
        rank = max(1, math.ceil(q * n))
        seen = 0
        for i, count in enumerate(self.bins):
            seen += count
            if seen >= rank:
                return (i + 1) / 1000
        return len(self.bins) / 1000


class _Meter:
    """Units per 1 s window (per key), to report the busiest second."""

    __slots__ = ("origin", "seconds")

    def __init__(self, origin: float, horizon_s: float, keys: int = 1) -> None:
        self.origin = math.floor(origin)
        self.seconds = [[0.0] * (int(horizon_s - self.origin) + 2) for _ in range(keys)]

    def add(self, t: float, units: float, key: int = 0) -> None:
        row = self.seconds[key]
        row[min(len(row) - 1, max(0, math.floor(t) - self.origin))] += units

    def peak(self) -> float:
        return max((max(row) for row in self.seconds), default=0.0)


def simulate(
    plan: Plan,
    *,
    seed: int = 1,
    fleet: Fleet | None = None,
    pass_phase_s: float | None = None,
    horizon_s: float | None = None,
    lane_runs: int = 0,
    lane: Literal["tenant", "priority"] = "tenant",
    fair: bool = True,
) -> SimResult:
    """Simulate the plan's burst (or another fleet's, to see it fail) and measure drain and lateness;
    with `lane_runs`, also the lateness of a lane due with it (module docstring: Lanes)."""
    fleet = fleet or plan.fleet
    wl, lim, lat = plan.workload, plan.limits, plan.latencies
    steady_cost, hot = plan.per_run["recurring"], plan.per_run["burst"]
    rng = random.Random(seed)
    uniform = rng.random
    # Log-normal draws by inverse CDF over _QUANTILES equiprobable quantiles (one uniform per draw;
    # the slowest of c parallel calls is the quantile u ** (1 / c)).
    inv_cdf = NormalDist().inv_cdf
    factors = [math.exp(lat.sigma * inv_cdf((i + 0.5) / _QUANTILES)) for i in range(_QUANTILES)]

    def draw(median_ms: float) -> float:
        return median_ms / 1000 * factors[int(uniform() * _QUANTILES)]

    def slowest(median_ms: float, calls: int) -> float:
        u = uniform() if calls <= 1 else uniform() ** (1 / calls)
        return median_ms / 1000 * factors[int(u * _QUANTILES)]

    def rounds(median_ms: float, calls: int) -> float:
        total = 0.0
        while calls > 0:
            c = min(fleet.dispatcher_parallelism, calls)
            total += slowest(median_ms, c)
            calls -= c
        return total

    k = fleet.shards
    batch = fleet.batch_size
    threads = max(1, fleet.worker_threads)
    burst = wl.burst
    window = wl.window_s
    horizon = horizon_s if horizon_s is not None else 4 * max(window, 60.0)
    phase = fleet.tick_s if pass_phase_s is None else pass_phase_s
    first_pass = -fleet.lookahead_s + phase - 1e-3
    steady_rate = wl.rate
    # The per-run time is a mean (from GB-seconds): draw it with that mean.
    per_run_ms = (hot.worker_ms + wl.handler_ms) / lat.mean_factor
    steady_per_run_ms = (steady_cost.worker_ms + wl.handler_ms) / lat.mean_factor

    # -- limits --------------------------------------------------------------------------------------
    quota = fleet.table_quota
    # The steady load's stamps are not simulated (its runs are): they take their share up front.
    jobs_w = _Rate(quota - steady_rate * steady_cost.jobs_wru)
    index_w = _Rate(quota - steady_rate * steady_cost.due_index_wru)
    runs_w = _Rate(quota)
    jobs_r = _Rate(quota)
    runs_r = _Rate(quota)
    wru_delete = max(1, math.ceil(plan.sizes.due_entry / 1024))
    partitions = [_Rate(lim.partition_wcu) for _ in range(k)]
    paces = [_Pacer(fleet.dispatch_pace) for _ in range(k)]
    new_envs = _Rate(lim.lambda_scale_per_10s / 10, window_s=10.0)  # 1,000 per 10 s

    # -- the shards' share of the burst: hashing spreads it binomially ------------------------------
    sizes = [0] * k
    if k == 1:
        sizes[0] = burst
    else:
        mean, sd = burst / k, math.sqrt(burst / k * (1 - 1 / k))
        sizes = [max(0, round(rng.gauss(mean, sd))) for _ in range(k)]
        diff = burst - sum(sizes)
        while diff != 0:
            s = rng.randrange(k)
            step = 1 if diff > 0 else -1
            if sizes[s] + step >= 0:
                sizes[s] += step
                diff -= step
    remaining = list(sizes)
    pass_start = [0.0] * k
    # Each lane run's place in its shard's send order (0: the first page, as a fair slice puts it).
    lane_places: list[list[int]] = [[] for _ in range(k)]
    if burst > 0:
        busy = [s for s in range(k) if sizes[s] > 0]
        for _ in range(lane_runs):
            s = rng.choices(busy, weights=[sizes[b] for b in busy])[0]
            lane_places[s].append(0 if fair else rng.randrange(sizes[s]))
    # A pass handles the steady load's entries of its older buckets before the burst's bucket.
    steady_pass_s = steady_pass_seconds(
        steady_rate,
        steady_cost.job_writes,
        k,
        fleet.tick_s,
        fleet.lookahead_s,
        fleet.page_size,
        fleet.dispatcher_parallelism,
        lat,
    )

    # -- the worker fleet ----------------------------------------------------------------------------
    cycle = slot_cycle_s(steady_cost, lat, batch, wl.handler_ms, threads)
    steady_level = max(lim.esm_standard_initial, math.ceil(steady_rate * cycle / batch))
    if fleet.esm_mode == "provisioned":
        level = float(max(steady_level, fleet.min_pollers * lim.esm_invokes_per_poller))
        esm_max, ramp = lim.esm_provisioned_max, lim.esm_provisioned_ramp_per_min
    else:
        level = float(steady_level)
        esm_max, ramp = lim.esm_standard_max, lim.esm_standard_ramp_per_min
    hard_cap = min(fleet.worker_concurrency, esm_max, fleet.account_concurrency - k)
    envs = steady_level  # warm environments: what the steady load keeps alive
    active = 0
    peak_active = 0
    cold_starts = 0
    # (fire time, runs, kind): kind 0 a steady batch, 1 the burst's, 2 the lane's
    ready: deque[tuple[float, int, int]] = deque()
    lane_ready: deque[tuple[float, int, int]] = deque()  # fair: the lane's group, served apart
    lane_turn = True
    origin = min(first_pass, -3.0)
    meters = {name: _Meter(origin, horizon) for name in ("index", "jobs_w", "runs_w", "jobs_r", "runs_r")}
    meters["partition"] = _Meter(origin, horizon, keys=k)
    burst_hist, steady_hist, lane_hist = _Hist(horizon), _Hist(horizon), _Hist(horizon)
    burst_bins, steady_bins, lane_bins = burst_hist.bins, steady_hist.bins, lane_hist.bins
    last_bin = len(burst_bins) - 1
    reads_row, writes_row = meters["jobs_r"].seconds[0], meters["runs_w"].seconds[0]
    holds_row, run_reads_row = meters["jobs_w"].seconds[0], meters["runs_r"].seconds[0]
    origin_s, last_second = meters["jobs_r"].origin, len(reads_row) - 1
    burst_left = burst
    drain_end = -math.inf
    last_send = -math.inf
    late_sends = 0
    throttled = 0.0
    events = 0

    heap: list[tuple[float, int, int, object]] = []
    seq = 0

    def push(t: float, kind: int, payload: object = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, payload))

    def next_batch() -> tuple[float, int, int]:
        # Fair: a priority lane first; a tenant lane and the rest take turns (two fair-queue groups).
        nonlocal lane_turn
        if lane_ready and (not ready or lane == "priority" or lane_turn):
            lane_turn = False
            return lane_ready.popleft()
        lane_turn = True
        return ready.popleft()

    def start_batches(t: float) -> None:
        nonlocal active, peak_active, envs, cold_starts, throttled, burst_left, drain_end
        cap = min(hard_cap, int(level))
        while (ready or lane_ready) and active < cap:
            fire, n, kind = next_batch()
            is_burst = kind == 1
            active += 1
            if active > peak_active:
                peak_active = active
            cold = 0.0
            if active > envs:
                envs += 1
                cold_starts += 1
                cold = new_envs.take(t, 1) - t + draw(lat.cold_start_ms)
            invoked = t + draw(lat.sqs_ms) + draw(lat.invoke_ms) + cold
            cost = steady_cost if kind == 0 else hot
            reads, writes = n * cost.jobs_rru, n * cost.runs_wru
            holds, run_reads = n * cost.hold_wru, n * cost.runs_rru
            go = max(
                invoked,
                jobs_r.take(invoked, reads),
                runs_w.take(invoked, writes),
                jobs_w.take(invoked, holds),
                runs_r.take(invoked, run_reads),
            )
            throttled += go - invoked
            second = min(last_second, max(0, math.floor(go) - origin_s))
            reads_row[second] += reads
            writes_row[second] += writes
            holds_row[second] += holds
            run_reads_row[second] += run_reads
            median = steady_per_run_ms if kind == 0 else per_run_ms
            begin = go if go > fire else fire
            late_ms = (begin - fire) * 1000
            record = kind != 0 or fire >= 0
            bins = (steady_bins, burst_bins, lane_bins)[kind]
            # The batch runs `threads` at once, each round as slow as its slowest run.
            spent, left = 0.0, n
            while left > 0:
                c = threads if left > threads else left
                if record:
                    b = int(late_ms + spent * 1000)
                    bins[b if b < last_bin else last_bin] += c
                spent += slowest(median, c)
                left -= c
            end = begin + spent + draw(lat.sqs_ms)
            if is_burst:
                burst_left -= n
                if end > drain_end:
                    drain_end = end
            push(end, _DONE)

    def page(shard: int, t: float) -> None:
        nonlocal last_send, late_sends, throttled
        n = min(fleet.page_size, remaining[shard])
        done = sizes[shard] - remaining[shard]
        riders = sum(1 for place in lane_places[shard] if done <= place < done + n)
        go = paces[shard].take(t, n)
        sent = go + draw(lat.dynamodb_ms) + rounds(lat.sqs_ms, math.ceil(n / 10))
        stamps = math.ceil(n * hot.job_writes)
        index_units = n * hot.due_index_wru
        jobs_units = n * hot.jobs_wru
        write_go = max(
            sent,
            partitions[shard].take(sent, n * wru_delete),
            index_w.take(sent, index_units),
            jobs_w.take(sent, jobs_units),
        )
        throttled += write_go - sent
        meters["partition"].add(write_go, n * wru_delete, shard)
        meters["index"].add(write_go, index_units)
        meters["jobs_w"].add(write_go, jobs_units)
        end = write_go + rounds(lat.dynamodb_ms, stamps)
        remaining[shard] -= n
        last_send = max(last_send, sent)
        groups: dict[float, list[tuple[float, int, int]]] = {}
        # The burst's runs of the page, then its lane runs in batches of their own.
        for runs, kind in ((n, 1), (riders, 2)):
            left = runs
            while left > 0:
                m = min(batch, left)
                left -= m
                fire = rng.uniform(0.0, wl.spread_s) if wl.spread_s > 0 else 0.0
                if sent > fire:
                    late_sends += m if kind == 1 else 0
                    visible = sent
                else:
                    visible = sent + math.floor(fire - sent)
                groups.setdefault(visible, []).append((fire, m, kind))
        for visible, members in groups.items():
            push(visible, _VISIBLE, members)
        if remaining[shard] > 0:
            push(end, _PAGE, shard)

    # -- prime ---------------------------------------------------------------------------------------
    if burst > 0:
        for s in range(k):
            push(first_pass, _PASS, s)
    start = min(first_pass, -3.0)
    steady_batch_rate = steady_rate / batch
    if steady_batch_rate > 0:
        push(start + rng.expovariate(steady_batch_rate), _STEADY)
    push(start, _SCALE)

    t = start
    caught_up = math.inf
    # Run until the burst has started, then until the steady runs queued behind it have too.
    while heap:
        t, _, kind, payload = heapq.heappop(heap)
        if t > horizon:
            break
        if burst_left <= 0 and not ready and not lane_ready:
            caught_up = t
            break
        events += 1
        if kind == _DONE:
            active -= 1
            start_batches(t)
        elif kind == _VISIBLE:
            assert isinstance(payload, list)
            for member in payload:
                (lane_ready if fair and member[2] == 2 else ready).append(member)
            start_batches(t)
        elif kind == _STEADY:
            ready.append((t, batch, 0))
            push(t + rng.expovariate(steady_batch_rate), _STEADY)
            start_batches(t)
        elif kind == _PAGE:
            assert isinstance(payload, int)
            if t - pass_start[payload] >= fleet.pass_s:
                push(pass_start[payload] + fleet.tick_s, _PASS, payload)
            else:
                page(payload, t)
        elif kind == _PASS:
            assert isinstance(payload, int)
            if remaining[payload] > 0:
                pass_start[payload] = t
                push(t + steady_pass_s, _PAGE, payload)
        elif kind == _SCALE:
            if ready:
                level = min(float(esm_max), level + ramp * _SCALE_EVERY_S / 60)
            start_batches(t)
            push(t + _SCALE_EVERY_S, _SCALE)

    drained = burst_left <= 0 and drain_end <= horizon
    return SimResult(
        seed=seed,
        burst=burst,
        window_s=window,
        drained=drained,
        drain_s=(max(0.0, drain_end) if burst else 0.0) if drained else math.inf,
        caught_up_s=max(caught_up, drain_end) if drained and burst else (0.0 if not burst else math.inf),
        dispatch_done_s=last_send if burst else 0.0,
        late_sends=late_sends,
        lateness_p50_s=burst_hist.quantile(0.50),
        lateness_p95_s=burst_hist.quantile(0.95),
        lateness_p99_s=burst_hist.quantile(0.99),
        lateness_max_s=burst_hist.quantile(1.0),
        steady_p99_s=steady_hist.quantile(0.99),
        peak_concurrency=peak_active,
        cold_starts=cold_starts,
        peak_partition_wcu=meters["partition"].peak(),
        peak_index_wcu=meters["index"].peak() + steady_rate * steady_cost.due_index_wru,
        peak_jobs_wcu=meters["jobs_w"].peak() + steady_rate * steady_cost.jobs_wru,
        peak_runs_wcu=meters["runs_w"].peak(),
        peak_jobs_rcu=meters["jobs_r"].peak(),
        peak_runs_rcu=meters["runs_r"].peak(),
        throttled_s=throttled,
        events=events,
        lane_runs=lane_runs if burst else 0,
        lane_p99_s=lane_hist.quantile(0.99) if lane_runs and burst else math.nan,
        lane_max_s=lane_hist.quantile(1.0) if lane_runs and burst else math.nan,
    )
