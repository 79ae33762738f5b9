"""A job's `alerts` policy on create, GET and PATCH, and the 400s that name its fields, over the fakes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.test_jobs_listing_api import A, api, submit
from tests.unit.api.test_tenancy import call
from tests.unit.services.conftest import World


def test_a_job_created_with_alerts_shows_them_and_a_job_without_shows_none(world: World) -> None:
    # Given a job created with an alert policy, and one created without
    app = api(world)
    alerting = submit(app, alerts={"on": ["failed", "late"], "late_after_seconds": 120})
    quiet = submit(app)
    # When both are read back
    _, shown = call(app, "GET", f"/api/jobs/{alerting}", headers=A)
    _, plain = call(app, "GET", f"/api/jobs/{quiet}", headers=A)
    # Then the first answers its policy as given, and the second none
    assert shown["alerts"] == {"on": ["failed", "late"], "late_after_seconds": 120}
    assert plain["alerts"] is None


def test_patch_replaces_the_alert_policy_and_null_clears_it(world: World) -> None:
    # Given a job that alerts on failures
    app = api(world)
    job_id = submit(app, alerts={"on": ["failed"]})
    # When its policy is replaced
    status, _ = call(
        app, "PATCH", f"/api/jobs/{job_id}", headers=A, body={"alerts": {"on": ["missed", "skipped"]}}
    )
    # Then the job answers the new one
    assert status == 200
    assert call(app, "GET", f"/api/jobs/{job_id}", headers=A)[1]["alerts"] == {
        "on": ["missed", "skipped"],
        "late_after_seconds": None,
    }
    # When it is cleared with null
    status, _ = call(app, "PATCH", f"/api/jobs/{job_id}", headers=A, body={"alerts": None})
    # Then the job alerts on nothing
    assert status == 200 and call(app, "GET", f"/api/jobs/{job_id}", headers=A)[1]["alerts"] is None


@pytest.mark.parametrize(
    ("alerts", "field"),
    [
        ({"on": ["exploded"]}, "alerts.on"),
        ({"on": []}, "alerts.on"),
        ({"on": ["failed", "failed"]}, "alerts.on"),
        ({"on": ["late"]}, "alerts.late_after_seconds"),
        ({"on": ["late"], "late_after_seconds": 0}, "alerts.late_after_seconds"),
        ({"on": ["failed"], "late_after_seconds": 60}, "alerts.late_after_seconds"),
        ({"on": ["failed"], "loud": True}, "alerts.loud"),
    ],
)
def test_a_bad_alert_policy_is_a_400_naming_its_field(
    world: World, alerts: dict[str, Any], field: str
) -> None:
    # Given the API
    app = api(world)
    body = {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo", "alerts": alerts}
    # When a job is created, or edited, with a bad alert policy
    created = call(app, "POST", "/api/jobs", headers=A, body=body)
    edited = call(app, "PATCH", f"/api/jobs/{submit(app)}", headers=A, body={"alerts": alerts})
    # Then each is a 400 whose message names the field
    for status, answer in (created, edited):
        assert status == 400, answer
        assert answer["error"]["message"].startswith(field), answer
