"""DAG dependencies: validate upstreams, signal completions, propagate failures, show the graph.

A dependant fires once per *period*. A period is the scheduled_for of the root tick that started the
chain, carried along it: every run of a dependant is keyed (dependant, period), so a dependant of
hourly jobs fires once an hour, after all its upstreams' runs of that hour succeeded. Chains rooted
in one-off jobs have a single period, "once" (the dependant's run is keyed by its creation time).
All upstreams of a dependant must share one period source: the same cron and timezone, or all
one-off; anything else is refused at creation (400), since such a dependant could never complete.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime

from jobsched.asl_inputs import DagInput, DagItem, UpstreamFailed
from jobsched.domain import times
from jobsched.domain.keys import execution_name, job_pk, run_id_for, run_sk
from jobsched.domain.models import MAX_FAN_OUT, MAX_GRAPH_NODES, Execution, Job, RunMessage, in_time_window
from jobsched.domain.records import NewRun
from jobsched.domain.results import Graph, GraphPeriod
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.errors import Conflict, FanOutFull, ValidationFailed
from jobsched.ports import Clock, JobStore, RunStore, StateMachines
from jobsched.services.packs import PackedJobs
from jobsched.settings import Settings

ONCE = "once"
GRAPH_PERIODS = 5
# Jobs one batch read of the graph bound's walk asks for (DynamoDB's BatchGetItem takes 100 keys).
BATCH_READ = 100


def root_schedule_of(job: Job) -> str:
    """Where a job's periods come from: "once", or "<cron>@<timezone>" of its recurring root."""
    if job.type == "recurring":
        return f"{job.cron_expr}@{job.timezone}"
    if job.type == "one_off":
        return ONCE
    return job.root_schedule or ONCE


def graph_period(text: str) -> str:
    """A graph's `period` as asked for ("once", or an ISO-8601 instant with its offset: the
    scheduled_for of the chain's root tick) in its stored form; a 400 naming `period` otherwise."""
    if text == ONCE:
        return ONCE
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or moment.utcoffset() is None:
        raise ValidationFailed(
            f'period: "{text[:64]}" is neither "once" nor an ISO-8601 instant with its UTC offset '
            "(a root tick's scheduled_for, e.g. 2026-11-30T12:00:00+00:00)",
            field="period",
        )
    try:
        return times.stored(in_time_window(moment))
    except ValueError as exc:
        raise ValidationFailed(f"period: {exc}", field="period") from None


@dataclass
class DagService:
    """The DAG's reads and its completion/failure signals."""

    jobs: JobStore
    runs: RunStore
    state_machines: StateMachines
    settings: Settings
    clock: Clock
    # Packed one-offs (services/packs.py): an upstream is read by id, which copies a packed one out,
    # for its own tenant only.
    packed: PackedJobs | None = None

    # -- creation ---------------------------------------------------------------------------------------
    def check_upstreams(self, depends_on: list[str], *, tenant: str, job_id: str | None = None) -> str:
        """Validate a dependant's upstreams; returns their common root schedule. 400/409 otherwise."""
        roots: dict[str, str] = {}
        for upstream_id in depends_on:
            if upstream_id == job_id:
                raise ValidationFailed(
                    f"depends_on: a job cannot depend on itself ({job_id})", field="depends_on"
                )
            foreign = self.packed is not None and self.packed.foreign(upstream_id, tenant)
            upstream = (
                self.jobs.get_job(upstream_id) if upstream_id.startswith("job_") and not foreign else None
            )
            if upstream is None or upstream.tenant != tenant:
                raise ValidationFailed(f"depends_on: unknown job '{upstream_id}'", field="depends_on")
            if upstream.status == JobStatus.CANCELLED:
                raise Conflict(f"depends_on: job '{upstream_id}' is CANCELLED", field="depends_on")
            # A fast refusal before any write; the store checks the cap again, atomically, in the
            # write that adds the edge (JobStore.create_with_idempotency), so racing creates cannot
            # both take the last place.
            if job_id not in upstream.dependants and len(upstream.dependants) >= MAX_FAN_OUT:
                raise FanOutFull(upstream_id, dependants=len(upstream.dependants), cap=MAX_FAN_OUT)
            roots[upstream_id] = root_schedule_of(upstream)
        if len(set(roots.values())) > 1:
            detail = ", ".join(f"{k}: {v}" for k, v in roots.items())
            raise ValidationFailed(
                "depends_on: upstreams must share one schedule (the same cron and timezone, or all one-off) "
                f"so their periods line up; got {detail}",
                field="depends_on",
            )
        if job_id is not None:
            cycle = self._path_to(job_id, start=depends_on)
            if cycle:
                raise ValidationFailed(
                    "depends_on: a cycle: " + " -> ".join([job_id, *cycle]), field="depends_on"
                )
        # The bound counts both ways: the new job's ancestors (plus itself), and every ancestor's
        # descendants once the job joins them (plus its own, when a PATCH moves it), since a dead
        # letter of any ancestor propagates to all its descendants in one workflow input. Every
        # ancestor lies below one of the topmost ancestors (those with no upstream of their own), whose
        # descendants include its own: checking those covers them all, one bounded walk each.
        ancestors = self._reach(depends_on, upward=True)
        if len(ancestors) + 1 > MAX_GRAPH_NODES:
            raise ValidationFailed(
                f"depends_on: the graph would exceed {MAX_GRAPH_NODES} jobs", field="depends_on"
            )
        moved = {job_id, *self._reach([job_id], upward=False)} if job_id is not None else {"<new>"}
        read: dict[str, Job] = dict(ancestors)
        for top in (a for a in ancestors.values() if not any(u in ancestors for u in a.depends_on)):
            below = self._below(top, read=read, room=MAX_GRAPH_NODES - 1, moved=moved)
            if len(below) + 1 > MAX_GRAPH_NODES:
                raise ValidationFailed(
                    f"depends_on: job '{top.job_id}' would have more than {MAX_GRAPH_NODES - 1} descendants",
                    field="depends_on",
                )
        return next(iter(roots.values()))

    def _path_to(self, target: str, *, start: list[str]) -> list[str]:
        """An upstream path from one of `start` up to `target`, if there is one (a would-be cycle)."""
        parents: dict[str, str | None] = {s: None for s in start}
        queue = deque(start)
        while queue:
            current = queue.popleft()
            if current == target:
                path = [current]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])  # type: ignore[arg-type]
                return list(reversed(path))
            job = self.jobs.get_job(current)
            for up in job.depends_on if job else ():
                if up not in parents:
                    parents[up] = current
                    queue.append(up)
        return []

    def _below(self, top: Job, *, read: dict[str, Job], room: int, moved: set[str]) -> set[str]:
        """`top`'s descendants with `moved` joined to them, walked only until they pass `room`.

        Level by level, each level's unread jobs in batches of BATCH_READ (one BatchGetItem each), so
        a create in a graph of 200 jobs costs a few calls, not 200; `read` keeps the jobs read across
        the walks of one check, so a job below two topmost ancestors is read once.
        """
        below = set(moved)
        level = [d for d in top.dependants if d not in below]
        while level and len(below) <= room:
            below.update(level)
            unread = [j for j in level if j not in read]
            for start in range(0, len(unread), BATCH_READ):
                read.update(self.jobs.get_jobs(unread[start : start + BATCH_READ]))
            level = list(
                dict.fromkeys(d for j in level if j in read for d in read[j].dependants if d not in below)
            )
        return below

    def _reach(self, start: list[str] | tuple[str, ...], *, upward: bool) -> dict[str, Job]:
        """Every job reachable from `start` (ancestors or descendants), each once: never cut short.

        Creation keeps a graph within MAX_GRAPH_NODES, so this reads at most that many jobs; a graph
        made before the bound is walked whole all the same, so no dependant is left out of a
        failure's propagation or a cascading cancel. Level by level, in batch reads (no payloads:
        no caller reads one).
        """
        found: dict[str, Job] = {}
        level = list(dict.fromkeys(start))
        while level:
            for first in range(0, len(level), BATCH_READ):
                found.update(self.jobs.get_jobs(level[first : first + BATCH_READ]))
            level = list(
                dict.fromkeys(
                    n
                    for job_id in level
                    if job_id in found
                    for n in (found[job_id].depends_on if upward else found[job_id].dependants)
                    if n not in found
                )
            )
        return found

    # -- signals ----------------------------------------------------------------------------------------
    def period_of(self, job: Job, run: Execution) -> str:
        """The period a run of `job` belongs to."""
        return ONCE if root_schedule_of(job) == ONCE else times.stored(run.scheduled_for)

    def run_sf_for(self, dependant: Job, period: str) -> datetime:
        """The scheduled_for of a dependant's run in a period."""
        return dependant.created_at if period == ONCE else times.parse_stored(period)

    def settle(self, job: Job, succeeded: Execution, *, now: datetime) -> None:
        """After a success is recorded, wherever it ran (the worker function, a pool's worker): its
        dependants signalled and, for a run its job lives for (a one-off, a dependant in a one-off
        chain), the job COMPLETED. Each step is idempotent: a repeat changes nothing."""
        if root_schedule_of(job) == ONCE:
            # Read the dependants again, after the success is recorded: one that joined while this
            # run ran is either seen here or sees the success itself (join).
            job = self.jobs.get_job(job.job_id) or job
        self.signal_success(job, succeeded)
        if root_schedule_of(job) == ONCE:
            # From PAUSED too: a one-off paused after its tick was due still runs it (docs/api.md), and
            # its one run ended its life (before, it stayed PAUSED, then SCHEDULED for good after a
            # resume: tests/sim seed 352, with packed one-offs, the first workload to pause one-offs).
            self.jobs.set_job_status(
                job.job_id,
                target=JobStatus.COMPLETED,
                sources=[JobStatus.SCHEDULED, JobStatus.PAUSED],
                now=now,
                leave_index=True,
                release_slot=job.type == "one_off",
            )

    def signal_success(self, job: Job, run: Execution, *, only: str | None = None) -> bool:
        """Count a succeeded run into its dependants (the DAG workflow); once per run and replay series.

        `only`: count it into that one dependant (one that joined after the run had succeeded).
        """
        targets = [only] if only else list(job.dependants)
        if not targets:
            return False
        period = self.period_of(job, run)
        now = times.stored(self.clock.now())
        items = []
        for dependant_id in targets:
            dependant = self.jobs.get_job(dependant_id)
            if dependant is None or dependant.status == JobStatus.CANCELLED:
                continue
            run_sf = self.run_sf_for(dependant, period)
            items.append(
                DagItem(
                    pk=job_pk(dependant.job_id),
                    wait_sk=f"WAIT#{period}",
                    run_sk=run_sk(times.stored(run_sf)),
                    run_sf=times.stored(run_sf),
                    run_id=run_id_for(dependant.job_id, run_sf),
                    job_id=dependant.job_id,
                    tenant=dependant.tenant,
                    fan_in=len(dependant.depends_on),
                    message=RunMessage(
                        job_id=dependant.job_id, scheduled_for=times.stored(run_sf), kind="dependant"
                    ).model_dump_json(),
                    now=now,
                )
            )
        payload = DagInput(
            upstream_run=run.run_id,
            runs_table=self.settings.runs_table,
            queue_url=self.settings.execution_queue_url,
            items=items,
        )
        name = execution_name("dag", run.run_id, f"r{run.replays}", *([f"join-{only}"] if only else []))
        return self.state_machines.start(
            self.settings.dag_workflow_arn, name, payload.model_dump(mode="json")
        )

    def join(self, dependant: Job) -> None:
        """A new dependant of a one-off chain counts the upstream runs that already succeeded.

            creation: add edge (1), then read the upstream's run (2)
            worker:   record SUCCEEDED (a), then read the upstream's dependants (b)

        If (2) does not see the success, (a) came after (2), so after (1), and (b) sees the edge:
        one of the two always signals (both may: counting is idempotent per upstream run).
        Recurring chains need no join: a new dependant starts with the next period.

        An upstream whose run was dead-lettered already marks the dependant's run UPSTREAM_FAILED,
        as the failure workflow marks the dependants it knew of (else the new dependant would wait
        for good, shown as nothing at all). The same race, with the workflow's mark: if (2) does
        not see the dead letter, the workflow's Propagate, which reads the dependants after, marks
        it; both may, the write is born-only. A replay of the upstream that succeeds re-arms it.
        """
        if root_schedule_of(dependant) != ONCE:
            return
        for upstream_id in dependant.depends_on:
            upstream = self.jobs.get_job(upstream_id)
            latest = self.runs.recent(upstream_id, limit=1)
            if upstream and latest and latest[0].status == RunStatus.SUCCEEDED:
                self.signal_success(upstream, latest[0], only=dependant.job_id)
            elif upstream and latest and latest[0].status == RunStatus.DEAD_LETTER:
                run_sf = self.run_sf_for(dependant, self.period_of(upstream, latest[0]))
                self.runs.mark_upstream_failed(
                    NewRun(dependant.job_id, dependant.tenant, times.stored(run_sf), "dependant"),
                    reason=f"upstream {latest[0].run_id} was dead-lettered",
                    now=self.clock.now(),
                )

    def failed_dependants(self, job: Job, run: Execution) -> list[UpstreamFailed]:
        """Every transitive dependant's run of this period, to mark UPSTREAM_FAILED (failure workflow)."""
        if not job.dependants:
            return []
        period = self.period_of(job, run)
        out = []
        for dependant in self._reach(job.dependants, upward=False).values():
            run_sf = self.run_sf_for(dependant, period)
            out.append(
                UpstreamFailed(
                    pk=job_pk(dependant.job_id),
                    run_sk=run_sk(times.stored(run_sf)),
                    run_sf=times.stored(run_sf),
                    run_id=run_id_for(dependant.job_id, run_sf),
                    job_id=dependant.job_id,
                    tenant=dependant.tenant,
                    reason=f"upstream {run.run_id} was dead-lettered",
                )
            )
        return out

    def cancel_dependants(self, job: Job) -> list[str]:
        """Cancel every transitive dependant of a cancelled job: they could never fire again."""
        cancelled = []
        now = self.clock.now()
        for dependant in self._reach(job.dependants, upward=False).values():
            applied, _ = self.jobs.set_job_status(
                dependant.job_id,
                target=JobStatus.CANCELLED,
                sources=[JobStatus.SCHEDULED, JobStatus.PAUSED],
                now=now,
                leave_index=True,
            )
            if applied:
                cancelled.append(dependant.job_id)
        return cancelled

    # -- the graph ---------------------------------------------------------------------------------------
    def graph(self, job: Job, *, period: str | None = None) -> Graph:
        """The DAG around a job and its nodes' run status: every edge of every node shown.

        Its ancestors and descendants come first, then the rest of what they touch (a dependant's
        other upstreams, an upstream's other dependants, and so on), at most MAX_GRAPH_NODES jobs in
        all, nearest first; `truncated` says the bound left some node's edge out. Without `period`,
        the GRAPH_PERIODS most recent periods; with one (graph_period's form), that period alone.
        """
        nodes, truncated = self._around(job)
        edges = sorted({(u, n.job_id) for n in nodes.values() for u in n.depends_on if u in nodes})
        periods = self._recent_periods(nodes) if period is None else [self._one_period(nodes, period)]
        return Graph(
            job_id=job.job_id,
            nodes=sorted(nodes.values(), key=lambda n: n.job_id),
            edges=edges,
            periods=periods,
            truncated=truncated,
        )

    def _recent_periods(self, nodes: dict[str, Job]) -> list[GraphPeriod]:
        """The GRAPH_PERIODS most recent periods any node has a run in, newest first."""
        by_period: dict[str, dict[str, RunStatus]] = {}
        for node in nodes.values():
            for r in self.runs.recent(node.job_id, limit=GRAPH_PERIODS):
                period = ONCE if root_schedule_of(node) == ONCE else times.iso(r.scheduled_for)
                by_period.setdefault(period, {})[node.job_id] = r.status
        periods = sorted(by_period.items(), reverse=True)[:GRAPH_PERIODS]
        return [GraphPeriod(period=p, status=s) for p, s in periods]

    def _one_period(self, nodes: dict[str, Job], period: str) -> GraphPeriod:
        """Each node's run in one period, however old: one read per node, never a scan.

        In a recurring chain every node's run of a period is keyed (node, period) (run_sf_for), so
        each is one GetItem, eventually consistent (a display: half the read units, and a run a
        moment old shows at the next read). A one-off chain has the one period "once": its node's
        run is its newest (a one-off's own run, a dependant's keyed by its creation time), a query
        limited to one item. A node whose chain has no such period, or no run in it yet, is absent.
        """
        status: dict[str, RunStatus] = {}
        for node in nodes.values():
            if root_schedule_of(node) == ONCE:
                newest = self.runs.recent(node.job_id, limit=1) if period == ONCE else []
                run = newest[0] if newest else None
            else:
                run = None if period == ONCE else self.runs.get(node.job_id, period, consistent=False)
            if run is not None:
                status[node.job_id] = run.status
        label = period if period == ONCE else times.iso(times.parse_stored(period))
        return GraphPeriod(period=label, status=status)

    def _around(self, job: Job) -> tuple[dict[str, Job], bool]:
        """The jobs connected to `job` (at most MAX_GRAPH_NODES, lineage first); whether any was left out."""
        nodes = {job.job_id: job}
        lineage = [*self._reach(job.depends_on, upward=True).values()]
        lineage += self._reach(job.dependants, upward=False).values()
        for node in lineage:
            if len(nodes) < MAX_GRAPH_NODES:
                nodes.setdefault(node.job_id, node)
        missing: set[str] = set()  # edges to jobs that no longer exist: nothing to show
        queue = deque(n for node in nodes.values() for n in (*node.depends_on, *node.dependants))
        while queue and len(nodes) < MAX_GRAPH_NODES:
            job_id = queue.popleft()
            if job_id in nodes or job_id in missing:
                continue
            found = self.jobs.get_job(job_id)
            if found is None:
                missing.add(job_id)
                continue
            nodes[job_id] = found
            queue.extend((*found.depends_on, *found.dependants))
        truncated = any(
            n not in nodes and n not in missing
            for node in nodes.values()
            for n in (*node.depends_on, *node.dependants)
        )
        return nodes, truncated
