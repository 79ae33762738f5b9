"""The API Lambda handler, invoked with API Gateway REST proxy events, against moto."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import boto3
import pytest

from jobsched.domain import times
from jobsched.domain.records import NewRun
from jobsched.settings import Settings
from jobsched.wiring import build
from tests.integration.conftest import Call


def soon(seconds: int = 3600) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def job_items(settings: Settings) -> int:
    return len(boto3.client("dynamodb").scan(TableName=settings.jobs_table)["Items"])


def test_health_and_openapi(call: Call) -> None:
    assert call("GET", "/api/health") == (200, {"status": "ok", "version": "0.1.0"})
    status, spec = call("GET", "/api/openapi.json")
    assert status == 200 and spec["openapi"].startswith("3.")
    assert {"/api/jobs", "/api/jobs/{job_id}", "/api/health"} <= set(spec["paths"])
    assert "CreateJobRequest" in json.dumps(spec["components"])
    # What bad input gets is what the document says: a 400 ErrorResponse, never powertools' 422.
    assert "HTTPValidationError" not in json.dumps(spec)
    error = {"$ref": "#/components/schemas/ErrorResponse"}
    for path, item in spec["paths"].items():
        for operation in item.values():
            assert "422" not in operation["responses"]
            if path != "/api/health":
                assert operation["responses"]["400"]["content"]["application/json"]["schema"] == error
    schemas = spec["components"]["schemas"]
    assert schemas["ErrorResponse"]["required"] == ["error"]
    assert set(schemas["ErrorDetail"]["required"]) == {"code", "message"}
    status, answer = call("POST", "/api/jobs", {"type": "weekly"})
    assert status == 400 and set(answer) == {"error"} and set(answer["error"]) == {"code", "message"}
    # PATCH: null is offered only where it clears something
    patch = schemas["PatchJobRequest"]["properties"]
    assert patch["max_attempts"]["type"] == "integer" and "anyOf" not in patch["max_attempts"]
    assert {"type": "null"} in patch["max_runs"]["anyOf"]


def test_create_answers_201_and_a_repeat_with_the_same_key_answers_the_same(
    call: Call, aws: Settings
) -> None:
    body = {"type": "one_off", "run_at": soon(), "handler": "demo.echo", "payload": {"x": 1}}
    status, first = call("POST", "/api/jobs", body, {"Idempotency-Key": "abc"})
    assert status == 201 and first["status"] == "SCHEDULED" and first["job_id"].startswith("job_")
    assert first["next_run_at"].endswith("+00:00")
    assert call("POST", "/api/jobs", body, {"Idempotency-Key": "abc"}) == (201, first)
    assert job_items(aws) == 1  # the job, once: it carries its idempotency record
    status, err = call("POST", "/api/jobs", {**body, "payload": {"x": 2}}, {"Idempotency-Key": "abc"})
    assert status == 409 and err["error"]["code"] == "idempotency_key_reused"
    assert job_items(aws) == 1


def test_get_shows_the_job_and_its_runs_and_delete_cancels_it(call: Call) -> None:
    _, created = call("POST", "/api/jobs", {"type": "one_off", "run_at": soon(2), "handler": "demo.echo"})
    status, job = call("GET", f"/api/jobs/{created['job_id']}")
    assert status == 200 and job["type"] == "one_off" and job["handler"] == "demo.echo"
    [run] = job["recent_executions"]  # handed to SQS by the request itself: due in 2 s
    assert set(run) >= {"run_id", "scheduled_for", "attempt", "status", "started_at", "finished_at", "error"}
    assert run["status"] == "PENDING"
    assert call("DELETE", f"/api/jobs/{created['job_id']}") == (
        200,
        {"job_id": created["job_id"], "status": "CANCELLED"},
    )
    assert call("DELETE", f"/api/jobs/{created['job_id']}")[0] == 200
    _, job = call("GET", f"/api/jobs/{created['job_id']}")
    assert job["status"] == "CANCELLED" and job["recent_executions"][0]["status"] == "CANCELLED"


def test_a_tenant_never_sees_another_tenants_job(call: Call) -> None:
    _, created = call(
        "POST",
        "/api/jobs",
        {"type": "recurring", "cron_expr": "0 2 * * *", "handler": "demo.echo"},
        {"X-Tenant": "alice"},
    )
    assert call("GET", f"/api/jobs/{created['job_id']}", headers={"X-Tenant": "alice"})[0] == 200
    for method in ("GET", "DELETE"):
        status, err = call(method, f"/api/jobs/{created['job_id']}", headers={"X-Tenant": "bob"})
        assert status == 404 and err["error"]["code"] == "not_found"
    # the same Idempotency-Key in another tenant is another request
    body = {"type": "recurring", "cron_expr": "0 3 * * *", "handler": "demo.echo"}
    a = call("POST", "/api/jobs", body, {"X-Tenant": "alice", "Idempotency-Key": "same"})[1]
    b = call("POST", "/api/jobs", body, {"X-Tenant": "bob", "Idempotency-Key": "same"})[1]
    assert a["job_id"] != b["job_id"]


def valid(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "one_off", "run_at": soon(), "handler": "demo.echo", "payload": {}}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not ...}


BAD_REQUESTS: list[tuple[str, dict[str, Any], int, str]] = [
    # (name, request, status, a word the message must contain)
    ("malformed JSON", {"raw": '{"type": "one_off",'}, 400, "JSON"),
    ("body is a list", {"body": [1, 2]}, 400, "body"),
    ("missing type", {"body": valid(type=...)}, 400, "type"),
    ("unknown type", {"body": valid(type="weekly")}, 400, "type"),
    ("missing handler", {"body": valid(handler=...)}, 400, "handler"),
    ("unknown handler", {"body": valid(handler="nope.missing")}, 400, "handler"),
    ("handler not dotted", {"body": valid(handler="echo")}, 400, "handler"),
    ("one_off without run_at", {"body": valid(run_at=...)}, 400, "run_at"),
    ("naive run_at", {"body": valid(run_at="2027-01-01T00:00:00")}, 400, "run_at"),
    ("unparseable run_at", {"body": valid(run_at="tomorrow")}, 400, "run_at"),
    ("run_at long past", {"body": valid(run_at="2020-01-01T00:00:00+00:00")}, 400, "run_at"),
    ("one_off with cron_expr", {"body": valid(cron_expr="* * * * *")}, 400, "cron_expr"),
    ("recurring without cron", {"body": valid(type="recurring", run_at=...)}, 400, "cron_expr"),
    (
        "bad cron value",
        {"body": valid(type="recurring", run_at=..., cron_expr="61 * * * *")},
        400,
        "cron_expr",
    ),
    (
        "cron with 4 fields",
        {"body": valid(type="recurring", run_at=..., cron_expr="* * * *")},
        400,
        "cron_expr",
    ),
    (
        "cron that never fires",
        {"body": valid(type="recurring", run_at=..., cron_expr="0 0 30 2 *")},
        400,
        "cron_expr",
    ),
    (
        "unknown timezone",
        {"body": valid(type="recurring", run_at=..., cron_expr="0 2 * * *", timezone="Mars/Base")},
        400,
        "timezone",
    ),
    ("payload not an object", {"body": valid(payload="hello")}, 400, "payload"),
    ("oversized payload", {"body": valid(payload={"blob": "x" * 40_000})}, 400, "payload"),
    ("max_attempts zero", {"body": valid(max_attempts=0)}, 400, "max_attempts"),
    ("max_attempts wrong type", {"body": valid(max_attempts="three")}, 400, "max_attempts"),
    ("negative backoff", {"body": valid(backoff={"initial_seconds": -1})}, 400, "initial_seconds"),
    (
        "backoff max below initial",
        {"body": valid(backoff={"initial_seconds": 10, "max_seconds": 5})},
        400,
        "max_seconds",
    ),
    ("unknown field", {"body": valid(colour="blue")}, 400, "colour"),
    ("depends_on (not enabled)", {"body": valid(depends_on=["job_x"])}, 400, "depends_on"),
    (
        "Idempotency-Key too long",
        {"body": valid(), "headers": {"Idempotency-Key": "k" * 300}},
        400,
        "Idempotency-Key",
    ),
    ("bad X-Tenant", {"body": valid(), "headers": {"X-Tenant": "bad tenant!"}}, 400, "X-Tenant"),
    ("body over 64 KiB", {"raw": json.dumps(valid(payload={"b": "x" * 70_000}))}, 413, "body"),
]


@pytest.mark.parametrize(
    ("name", "request_", "status", "word"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
def test_bad_input_is_a_clear_4xx_and_writes_nothing(
    call: Call, aws: Settings, name: str, request_: dict[str, Any], status: int, word: str
) -> None:
    before = job_items(aws)
    got, answer = call(
        "POST", "/api/jobs", request_.get("body"), request_.get("headers"), raw=request_.get("raw")
    )
    assert got == status, answer
    assert set(answer) == {"error"} and set(answer["error"]) == {"code", "message"}
    assert word.lower() in answer["error"]["message"].lower(), answer
    assert job_items(aws) == before
    assert boto3.client("dynamodb").scan(TableName=aws.runs_table)["Count"] == 0


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/jobs/job_unknown", 404),
        ("DELETE", "/api/jobs/job_unknown", 404),
        ("GET", "/api/nothing", 404),
        ("GET", "/api/jobs/" + "x" * 80, 400),
    ],
)
def test_unknown_ids_and_routes_are_4xx(call: Call, method: str, path: str, status: int) -> None:
    got, answer = call(method, path)
    assert got == status and set(answer["error"]) == {"code", "message"}


def test_recurring_controls_over_http(call: Call) -> None:
    _, job = call(
        "POST", "/api/jobs", {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"}
    )
    job_id = job["job_id"]
    assert call("POST", f"/api/jobs/{job_id}/pause")[1]["status"] == "PAUSED"
    assert call("GET", f"/api/jobs/{job_id}")[1]["paused_at"] is not None
    assert call("POST", f"/api/jobs/{job_id}/resume")[1]["status"] == "SCHEDULED"
    status, edited = call(
        "PATCH", f"/api/jobs/{job_id}", {"cron_expr": "30 * * * *", "overlap_policy": "allow"}
    )
    assert status == 200 and edited["cron_expr"] == "30 * * * *" and edited["overlap_policy"] == "allow"
    status, run = call("POST", f"/api/jobs/{job_id}/run")
    assert status == 202 and run["run_id"].startswith(job_id)
    start = (datetime.now(UTC) - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    status, result = call(
        "POST",
        f"/api/jobs/{job_id}/backfill",
        {"from": start.isoformat(), "to": (start + timedelta(hours=3)).isoformat()},
    )
    assert status == 202 and result["ticks"] == 3 and result["created"] == 3
    # Page through the history two at a time. Besides the manual run and the three backfilled
    # ticks, the live tick loop may already have handed over the job's next :30 tick when the
    # test runs just before the half hour, so the pages are checked by kind, not by total.
    runs: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(10):
        status, page = call("GET", f"/api/jobs/{job_id}/runs?limit=2{cursor}")
        assert status == 200 and len(page["items"]) <= 2
        runs += page["items"]
        if page["next_cursor"] is None:
            break
        cursor = f"&cursor={page['next_cursor']}"
    kinds = [r["kind"] for r in runs]
    assert len({r["run_id"] for r in runs}) == len(runs)
    assert kinds.count("manual") == 1 and kinds.count("backfill") == 3
    assert set(kinds) <= {"manual", "backfill", "scheduled"} and kinds.count("scheduled") <= 1


BAD_CONTROLS: list[tuple[str, str, str, Any, int, str]] = [
    # (name, method, path template, body, status, word)
    ("unknown overlap policy", "POST", "/api/jobs", {"overlap_policy": "sometimes"}, 400, "overlap_policy"),
    ("unknown catchup policy", "POST", "/api/jobs", {"catchup": "most"}, 400, "catchup"),
    ("jitter over the interval", "POST", "/api/jobs",
     {"cron_expr": "*/10 * * * * *", "jitter_seconds": 20}, 400, "jitter"),
    ("end_at before start_at", "POST", "/api/jobs",
     {"start_at": "2027-01-02T00:00:00+00:00", "end_at": "2027-01-01T00:00:00+00:00"}, 400, "end_at"),
    ("backfill from after to", "POST", "/api/jobs/{id}/backfill",
     {"from": "2026-11-02T00:00:00+00:00", "to": "2026-11-01T00:00:00+00:00"}, 400, "before"),
    ("backfill over the cap", "POST", "/api/jobs/{id}/backfill",
     {"from": "2026-01-01T00:00:00+00:00", "to": "2026-11-01T00:00:00+00:00"}, 400, "1000 ticks"),
    ("backfill naive time", "POST", "/api/jobs/{id}/backfill",
     {"from": "2026-11-01T00:00:00", "to": "2026-11-02T00:00:00+00:00"}, 400, "from"),
    ("empty PATCH", "PATCH", "/api/jobs/{id}", {}, 400, "nothing to change"),
    ("PATCH with a bad cron", "PATCH", "/api/jobs/{id}", {"cron_expr": "61 * * * *"}, 400, "cron_expr"),
    # null only clears what a job may lack (see test_patch_null_clears_what_a_job_may_lack)
    ("PATCH max_attempts null", "PATCH", "/api/jobs/{id}", {"max_attempts": None}, 400,
     "max_attempts: must not be null; leave the field out"),
    ("PATCH backoff null", "PATCH", "/api/jobs/{id}", {"backoff": None}, 400, "backoff: must not be null"),
    ("PATCH overlap_policy null", "PATCH", "/api/jobs/{id}", {"overlap_policy": None}, 400,
     "overlap_policy: must not be null"),
    ("PATCH cron_expr null", "PATCH", "/api/jobs/{id}", {"cron_expr": None}, 400,
     "cron_expr: must not be null"),
    ("PATCH handler null", "PATCH", "/api/jobs/{id}", {"handler": None, "name": "x"}, 400,
     "handler: must not be null"),
    ("runs with an unknown status", "GET", "/api/jobs/{id}/runs?status=HAPPY", None, 400, "status"),
    ("runs with a bad cursor", "GET", "/api/jobs/{id}/runs?cursor=xyz", None, 400, "cursor"),
    ("runs with limit 0", "GET", "/api/jobs/{id}/runs?limit=0", None, 400, "limit"),
    ("runs with an unknown kind", "GET", "/api/jobs/{id}/runs?kind=weekly", None, 400,
     "kind: must be one of scheduled, manual, backfill, dependant"),
    ("PATCH oversized payload", "PATCH", "/api/jobs/{id}", {"payload": {"b": "x" * 40_000}}, 400, "payload"),
    ("PATCH backoff max below initial", "PATCH", "/api/jobs/{id}",
     {"backoff": {"initial_seconds": 10, "max_seconds": 5}}, 400, "max_seconds"),
    ("PATCH a cron with 4 fields", "PATCH", "/api/jobs/{id}", {"cron_expr": "* * * *"}, 400, "5 fields"),
    ("PATCH an unknown timezone", "PATCH", "/api/jobs/{id}", {"timezone": "Mars/Base"}, 400, "timezone"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "method", "path", "body", "status", "word"), BAD_CONTROLS, ids=[b[0] for b in BAD_CONTROLS]
)
def test_bad_recurring_controls_are_clear_4xx(
    call: Call, aws: Settings, name: str, method: str, path: str, body: Any, status: int, word: str
) -> None:
    _, job = call(
        "POST", "/api/jobs", {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"}
    )
    if path == "/api/jobs":
        body = {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo", **body}
    before = job_items(aws)
    got, answer = call(method, path.replace("{id}", job["job_id"]), body)
    assert got == status, answer
    assert word.lower() in answer["error"]["message"].lower(), answer
    assert job_items(aws) == before


BAD_REQUESTS_BY_NAME = {name: request for name, request, _, _ in BAD_REQUESTS}


def repeated_field(message: str) -> str | None:
    """The part of an error message that repeats its field ("cron_expr: cron_expr '...'"), if any."""
    for part in message.split("; "):
        field, sep, problem = part.partition(": ")
        name = field.rsplit(".", 1)[-1]
        if sep and re.match(rf"{re.escape(name)}\b", problem, re.IGNORECASE):
            return part
    return None


@pytest.mark.parametrize(
    ("name", "method", "path", "body", "headers"),
    [("POST " + name, "POST", "/api/jobs", r.get("body"), r.get("headers")) for name, r, _, _ in BAD_REQUESTS]
    + [(name, method, path, body, None) for name, method, path, body, _, _ in BAD_CONTROLS],
    ids=[b[0] for b in BAD_REQUESTS] + [b[0] for b in BAD_CONTROLS],
)
def test_an_error_message_names_its_field_once(
    call: Call, name: str, method: str, path: str, body: Any, headers: dict[str, str] | None
) -> None:
    # Given a request the API refuses (each bad request and bad control above)
    _, job = call(
        "POST", "/api/jobs", {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"}
    )
    if path == "/api/jobs" and not name.startswith("POST "):
        body = {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo", **body}
    # When it is sent
    raw = dict(BAD_REQUESTS_BY_NAME.get(name.removeprefix("POST "), {})).get("raw")
    got, answer = call(method, path.replace("{id}", job["job_id"]), body, headers, raw=raw)
    # Then the message says "<field>: <problem>" with the field said once
    assert 400 <= got < 500, answer
    message = answer["error"]["message"]
    assert repeated_field(message) is None, message
    assert not message.startswith(("query.", "path.", "header.")), message


def test_a_payload_is_measured_in_utf8_bytes_of_its_json(call: Call) -> None:
    # Given a payload of 12,000 "é": 24,000 bytes as UTF-8 JSON (72,000 if each were escaped as \u00e9)
    payload = {"s": "é" * 12_000}
    body = {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo", "payload": payload}
    # When it is created (sent as UTF-8, as a client does) and then edited to the same payload again
    status, created = call("POST", "/api/jobs", raw=json.dumps(body, ensure_ascii=False))
    # Then both are accepted under the 32,768-byte limit, and the payload comes back as it was sent
    assert status == 201, created
    edit = json.dumps({"payload": {**payload, "t": "ü"}}, ensure_ascii=False)
    status, edited = call("PATCH", f"/api/jobs/{created['job_id']}", raw=edit)
    assert status == 200, edited
    assert edited["payload"] == {**payload, "t": "ü"}
    # And a payload over the limit in UTF-8 bytes is refused with its UTF-8 size
    over = {**body, "payload": {"s": "é" * 16_400}}
    status, err = call("POST", "/api/jobs", raw=json.dumps(over, ensure_ascii=False))
    assert status == 400 and err["error"]["message"] == (
        "payload: is 32808 bytes as UTF-8 JSON; the limit is 32768"
    ), err


def test_runs_are_listed_by_kind(call: Call) -> None:
    # Given a recurring job with a manual run and two backfilled ticks
    _, job = call(
        "POST", "/api/jobs", {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"}
    )
    job_id = job["job_id"]
    assert call("POST", f"/api/jobs/{job_id}/run")[0] == 202
    start = (datetime.now(UTC) - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    window = {"from": start.isoformat(), "to": (start + timedelta(hours=2)).isoformat()}
    assert call("POST", f"/api/jobs/{job_id}/backfill", window)[0] == 202
    # When its runs are listed by kind
    kinds = {}
    for kind in ("backfill", "manual", "dependant"):
        status, page = call("GET", f"/api/jobs/{job_id}/runs?kind={kind}")
        assert status == 200, page
        kinds[kind] = [r["kind"] for r in page["items"]]
    # Then each listing holds that kind's runs only
    assert kinds == {"backfill": ["backfill", "backfill"], "manual": ["manual"], "dependant": []}


def test_patch_null_clears_what_a_job_may_lack(call: Call) -> None:
    _, job = call(
        "POST",
        "/api/jobs",
        {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo", "name": "n", "max_runs": 5},
    )
    path = f"/api/jobs/{job['job_id']}"
    status, view = call("PATCH", path, {"max_runs": None, "name": None, "timeout_seconds": None})
    assert status == 200, view
    assert view["max_runs"] is None and view["name"] is None and view["max_attempts"] == 3


def test_patch_of_a_cancelled_job_and_pause_of_a_finished_one_off_are_conflicts(
    call: Call, aws: Settings
) -> None:
    _, job = call(
        "POST", "/api/jobs", {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"}
    )
    call("DELETE", f"/api/jobs/{job['job_id']}")
    status, err = call("PATCH", f"/api/jobs/{job['job_id']}", {"payload": {"a": 1}})
    assert status == 409 and "CANCELLED" in err["error"]["message"]
    _, one = call("POST", "/api/jobs", {"type": "one_off", "run_at": soon(), "handler": "demo.echo"})
    boto3.client("dynamodb").update_item(  # the one-off ran: its job completed
        TableName=aws.jobs_table,
        Key={"PK": {"S": f"JOB#{one['job_id']}"}, "SK": {"S": "META"}},
        UpdateExpression="SET #s = :c REMOVE next_run_at, due_key",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":c": {"S": "COMPLETED"}},
    )
    status, err = call("POST", f"/api/jobs/{one['job_id']}/pause")
    assert status == 409 and "nothing to pause" in err["error"]["message"]


def test_a_dag_over_http_and_its_bad_dependencies(call: Call) -> None:
    run_at = soon()
    _, a = call(
        "POST", "/api/jobs", {"type": "one_off", "run_at": run_at, "handler": "demo.echo", "name": "a"}
    )
    _, b = call(
        "POST", "/api/jobs", {"type": "dependent", "depends_on": [a["job_id"]], "handler": "demo.echo"}
    )
    assert b["next_run_at"] is None and b["status"] == "SCHEDULED"
    status, graph = call("GET", f"/api/jobs/{a['job_id']}/graph")
    assert status == 200 and graph["edges"] == [{"upstream": a["job_id"], "dependant": b["job_id"]}]
    _, other = call(
        "POST", "/api/jobs", {"type": "one_off", "run_at": run_at, "handler": "demo.echo"}, {"X-Tenant": "x"}
    )
    for body, word in [
        ({"depends_on": ["job_missing"]}, "unknown job"),
        ({"depends_on": [other["job_id"]]}, "unknown job"),
        ({"depends_on": []}, "depends_on"),
        ({"depends_on": [a["job_id"], a["job_id"]]}, "twice"),
        ({"depends_on": [a["job_id"]], "run_at": run_at}, "no time of its own"),
    ]:
        status, err = call("POST", "/api/jobs", {"type": "dependent", "handler": "demo.echo", **body})
        assert status == 400 and word in err["error"]["message"], err
    status, err = call("PATCH", f"/api/jobs/{b['job_id']}", {"depends_on": [b["job_id"]]})
    assert status == 400 and "itself" in err["error"]["message"]
    _, c = call(
        "POST", "/api/jobs", {"type": "dependent", "depends_on": [b["job_id"]], "handler": "demo.echo"}
    )
    status, err = call("PATCH", f"/api/jobs/{b['job_id']}", {"depends_on": [c["job_id"]]})
    assert status == 400 and "cycle" in err["error"]["message"] and c["job_id"] in err["error"]["message"]


def test_the_graph_of_an_upstream_shows_the_other_upstreams_of_its_dependants(call: Call) -> None:
    # Given a and b, both upstreams of c
    ids = {}
    for name in ("a", "b"):
        _, made = call("POST", "/api/jobs", {"type": "one_off", "run_at": soon(), "handler": "demo.echo"})
        ids[name] = made["job_id"]
    _, c = call(
        "POST", "/api/jobs", {"type": "dependent", "depends_on": [ids["a"], ids["b"]], "handler": "demo.echo"}
    )
    ids["c"] = c["job_id"]
    # When the graph of a is asked for
    status, graph = call("GET", f"/api/jobs/{ids['a']}/graph")
    # Then it shows every edge of every node it shows: c's other upstream b included
    assert status == 200 and {n["job_id"] for n in graph["nodes"]} == set(ids.values())
    assert {(e["upstream"], e["dependant"]) for e in graph["edges"]} == {
        (ids["a"], ids["c"]),
        (ids["b"], ids["c"]),
    }
    assert graph["truncated"] is False


def test_the_graph_stops_at_max_graph_nodes_and_says_it_was_truncated(
    call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an upstream with four dependants, and a bound of three jobs per graph
    _, up = call("POST", "/api/jobs", {"type": "one_off", "run_at": soon(), "handler": "demo.echo"})
    for _ in range(4):
        call("POST", "/api/jobs", {"type": "dependent", "depends_on": [up["job_id"]], "handler": "demo.echo"})
    monkeypatch.setattr("jobsched.services.dag.MAX_GRAPH_NODES", 3)
    # When its graph is asked for
    status, graph = call("GET", f"/api/jobs/{up['job_id']}/graph")
    # Then it holds three jobs, the upstream among them, its edges among them, and says it is cut
    assert status == 200 and len(graph["nodes"]) == 3 and graph["truncated"] is True
    shown = {n["job_id"] for n in graph["nodes"]}
    assert up["job_id"] in shown
    assert all(e["upstream"] in shown and e["dependant"] in shown for e in graph["edges"])
    assert len(graph["edges"]) == 2


def test_the_graph_in_a_chosen_period_reads_each_nodes_run_of_that_period_from_dynamodb(
    call: Call, aws: Settings
) -> None:
    # Given an hourly root and its dependant with seven past periods in the runs table: in the oldest
    # the dependant's run is UPSTREAM_FAILED (as the failure workflow writes it), in the others PENDING
    runs = build(aws).runs
    _, root = call(
        "POST", "/api/jobs", {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"}
    )
    _, down = call(
        "POST", "/api/jobs", {"type": "dependent", "depends_on": [root["job_id"]], "handler": "demo.echo"}
    )
    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    hours = [top - timedelta(hours=h) for h in range(1, 8)]
    for sf in hours:
        runs.put_pending(job_id=root["job_id"], tenant="default", scheduled_for=sf, now=sf)
    for sf in hours[:-1]:
        runs.put_pending(job_id=down["job_id"], tenant="default", scheduled_for=sf, now=sf, kind="dependant")
    runs.mark_upstream_failed(
        NewRun(down["job_id"], "default", times.stored(hours[-1]), "dependant"),
        reason="upstream dead",
        now=top,
    )
    # When the graph is asked for without a period, the oldest is not among its periods
    _, recent = call("GET", f"/api/jobs/{down['job_id']}/graph")
    assert (
        times.iso(hours[-1]) not in {p["period"] for p in recent["periods"]} and len(recent["periods"]) == 5
    )
    # When it is asked for in the oldest period, then each node's run of that period is answered
    status, graph = call("GET", f"/api/jobs/{down['job_id']}/graph?period={quote(hours[-1].isoformat())}")
    assert status == 200, graph
    assert graph["periods"] == [
        {
            "period": times.iso(hours[-1]),
            "status": {root["job_id"]: "PENDING", down["job_id"]: "UPSTREAM_FAILED"},
        }
    ]
    # And a malformed period is a 400 naming it; another tenant's job a 404
    status, err = call("GET", f"/api/jobs/{down['job_id']}/graph?period=last%20tuesday")
    assert status == 400 and "period" in err["error"]["message"]
    status, err = call("GET", f"/api/jobs/{down['job_id']}/graph?period=once", headers={"X-Tenant": "other"})
    assert status == 404 and err["error"]["code"] == "not_found"
