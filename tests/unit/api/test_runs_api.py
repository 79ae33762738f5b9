"""GET /api/runs/{id}, POST /api/runs/{id}/cancel and GET /api/jobs/{id}/stats, over the fakes.

A run id names its job, so every call is tenant-scoped through the job: another tenant's run is a 404.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched.api import build_app
from jobsched.domain import times
from jobsched.domain.keys import parse_run_id
from jobsched.domain.records import Lease, Transition
from jobsched.handlers import RunContext
from jobsched.services import runs as runs_module
from jobsched.services.runs import LogLinks
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import T0, World

A = {"X-Tenant": "team-a"}
B = {"X-Tenant": "team-b"}


def api(world: World, *, logs: LogLinks | None = None) -> APIGatewayRestResolver:
    return build_app(
        world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header", logs=logs
    )


def one_off(app: APIGatewayRestResolver, *, handler: str = "demo.echo", seconds: int = 30) -> str:
    body = {"type": "one_off", "handler": handler, "run_at": (T0 + timedelta(seconds=seconds)).isoformat()}
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    return str(created["job_id"])


def the_run_id(world: World, job_id: str) -> str:
    [run] = world.runs.recent(job_id, limit=5)
    return run.run_id


def test_a_run_reads_back_with_attempts_lateness_result_and_a_logs_link(world: World) -> None:
    # Given a one-off that ran 2 s after its tick, on a deployment with a worker log group
    logs = LogLinks(log_group="/aws/lambda/jobsched-worker", region="eu-west-1")
    app = api(world, logs=logs)
    job_id = one_off(app, handler="demo.echo")
    world.clock.advance(32)
    world.deliver()
    run_id = the_run_id(world, job_id)
    # When the owner reads the run by its id
    status, run = call(app, "GET", f"/api/runs/{run_id}", headers=A)
    # Then it answers the run, its one attempt, how late it started and a link to its log lines
    assert status == 200, run
    assert (run["run_id"], run["job_id"], run["status"], run["attempt"]) == (run_id, job_id, "SUCCEEDED", 1)
    assert run["lateness_ms"] == 2000 and run["result"] == {}
    assert [a["outcome"] for a in run["attempts"]] == ["SUCCEEDED"]
    assert run["logs_url"].startswith("https://eu-west-1.console.aws.amazon.com/cloudwatch/")
    assert "$252Faws$252Flambda$252Fjobsched-worker" in run["logs_url"] and run_id in run["logs_url"]


def test_another_tenants_run_and_a_malformed_run_id_are_not_found(world: World) -> None:
    app = api(world)
    job_id = one_off(app)
    run_id = the_run_id(world, job_id)
    for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/cancel"):
        method = "GET" if path.endswith(run_id) else "POST"
        status, answer = call(app, method, path, headers=B)
        assert status == 404 and answer["error"]["code"] == "not_found", answer
    assert call(app, "GET", "/api/runs/not-a-run", headers=A)[0] == 404
    assert call(app, "GET", "/api/runs/job_nope-123", headers=A)[0] == 404
    # ... and B's attempt cancelled nothing
    assert world.runs.get(*_key(run_id)).status.value == "PENDING"  # type: ignore[union-attr]


def _key(run_id: str) -> tuple[str, str]:
    job_id, sf = parse_run_id(run_id)
    return job_id, times.stored(sf)


def test_a_run_cancelled_before_it_starts_is_cancelled_and_never_fires(world: World) -> None:
    # Given a queued one-off whose handler records every call
    calls: list[str] = []
    world.handler("t.record", lambda payload, ctx: calls.append(ctx.run_id))
    app = api(world)
    job_id = one_off(app, handler="t.record")
    run_id = the_run_id(world, job_id)
    # When its run is cancelled before its time, then it is 200 CANCELLED, and a repeat says so again
    assert call(app, "POST", f"/api/runs/{run_id}/cancel", headers=A) == (
        200,
        {"run_id": run_id, "status": "CANCELLED"},
    )
    assert call(app, "POST", f"/api/runs/{run_id}/cancel", headers=A)[0] == 200
    # Then when its message comes due and is delivered, the handler is never called
    world.clock.advance(31)
    world.deliver()
    assert calls == []
    assert call(app, "GET", f"/api/runs/{run_id}", headers=A)[1]["status"] == "CANCELLED"


class ClaimFirst:
    """A RunStore whose next cancel() meets a worker's claim that landed just before it."""

    def __init__(self, inner: Any, world: World) -> None:
        self.inner, self.world = inner, world

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def cancel(self, job_id: str, scheduled_for: str, **kwargs: Any) -> Transition:
        now = self.world.clock.now()
        lease = Lease(owner="w1/x", message="m1", worker="w1", until=now + timedelta(seconds=60))
        assert self.inner.claim(job_id, scheduled_for, lease=lease, now=now).applied
        return self.inner.cancel(job_id, scheduled_for, **kwargs)  # type: ignore[no-any-return]


def test_a_cancel_that_loses_the_race_to_the_workers_claim_asks_the_run_to_stop(world: World) -> None:
    # Given a PENDING run, and a worker whose claim lands between the cancel's read and its write
    app = api(world)
    job_id = one_off(app)
    run_id = the_run_id(world, job_id)
    world.svc.job_service.runs = ClaimFirst(world.runs, world)  # type: ignore[assignment]
    # When the run is cancelled
    status, answer = call(app, "POST", f"/api/runs/{run_id}/cancel", headers=A)
    # Then the compare-and-set lost to the claim: the run is the worker's, asked to stop (202)
    assert (status, answer) == (202, {"run_id": run_id, "status": "LEASED"}), answer
    row = world.runs.get(*_key(run_id))
    assert row is not None and row.status.value == "LEASED" and row.cancel_requested_at is not None


@pytest.mark.parametrize("beat_first", [True, False], ids=["row-running", "row-still-pending"])
def test_a_running_python_handler_sees_ctx_cancelled_after_a_cancel_and_a_finished_run_is_409(
    world: World, beat_first: bool
) -> None:
    # Given a handler that, mid-run, has its own run cancelled and then checks ctx.cancelled: after
    # its first heartbeat (its row RUNNING), or before it (the fast path's row still PENDING, the
    # run known started by the slot it holds on its job)
    app = api(world)
    seen: dict[str, Any] = {}

    def cooperative(payload: dict[str, Any], ctx: RunContext) -> dict[str, bool]:
        if beat_first:
            ctx.heartbeat()  # the run is now RUNNING with a lease row (the fast path's first beat)
        seen["before"] = ctx.cancelled
        seen["answer"] = call(app, "POST", f"/api/runs/{ctx.run_id}/cancel", headers=A)
        ctx.heartbeat()  # the next beat reads the cancel mark
        seen["after"] = ctx.cancelled
        return {"stopped": ctx.cancelled}

    world.handler("t.cooperative", cooperative)
    job_id = one_off(app, handler="t.cooperative")
    world.clock.advance(31)
    world.deliver()
    run_id = the_run_id(world, job_id)
    # Then the cancel of the running run was a 202, and the handler saw it on its next beat
    assert seen["answer"] == (202, {"run_id": run_id, "status": "RUNNING"})
    assert (seen["before"], seen["after"]) == (False, True)
    # And once the run is finished, a cancel is a 409 naming its status
    status, answer = call(app, "POST", f"/api/runs/{run_id}/cancel", headers=A)
    assert status == 409 and "SUCCEEDED" in answer["error"]["message"], answer


def test_stats_count_runs_by_status_with_lateness_and_duration_percentiles(world: World) -> None:
    # Given a recurring job with four ticks run: three succeeded, one failed, started 1..4 s late
    world.handler("t.third_fails", lambda p, ctx: 1 / 0 if ctx.scheduled_for.minute == 3 else "ok")
    app = api(world)
    status, created = call(
        app,
        "POST",
        "/api/jobs",
        headers=A,
        body={"type": "recurring", "cron_expr": "* * * * *", "handler": "t.third_fails", "max_attempts": 1},
    )
    assert status == 201, created
    job_id = created["job_id"]
    for i in range(1, 5):
        world.clock.set(T0 + timedelta(minutes=i, seconds=i))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    # When the owner asks for the stats
    status, stats = call(app, "GET", f"/api/jobs/{job_id}/stats", headers=A)
    assert status == 200, stats
    # Then the counts, rate and percentiles are those of the four runs
    assert stats["runs"] == 4, stats
    assert stats["by_status"]["SUCCEEDED"] == 3 and sum(stats["by_status"].values()) == 4
    assert stats["success_rate"] == pytest.approx(0.75)
    assert stats["lateness_ms"] == {"p50": 2000, "p95": 4000, "p99": 4000, "max": 4000}
    assert stats["truncated"] is False and stats["max_runs"] == runs_module.STATS_MAX_RUNS
    # And `since` narrows it, and another tenant's job is a 404
    since = (T0 + timedelta(minutes=3)).isoformat().replace("+00:00", "Z")
    assert call(app, "GET", f"/api/jobs/{job_id}/stats?since={since}", headers=A)[1]["runs"] == 2
    assert call(app, "GET", f"/api/jobs/{job_id}/stats", headers=B)[0] == 404
    assert call(app, "GET", f"/api/jobs/{job_id}/stats?since=yesterday", headers=A)[0] == 400


def test_a_cancel_of_a_counted_run_on_the_fast_path_asks_it_to_stop_and_the_run_keeps_its_truth(
    world: World,
) -> None:
    # Given a recurring job that allows overlap (its runs are counted in flight on the job, not held in
    # its slot), whose handler, mid-run and before any heartbeat (no run row yet: the fast path writes
    # it at the end), has its own run cancelled and then looks at ctx.cancelled
    app = api(world)
    seen: dict[str, Any] = {}

    def cooperative(payload: dict[str, Any], ctx: RunContext) -> dict[str, bool]:
        seen["row_before"] = world.runs.get(*_key(ctx.run_id))
        seen["answer"] = call(app, "POST", f"/api/runs/{ctx.run_id}/cancel", headers=A)
        ctx.heartbeat()  # the fast path's first beat writes the row RUNNING, and reads the mark
        seen["after"] = ctx.cancelled
        return {"stopped": ctx.cancelled}

    world.handler("t.cooperative", cooperative)
    body = {"type": "recurring", "handler": "t.cooperative", "cron_expr": "* * * * *"}
    body["overlap_policy"] = "allow"
    status, created = call(app, "POST", "/api/jobs", headers=A, body=body)
    assert status == 201, created
    world.clock.advance(61)
    # When its first tick runs
    world.deliver()
    run_id = the_run_id(world, str(created["job_id"]))
    # Then the cancel saw the live in-flight entry: 202, asked to stop (not a 200 CANCELLED mid-run)
    assert seen["row_before"] is None
    assert seen["answer"] == (202, {"run_id": run_id, "status": "RUNNING"}), seen["answer"]
    assert seen["after"] is True
    # And the run ends as what it did: SUCCEEDED with the handler's answer, its cancel mark kept
    status, run = call(app, "GET", f"/api/runs/{run_id}", headers=A)
    assert (run["status"], run["result"], run["attempt"]) == ("SUCCEEDED", {"stopped": True}, 1), run
    assert run["cancel_requested_at"] is not None


def test_the_tenants_stats_show_its_due_backlog_and_its_recent_runs_lateness_and_no_one_elses(
    world: World,
) -> None:
    # Given team-a's recurring job with four ticks run, 1..4 s late, and team-b's own job
    app = api(world)
    minutely = {"type": "recurring", "cron_expr": "* * * * *", "handler": "demo.echo"}
    assert call(app, "POST", "/api/jobs", headers=A, body=minutely)[0] == 201
    for i in range(1, 5):
        world.clock.set(T0 + timedelta(minutes=i, seconds=i))
        world.svc.dispatcher.dispatch_all()
        world.deliver()
    assert call(app, "POST", "/api/jobs", headers=B, body=minutely)[0] == 201
    # When no dispatcher pass comes for three minutes, and each tenant asks for its stats
    world.clock.set(T0 + timedelta(minutes=7, seconds=30))
    status, stats = call(app, "GET", "/api/stats", headers=A)
    assert status == 200, stats
    # Then team-a sees its one job overdue since its first tick not handed over (12:05 went with the
    # pass at 12:04, within its look-ahead), and the lateness of its four runs
    assert (stats["backlog"], stats["truncated"]) == (1, False), stats
    assert stats["oldest_due"] == (T0 + timedelta(minutes=6)).isoformat(timespec="milliseconds"), stats
    assert (stats["sampled_jobs"], stats["runs"], stats["by_status"]) == (1, 4, {"SUCCEEDED": 4})
    assert stats["lateness_ms"] == {"p50": 2000, "p95": 4000, "p99": 4000, "max": 4000}
    # And team-b sees its own job only, with no run yet
    status, other = call(app, "GET", "/api/stats", headers=B)
    assert status == 200 and (other["backlog"], other["runs"], other["sampled_jobs"]) == (1, 0, 1), other
