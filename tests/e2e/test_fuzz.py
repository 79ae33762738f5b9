"""Fuzz the live local stack's REST API from its own OpenAPI document (schemathesis).

Every operation of GET /api/openapi.json gets schema-valid and schema-violating requests: first the
coverage phase's boundary and negative cases, then random ones (derandomized: the same cases every
run, so a CI failure reproduces). Each response must hold these properties:

* no 5xx (schemathesis' ``not_a_server_error``);
* every 4xx body is exactly ``{"error": {"code": str, "message": str}}``;
* the status is one the document lists for the operation, and the body fits the schema it gives
  for that status (``status_code_conformance``, ``response_schema_conformance``): the document
  tells the truth, 400 ErrorResponse for bad input and no 422;
* a rejected POST /api/jobs writes nothing. Each create goes out under an X-Tenant of its own; after
  it the embedded DynamoDB is asked for items keyed to that tenant: none after a 4xx, some after a
  201 (so the probe demonstrably sees writes). No create, whatever its answer, may change the DAG
  edges of the seeded jobs (another tenant's, which bodies may name in depends_on). At the end every
  item of every table is searched for the text of every rejected tenant, after the workers had time
  to act on anything a rejected create might have enqueued (the stack at rest: queue and workflows idle).

Path ids are sometimes swapped for those of seeded jobs and of a dead-lettered run, and bodies are
sometimes made plausible (a registered handler, the timing field the job type needs), so pause,
resume, run, PATCH, backfill, replay and create reach their services instead of stopping at
"not found" or "not a registered handler".

`make fuzz` runs it with JOBSCHED_FUZZ_EXAMPLES=300 random cases per operation (30 by default).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import boto3
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance
from schemathesis.generation.meta import CoverageScenario, coverage_scenario

from jobsched.api import build_app, openapi_document
from jobsched.domain.keys import job_pk
from jobsched.local.stack import DEFAULT_PREFIX, _handler_for
from jobsched.resources import JOBS_TABLE, physical_name
from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.support import live_stack_at_rest, poll_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

EXAMPLES = int(os.environ.get("JOBSCHED_FUZZ_EXAMPLES", "30"))
TENANT = "fuzz"  # the seeded jobs' tenant, used by every operation but POST /api/jobs
CREATE = "POST /api/jobs"
_AWS_LINE = re.compile(r"embedded AWS (http://\S+?)\)")


class Fuzzed:
    """What the run saw: statuses and time per operation, and the tenants of creates."""

    def __init__(self) -> None:
        self.statuses: dict[str, Counter[int]] = defaultdict(Counter)
        self.rejected_tenants: list[str] = []
        self.created_tenants: list[str] = []
        self.unrouted: Counter[str] = Counter()
        self.seconds: dict[str, float] = defaultdict(float)


class Store:
    """Read access to the stack's embedded DynamoDB, to see what a request wrote."""

    def __init__(self, endpoint_url: str) -> None:
        self.endpoint_url = endpoint_url
        self.client = boto3.client(
            "dynamodb",
            endpoint_url=endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.tables = self.client.list_tables()["TableNames"]

    def scan(self, **filters: Any) -> list[dict[str, Any]]:
        """The items of every table (matching `filters`, FilterExpression & co., when given)."""
        items: list[dict[str, Any]] = []
        for table in self.tables:
            pages = self.client.get_paginator("scan").paginate(
                TableName=table, ConsistentRead=True, **filters
            )
            for page in pages:
                items += page.get("Items", [])
        return items

    def keyed_to(self, tenant: str) -> list[dict[str, Any]]:
        """Items whose key, tenant or dead-letter key names `tenant` (filtered in the store: fast)."""
        return self.scan(
            FilterExpression="contains(PK, :t) OR contains(SK, :t) OR #tenant = :t OR contains(dl_key, :t)",
            ExpressionAttributeNames={"#tenant": "tenant"},
            ExpressionAttributeValues={":t": {"S": tenant}},
        )

    def edges(self, job_ids: list[str]) -> dict[str, list[str]]:
        """The `dependants` set stored on each of `job_ids` (the DAG edges a create adds upstream)."""
        table = physical_name(DEFAULT_PREFIX, JOBS_TABLE)
        keys = [{"PK": {"S": job_pk(job_id)}, "SK": {"S": "META"}} for job_id in job_ids]
        got = self.client.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True}})
        return {
            item["job_id"]["S"]: sorted(item.get("dependants", {}).get("SS", []))
            for item in got["Responses"][table]
        }


def mentioning(items: list[dict[str, Any]], tenants: set[str]) -> list[dict[str, Any]]:
    """The items whose text contains one of `tenants`, whatever attribute or key holds it."""
    return [item for item in items if any(t in json.dumps(item, default=repr) for t in tenants)]


class Seeded:
    """The fuzz stack, its store, and the ids of the jobs and dead-lettered run seeded into it."""

    def __init__(self, stack: Stack, store: Store, job_ids: list[str], run_ids: list[str]) -> None:
        self.stack, self.store, self.job_ids, self.run_ids = stack, store, job_ids, run_ids
        self.seen = Fuzzed()
        self.edges: dict[str, list[str]] | None = None


def _drain(stack: Stack, lines: list[str], aws: list[str], ready: threading.Event) -> None:
    """Keep reading the stack's output (a full pipe would block it); note the embedded AWS URL."""
    assert stack.process.stdout is not None
    for line in stack.process.stdout:
        lines.append(line)
        match = _AWS_LINE.search(line)
        if match and not ready.is_set():
            aws.append(match.group(1))
            ready.set()


def _create(stack: Stack, body: dict[str, Any]) -> str:
    response = stack.post("/api/jobs", body, **{"X-Tenant": TENANT})
    assert response.status_code == 201, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def _seed_jobs(stack: Stack) -> list[str]:
    """A yearly recurring job, a one-off a month away, and a dependant of the recurring one."""
    far = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0).isoformat()
    recurring = _create(stack, {"type": "recurring", "cron_expr": "0 0 1 1 *", "handler": "demo.echo"})
    one_off = _create(stack, {"type": "one_off", "run_at": far, "handler": "demo.echo", "name": "far"})
    dependant = _create(stack, {"type": "dependent", "depends_on": [recurring], "handler": "demo.echo"})
    return [recurring, one_off, dependant]


def _seed_dead_letter(stack: Stack) -> tuple[str, list[str]]:
    """A one-off due now that always fails, once: its run is dead-lettered within seconds."""
    now = datetime.now(UTC).replace(microsecond=0).isoformat()
    failing = _create(stack, {"type": "one_off", "run_at": now, "handler": "demo.fail", "max_attempts": 1})

    def dead_lettered() -> list[str]:
        page = stack.get("/api/dead-letter", **{"X-Tenant": TENANT}).json()
        return [item["run_id"] for item in page["items"]]

    run_ids: list[str] = poll_until(
        dead_lettered, "the failing one-off's run in the dead-letter list", timeout=30
    )
    return failing, run_ids


@pytest.fixture(scope="module")
def seeded(request: pytest.FixtureRequest) -> Iterator[Seeded]:
    """A stack of its own (fuzzed jobs stay out of the other e2e tests), with seeded jobs.

    The tick is 10 min: one dispatcher pass at start, none during the run, so cron jobs the fuzzer
    creates do not flood the embedded AWS (a first tick due soon is still handed over at create).
    """
    stack = start_stack(JOBSCHED_TICK_SECONDS="600")
    lines: list[str] = []
    aws: list[str] = []
    ready = threading.Event()
    threading.Thread(target=_drain, args=(stack, lines, aws, ready), daemon=True).start()
    try:
        assert ready.wait(30), "the local stack did not print its embedded AWS endpoint:\n" + "".join(lines)
        served = stack.get("/api/openapi.json").json()
        assert served == OPENAPI, "the live stack serves another OpenAPI document than the one fuzzed"
        failing, run_ids = _seed_dead_letter(stack)
        job_ids = [*_seed_jobs(stack), failing]
        SEEDED_JOBS[:], DOOMED_JOBS[:], SEEDED_RUNS[:] = job_ids, _seed_jobs(stack), run_ids
        state = Seeded(stack, Store(aws[0]), job_ids, run_ids)
        yield state
        _report(request, state, lines)
    finally:
        stop_stack(stack)


def _report(request: pytest.FixtureRequest, state: Seeded, lines: list[str]) -> None:
    statuses = state.seen.statuses
    total = sum(sum(c.values()) for c in statuses.values())
    server_errors = sum(n for c in statuses.values() for code, n in c.items() if code >= 500)
    out = [f"fuzz: {len(statuses)} operations, {total} cases, {server_errors} 5xx ({EXAMPLES} random/op)"]
    out += [
        f"  {label}: {dict(sorted(c.items()))} in {state.seen.seconds[label]:.1f}s"
        for label, c in sorted(statuses.items())
    ]
    started = time.monotonic()
    items = len(state.store.scan())
    out += [f"  store: {items} items, scanned in {time.monotonic() - started:.2f}s"]
    if state.seen.unrouted:
        out += [f"  not sent (methods the local HTTP server does not route): {dict(state.seen.unrouted)}"]
    if server_errors:
        out += ["stack output:", *[line.rstrip() for line in lines[-200:]]]
    # Module teardown runs inside the last test's output capture: step out of it to be seen.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capture is None or reporter is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in out:
            reporter.write_line(line)


def _openapi() -> dict[str, Any]:
    """The document GET /api/openapi.json serves, built from the same code without AWS.

    Test collection needs it before any stack runs; the test checks the live stack serves the same.
    """
    # pools: a stand-in that is not None, so the worker API's routes are in it, as the stack serves them
    app = build_app(
        cast(Any, None), cast(Any, None), cast(Any, None), tenant_source="header", pools=cast(Any, object())
    )
    return openapi_document(app)


OPENAPI = _openapi()
# The methods the local stack's HTTP server hands to the API at all (its do_<METHOD> handlers).
ROUTED = {name.removeprefix("do_") for name in dir(_handler_for(cast(Any, None))) if name.startswith("do_")}
UNROUTED_REASON = (
    "jobsched/local/stack.py's HTTP server has no do_{method}: http.server answers 501 with an HTML page "
    "before the API sees the request"
)
schema = schemathesis.openapi.from_dict(OPENAPI)
# Filled by the `seeded` fixture before any case is generated: ids the hooks below steer towards.
SEEDED_JOBS: list[str] = []
DOOMED_JOBS: list[str] = []  # DELETE's own: a cancelled job answers the other operations 409 only
SEEDED_RUNS: list[str] = []


@schema.hook
def flatmap_path_parameters(ctx: schemathesis.HookContext, params: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Keep the generated id (listed first: shrinking goes there) or use a seeded one."""
    if not isinstance(params, dict):
        return st.just(params)
    choices = [params]
    if "job_id" in params:
        jobs = DOOMED_JOBS if ctx.operation is not None and ctx.operation.method == "delete" else SEEDED_JOBS
        choices += [{**params, "job_id": job_id} for job_id in jobs]
    if "run_id" in params:
        choices += [{**params, "run_id": run_id} for run_id in SEEDED_RUNS]
    return st.sampled_from(choices)


TIMING_FIELDS = ("run_at", "cron_expr", "depends_on")


def _timing(job_type: str) -> dict[str, Any]:
    """The field a job of `job_type` needs to be accepted (the seeded upstream for a dependant)."""
    far = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0).isoformat()
    return {"one_off": {"run_at": far}, "recurring": {"cron_expr": "0 0 1 1 *"}}.get(
        job_type, {"depends_on": SEEDED_JOBS[:1]}
    )


@schema.hook
def flatmap_body(ctx: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    """Sometimes make a body plausible, and a non-empty depends_on name seeded jobs.

    Generated bodies fit the JSON Schema but almost never make a job: a random handler is never
    registered, a random cron string rarely parses, and which of run_at/cron_expr/depends_on a type
    needs is not in the schema. A drawn `plausible` (3 in 4; shrinking towards the body as generated) sets
    handler demo.echo, timezone UTC and just the timing field the type needs, drops start_at and
    end_at (random instants are mostly outside 1970..3000), and keeps every other field as
    generated, so creates and edits get past validation into the store. For a create the seeded
    jobs are another tenant's: naming them must be refused without touching them.
    """
    if not isinstance(body, dict):
        return st.just(body)
    depends_on = body.get("depends_on")
    upstreams = [depends_on, SEEDED_JOBS[:1], SEEDED_JOBS[:2]] if depends_on else [depends_on]

    def swap(drawn: tuple[bool, Any]) -> dict[str, Any]:
        plausible, ids = drawn
        out = {**body, "depends_on": ids} if depends_on else dict(body)
        if plausible:
            out = {k: v for k, v in out.items() if k not in ("start_at", "end_at")}
            out |= {"handler": "demo.echo"} | ({"timezone": "UTC"} if "timezone" in out else {})
            if isinstance(out.get("type"), str):  # a create: only the timing field its type needs
                out = {k: v for k, v in out.items() if k not in TIMING_FIELDS} | _timing(out["type"])
            else:  # an edit
                out.pop("depends_on", None)
                out |= {"cron_expr": "0 0 1 1 *"} if "cron_expr" in out else {}
        return out

    plausible = st.integers(0, 3).map(bool)  # 3 in 4; shrinks to 0, the body as generated
    return st.tuples(plausible, st.sampled_from(upstreams)).map(swap)


def assert_error_shape(status: int, content: bytes) -> None:
    """A 4xx answers exactly {"error": {"code": str, "message": str}}, as JSON."""
    if not 400 <= status < 500:
        return
    try:
        body = json.loads(content)
    except ValueError:
        raise AssertionError(f"{status} with a body that is not JSON: {content!r}") from None
    error = body.get("error") if isinstance(body, dict) else None
    assert (
        isinstance(body, dict)
        and set(body) == {"error"}
        and isinstance(error, dict)
        and set(error) == {"code", "message"}
        and isinstance(error["code"], str)
        and isinstance(error["message"], str)
        and error["code"]
        and error["message"]
    ), f"{status} without the error shape: {body!r}"


def error_shape(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case[Any]
) -> None:
    """The schemathesis check around assert_error_shape."""
    assert_error_shape(response.status_code, response.content)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_survives_fuzzing(case: schemathesis.Case[Any], seeded: Seeded) -> None:
    label = f"{case.operation.method.upper()} {case.path}"
    if case.method.upper() not in ROUTED:
        # The coverage phase's undeclared-method probe, with a method the local HTTP server cannot
        # route (see test_an_unrouted_method_is_a_4xx_with_the_error_shape): counted, not sent.
        assert coverage_scenario(case) == CoverageScenario.UNSPECIFIED_HTTP_METHOD, case.method
        seeded.seen.unrouted[case.method.upper()] += 1
        return
    tenant = f"fuzz-{uuid.uuid4().hex}" if label == CREATE else TENANT
    if label == CREATE and seeded.edges is None:
        # No create may touch another tenant's jobs: the seeded edges hold from here on.
        seeded.edges = seeded.store.edges(seeded.job_ids)
    started = time.monotonic()
    try:
        response = case.call(base_url=seeded.stack.url, headers={"X-Tenant": tenant})
        seeded.seen.statuses[label][response.status_code] += 1
        checks = [not_a_server_error, error_shape]
        if coverage_scenario(case) != CoverageScenario.UNSPECIFIED_HTTP_METHOD:
            # The answer is one the document lists for this operation, with the body it describes
            # (an undeclared method is no call of the operation: it gets the 404 of no route).
            checks += [status_code_conformance, response_schema_conformance]
        case.validate_response(response, checks=checks)
        if label == CREATE:
            _nothing_half_written(seeded, tenant, response.status_code)
    finally:
        seeded.seen.seconds[label] += time.monotonic() - started


def _nothing_half_written(seeded: Seeded, tenant: str, status: int) -> None:
    """After a create under `tenant`: a 201 is in the store, a 4xx left no trace there.

    Either way the seeded jobs (tenant "fuzz") keep their edges: a create that names them as
    upstreams is another tenant's and must be refused before its transaction adds anything.
    """
    written = seeded.store.keyed_to(tenant)
    if status == 201:
        seeded.seen.created_tenants.append(tenant)
        assert written, "the store probe found nothing for a created job: it cannot see writes"
    elif 400 <= status < 500:
        seeded.seen.rejected_tenants.append(tenant)
        assert not written, f"a rejected create ({status}) wrote {written}"
    edges = seeded.store.edges(seeded.job_ids)
    assert edges == seeded.edges, f"a create ({status}) changed the seeded edges: {seeded.edges} -> {edges}"


def test_rejected_creates_left_nothing_behind_later(seeded: Seeded) -> None:
    """Anything a rejected create enqueued has run by now: still nothing of theirs."""
    rejected, created = set(seeded.seen.rejected_tenants), set(seeded.seen.created_tenants)
    if not rejected:
        pytest.skip("no create was rejected (the fuzz test did not run)")
    # every message due has been delivered and finished, every workflow ended
    live_stack_at_rest(seeded.store.endpoint_url, DEFAULT_PREFIX)
    items = seeded.store.scan()
    assert not mentioning(items, rejected)
    # The same search finds the accepted creates: it would see a rejected one's leftovers.
    assert not created or mentioning(items, created)


def _around(moment: str) -> tuple[str, str]:
    """A one-hour backfill range ending or starting at `moment`, on the side that keeps it valid."""
    instant = datetime.fromisoformat(moment)
    if instant.year < 2000:
        return moment, (instant + timedelta(hours=1)).isoformat()
    return (instant - timedelta(hours=1)).isoformat(), moment


@pytest.mark.parametrize(
    "moment",
    [
        "0014-01-01T00:00:00+00:00",  # the fuzzer's: backfill wrote run "14-01-01T..." then failed to read it
        "1969-12-31T23:59:59+00:00",  # run ids are Unix milliseconds
        "0001-01-01T00:00:00+01:00",  # overflows when converted to UTC
        "9999-12-31T23:59:59-01:00",  # overflows when converted to UTC
        "9999-12-31T00:00:00+00:00",  # a yearly cron's next tick is in year 10000
    ],
)
def test_an_instant_outside_1970_to_3000_is_a_400_that_writes_nothing(seeded: Seeded, moment: str) -> None:
    """Found by `make fuzz` (POST /api/jobs/{job_id}/backfill, from 0014-01-01T00:00:00Z: a 500
    after a run was written), then probed in every field that takes an instant: each was a 500,
    and PATCH end_at 0001-01-01T00:00:00+01:00 even stored the job so that every GET of it failed.
    """
    job = _create(seeded.stack, {"type": "recurring", "cron_expr": "0 0 1 1 *", "handler": "demo.echo"})
    start, end = _around(moment)
    fresh = f"fuzz-{uuid.uuid4().hex}"
    cron = {"type": "recurring", "cron_expr": "0 0 1 1 *", "handler": "demo.echo"}

    def call(method: str, path: str, tenant: str = TENANT, **kwargs: Any) -> requests.Response:
        url = seeded.stack.url + path
        return requests.request(method, url, headers={"X-Tenant": tenant}, timeout=10, **kwargs)

    answers = [
        call("POST", f"/api/jobs/{job}/backfill", json={"from": start, "to": end}),
        call("PATCH", f"/api/jobs/{job}", json={"start_at": moment}),
        call("PATCH", f"/api/jobs/{job}", json={"end_at": moment}),
        call("GET", f"/api/jobs/{job}/runs", params={"from": moment}),
        call("GET", f"/api/jobs/{job}/runs", params={"to": moment}),
        call("POST", "/api/jobs", fresh, json={"type": "one_off", "handler": "demo.echo", "run_at": moment}),
        call("POST", "/api/jobs", fresh, json={**cron, "start_at": moment}),
        call("POST", "/api/jobs", fresh, json={**cron, "end_at": moment}),
    ]
    for answer in answers:
        assert answer.status_code == 400, (answer.request.method, answer.request.url, answer.text)
        assert_error_shape(answer.status_code, answer.content)
    assert not seeded.store.keyed_to(fresh)
    after = call("GET", f"/api/jobs/{job}")
    assert after.status_code == 200, after.text
    assert after.json()["start_at"] is None and after.json()["end_at"] is None
    assert call("GET", f"/api/jobs/{job}/runs").json()["items"] == []


@pytest.mark.parametrize(
    "method",
    [
        pytest.param(
            method,
            marks=[pytest.mark.xfail(strict=True, reason=UNROUTED_REASON.format(method=method))]
            if method not in ROUTED
            else [],
        )
        for method in ("OPTIONS", "QUERY", "TRACE")
    ],
)
def test_an_unrouted_method_is_a_4xx_with_the_error_shape(seeded: Seeded, method: str) -> None:
    """What the fuzzer's undeclared-method probes found: these methods never reach the API."""
    response = requests.request(
        method, seeded.stack.url + "/api/jobs", headers={"X-Tenant": TENANT}, timeout=10
    )
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:200])
    assert_error_shape(response.status_code, response.content)
