"""Input hardening: what no JSON consumer reads the same way, and names that could forge or smuggle, are 400s.

Requests go through the resolver (the API's own body parsing and validation) over the fakes; each
answer names the field, and nothing is stored.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from jobsched import constants as c
from jobsched.api import build_app
from jobsched.domain.commands import MAX_PAYLOAD_DEPTH, MAX_SAFE_INTEGER
from jobsched.local import events
from jobsched.local.lambdas import LambdaContext
from tests.unit.services.conftest import T0, World

RUN_AT = (T0 + timedelta(hours=1)).isoformat()


def app_of(world: World) -> APIGatewayRestResolver:
    return build_app(world.svc.job_service, world.svc.failures, world.svc.schedule, tenant_source="header")


def post(world: World, raw: str, path: str = "/api/jobs") -> tuple[int, dict[str, Any]]:
    """POST `raw` (JSON text, as a client wrote it) to `path` as tenant t1."""
    event = events.api_gateway_event(
        "POST", path, {"Content-Type": "application/json", c.TENANT_HEADER: "t1"}, raw.encode()
    )
    answer = app_of(world).resolve(event, LambdaContext("jobsched-api"))
    return answer["statusCode"], json.loads(answer["body"])


def one_off(payload_json: str = "{}", **fields: Any) -> str:
    body = {"type": "one_off", "handler": "demo.echo", "run_at": RUN_AT, **fields}
    return json.dumps(body)[:-1] + f', "payload": {payload_json}}}'


def nested(depth: int) -> str:
    """A payload nested `depth` levels deep (the payload object itself is level 1)."""
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


def assert_refused(world: World, status: int, body: dict[str, Any], field: str) -> None:
    assert status == 400, body
    assert body["error"]["code"] == "validation_error"
    assert field in body["error"]["message"], body
    assert world.jobs.jobs == {}


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ('{"x": NaN}', "payload.x"),
        ('{"x": Infinity}', "payload.x"),
        ('{"x": [1, -Infinity]}', "payload.x[1]"),
        (f'{{"x": {MAX_SAFE_INTEGER + 1}}}', "payload.x"),
        (f'{{"x": {{"y": {-(MAX_SAFE_INTEGER + 1)}}}}}', "payload.x.y"),
        ('{"x": ' + "9" * 5000 + "}", "body"),  # past Python's 4,300-digit parse limit
        (nested(MAX_PAYLOAD_DEPTH + 1), "payload"),
        (nested(5000), "body"),  # past Python's recursion limit
    ],
    ids=[
        "nan",
        "infinity",
        "minus-infinity-in-list",
        "2**53",
        "minus-2**53-nested",
        "5000-digits",
        "depth+1",
        "depth-5000",
    ],
)
def test_a_payload_no_json_consumer_reads_alike_is_a_400_naming_where(
    world: World, payload: str, where: str
) -> None:
    # Given a job whose payload holds NaN/Infinity, an integer past 2**53 - 1, or nests too deep
    # When it is submitted
    status, body = post(world, one_off(payload))
    # Then it is a 400 naming the place (the body, when it is no JSON at all), and nothing is stored
    assert_refused(world, status, body, where)


def test_a_payload_at_the_limits_is_accepted(world: World) -> None:
    # Given a payload nested exactly MAX_PAYLOAD_DEPTH deep, with ±(2**53 - 1) and plain floats
    deep = nested(MAX_PAYLOAD_DEPTH - 1)
    payload = f'{{"max": {MAX_SAFE_INTEGER}, "min": {-MAX_SAFE_INTEGER}, "f": 1.5e300, "deep": {deep}}}'
    # When it is submitted, then it is stored
    status, body = post(world, one_off(payload))
    assert status == 201, body


def test_nan_in_any_body_field_is_a_400(world: World) -> None:
    # Given a body whose backoff (a float) is NaN
    status, body = post(
        world,
        one_off(backoff={"initial_seconds": 1}).replace('"initial_seconds": 1', '"initial_seconds": NaN'),
    )
    # Then it is refused naming the field
    assert_refused(world, status, body, "initial_seconds")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"non_retryable_errors": ["Timeout Error"]}, "non_retryable_errors.0"),
        ({"non_retryable_errors": ["x" * 201]}, "non_retryable_errors.0"),
        ({"non_retryable_errors": ["Bad\nName"]}, "non_retryable_errors.0"),
        ({"non_retryable_errors": [""]}, "non_retryable_errors.0"),
        ({"name": "nightly\x00report"}, "name"),
        ({"name": "nightly\x1b[2Jreport"}, "name"),
        ({"name": "line\u0085break"}, "name"),
    ],
    ids=[
        "error-name-space",
        "error-name-201",
        "error-name-newline",
        "error-name-empty",
        "name-nul",
        "name-escape",
        "name-nel",
    ],
)
def test_bad_error_names_and_control_characters_in_names_are_400s(
    world: World, fields: dict[str, Any], field: str
) -> None:
    status, body = post(world, one_off(**fields))
    assert_refused(world, status, body, field)


def test_an_ordinary_name_and_dotted_error_names_are_accepted(world: World) -> None:
    fields = {
        "name": "nightly report, été ✓",
        "non_retryable_errors": ["TimeoutError", "botocore.exceptions.ClientError"],
    }
    status, body = post(world, one_off(**fields))
    assert status == 201, body


@pytest.mark.parametrize(
    "upstream",
    ["job_../../x", "job_" + "a" * 61, "job_a b", "", "job_\u00e9"],
    ids=["path", "65-chars", "space", "empty", "non-ascii"],
)
def test_a_depends_on_id_outside_the_pattern_or_cap_is_a_400(world: World, upstream: str) -> None:
    status, body = post(
        world, json.dumps({"type": "dependent", "handler": "demo.echo", "depends_on": [upstream]})
    )
    assert_refused(world, status, body, "depends_on.0")


@pytest.mark.parametrize(
    ("start_at", "cron_expr"),
    [("2999-12-31T23:59:00+00:00", "0 0 1 1 *"), ("2999-06-01T00:00:00+00:00", "0 0 29 2 *")],
    ids=["yearly", "leap-day"],
)
def test_a_schedule_whose_first_tick_is_in_the_year_3000_is_refused(
    world: World, start_at: str, cron_expr: str
) -> None:
    # Given a recurring job starting late in 2999 whose first tick is in 3000 (or later)
    raw = json.dumps(
        {"type": "recurring", "handler": "demo.echo", "cron_expr": cron_expr, "start_at": start_at}
    )
    # When it is submitted, then it is refused naming start_at, and nothing is stored
    status, body = post(world, raw)
    assert_refused(world, status, body, "start_at")


def test_a_schedule_whose_first_tick_is_just_before_3000_is_accepted(world: World) -> None:
    raw = json.dumps(
        {
            "type": "recurring",
            "handler": "demo.echo",
            "cron_expr": "59 23 31 12 *",
            "start_at": "2999-12-31T00:00:00+00:00",
        }
    )
    status, body = post(world, raw)
    assert status == 201, body
    assert body["next_run_at"].startswith("2999-12-31T23:59")
