"""The operator console, as an operator uses it: in chromium, against a real local stack.

Each test states one thing a person does (create, pause, replay, open a DAG, use only the keyboard)
and checks what the page then shows with Playwright's auto-waiting `expect`, never a sleep. The
last tests run axe-core on every page and keep one screenshot per page under docs/console/.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from typing import Any
from urllib.parse import quote

import pytest
import requests
from playwright.sync_api import expect

from tests.browser.conftest import DESKTOP, PHONE, SCREENSHOTS, TENANT, VENDOR, create, open_console
from tests.e2e.conftest import Stack

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

AS_TENANT = {"X-Tenant": TENANT}
NEVER_SOON = "0 0 1 1 *"  # a recurring job that stays SCHEDULED for the whole test


def raw_get(stack: Stack, path: str) -> tuple[int, str, bytes]:
    """GET `path` byte for byte (http.client does not normalise `..` away as a browser would)."""
    host, port = stack.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def poll(fetch: Any, done: Any, timeout: float = 30.0) -> Any:
    """Call fetch() until done(value) holds (the API side of a test; the page side uses expect)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; last value {value}")
        time.sleep(0.25)


def dead_letter_of(stack: Stack, job_id: str) -> dict[str, Any]:
    """The dead letter of a job whose one attempt fails (demo.fail, max_attempts 1), once it exists."""
    items = poll(
        lambda: stack.get(f"/api/dead-letter?job_id={job_id}", **AS_TENANT).json()["items"],
        lambda found: len(found) > 0,
        timeout=60,
    )
    return dict(items[0])


def failing_job(stack: Stack, name: str, *, in_seconds: int = 0) -> str:
    """A one-off whose only attempt fails (`in_seconds` from now: time to create its dependants first)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + in_seconds))
    return create(
        stack, {"type": "one_off", "name": name, "handler": "demo.fail", "run_at": now, "max_attempts": 1}
    )


# -- serving --------------------------------------------------------------------------------------
def test_the_stack_serves_the_console_files_with_their_content_types(console_stack: Stack) -> None:
    status, kind, body = raw_get(console_stack, "/console")
    assert (status, kind) == (200, "text/html; charset=utf-8")
    assert b'<script type="module" src="app.js">' in body
    assert raw_get(console_stack, "/console/")[0] == 200
    assert raw_get(console_stack, "/console/app.js")[1] == "text/javascript; charset=utf-8"
    assert raw_get(console_stack, "/console/app.css")[1] == "text/css; charset=utf-8"


@pytest.mark.parametrize(
    "path",
    [
        "/console/../pyproject.toml",
        "/console/..%2f..%2fpyproject.toml",
        "/console/%2e%2e/local/stack.py",
        "/console/__init__.py",
        "/console/./app.js/..",
        "/console//etc/passwd",
        "/console/nested/app.js",
        "/console/missing.js",
    ],
)
def test_no_path_outside_the_console_files_is_served(console_stack: Stack, path: str) -> None:
    status, _, body = raw_get(console_stack, path)
    assert status == 404
    assert json.loads(body)["error"]["code"] == "not_found"


# -- scenarios ------------------------------------------------------------------------------------
def test_a_job_created_through_the_form_shows_its_run(page: Any) -> None:
    name = f"form-{uuid.uuid4().hex[:8]}"
    open_console(page, "#/jobs")
    form = page.locator("#create-form")
    form.get_by_label("Name").fill(name)
    form.get_by_label("Handler").fill("demo.echo")
    form.get_by_label("Payload (JSON)").fill('{"hello": "console"}')
    form.get_by_role("button", name="Create job").click()

    expect(page.get_by_role("heading", level=1)).to_have_text(name)
    expect(page.locator("#runs tbody .badge").first).to_have_text("SUCCEEDED", timeout=30_000)


CRON_IN_WORDS = {
    "*/5 * * * *": "every 5 minutes",
    "0 9 * * 1-5": "at 09:00 on Monday to Friday",
    "30 2 * * *": "at 02:30 every day",
    "15 * * * *": "every hour at minute 15",
    "0 */6 * * *": "every 6 hours at minute 0",
    "*/10 * * * * *": "every 10 seconds, every minute",
    "0 0 1 1 *": "at 00:00 on day 1 of the month in January",
    "@daily": "every day at 00:00",
    "5 4 L * *": "5 4 L * *",  # a shape the describer does not know is shown as written
}


def test_cron_expressions_read_in_words(page: Any) -> None:
    open_console(page, "#/health")
    described = page.evaluate(
        "async (exprs) => { const { describeCron } = await import('/console/cron.js');"
        " return Object.fromEntries(exprs.map((e) => [e, describeCron(e)])); }",
        list(CRON_IN_WORDS),
    )
    assert described == CRON_IN_WORDS


def test_run_now_twice_draws_the_lateness_and_duration_chart(page: Any, console_stack: Stack) -> None:
    job_id = create(console_stack, {"type": "recurring", "cron_expr": NEVER_SOON, "handler": "demo.echo"})
    open_console(page, f"#/jobs/{job_id}")
    expect(page.locator("#trend")).to_contain_text("after two finished runs")
    for count in (1, 2):
        page.get_by_role("button", name="Run now").click()
        expect(page.locator("#runs tbody tr .badge.s-SUCCEEDED")).to_have_count(count, timeout=30_000)
    expect(page.locator("#trend svg polyline")).to_have_count(2)
    expect(page.locator("#job-stats")).to_contain_text("2 run(s): lateness p50")


def test_the_health_page_shows_the_tenants_lateness_p99_and_due_backlog(
    page: Any, console_stack: Stack
) -> None:
    # Given a job of the console's tenant that has run once (run now)
    job_id = create(console_stack, {"type": "recurring", "cron_expr": NEVER_SOON, "handler": "demo.echo"})
    open_console(page, f"#/jobs/{job_id}")
    page.get_by_role("button", name="Run now").click()
    expect(page.locator("#runs tbody tr .badge.s-SUCCEEDED")).to_have_count(1, timeout=30_000)
    # When the health page opens, then it shows GET /api/stats' figures for the tenant
    stats = console_stack.get("/api/stats", **AS_TENANT).json()
    open_console(page, "#/health")
    expect(page.locator("#health-lateness")).to_contain_text(f"over {stats['runs']} recent run(s)")
    expect(page.locator("#health-backlog")).to_contain_text(
        "none: every due tick" if stats["backlog"] == 0 else "overdue"
    )
    # And its jobs by status are the tenant-wide counts (GET /api/jobs/counts), not a page's
    scheduled = console_stack.get("/api/jobs/counts", **AS_TENANT).json()["counts"]["SCHEDULED"]
    expect(page.locator("#health-counts")).to_contain_text(f"SCHEDULED {scheduled}")


def test_the_job_page_lists_the_next_five_fire_times(page: Any, console_stack: Stack) -> None:
    job_id = create(console_stack, {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"})
    expected = console_stack.get(f"/api/jobs/{job_id}", **AS_TENANT).json()["next_runs"]
    open_console(page, f"#/jobs/{job_id}")
    times = page.locator("#fire-times li time")
    expect(times).to_have_count(5)
    assert [times.nth(i).get_attribute("datetime") for i in range(5)] == expected


# An instant (ms) as a datetime-local input takes it: the browser's own wall clock.
LOCAL_INPUT = """(ms) => { const d = new Date(ms); const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`
    + `T${p(d.getHours())}:${p(d.getMinutes())}:00`; }"""


def test_a_backfill_is_previewed_then_confirmed(page: Any, console_stack: Stack) -> None:
    # Given an hourly job and the range [3 h ago, 1 h ago) on whole hours: two ticks
    job_id = create(console_stack, {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"})
    hour = int(time.time() // 3600) * 3600
    open_console(page, f"#/jobs/{job_id}")
    page.fill("#backfill-form input[name=from]", page.evaluate(LOCAL_INPUT, (hour - 3 * 3600) * 1000))
    page.fill("#backfill-form input[name=to]", page.evaluate(LOCAL_INPUT, (hour - 3600) * 1000))
    # When it is previewed, the page lists the two ticks and nothing is written
    expect(page.locator("#backfill-confirm")).to_be_disabled()
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#backfill-count")).to_contain_text("2 tick(s)")
    expect(page.locator("#backfill-preview li")).to_have_count(2)
    runs = console_stack.get(f"/api/jobs/{job_id}/runs?kind=backfill", **AS_TENANT).json()["items"]
    assert runs == []
    # Then Confirm creates their runs
    page.get_by_role("button", name="Confirm backfill").click()
    expect(page.locator("#backfill-result")).to_contain_text("2 run(s) created")
    expect(page.locator("#backfill-confirm")).to_be_disabled()
    runs = console_stack.get(f"/api/jobs/{job_id}/runs?kind=backfill", **AS_TENANT).json()["items"]
    assert sorted(r["scheduled_for"][:13] for r in runs) == [
        time.strftime("%Y-%m-%dT%H", time.gmtime(hour - 3 * 3600)),
        time.strftime("%Y-%m-%dT%H", time.gmtime(hour - 2 * 3600)),
    ]


def test_a_backfill_the_api_refuses_shows_its_message(page: Any, console_stack: Stack) -> None:
    job_id = create(console_stack, {"type": "recurring", "cron_expr": "0 * * * *", "handler": "demo.echo"})
    now = time.time()
    open_console(page, f"#/jobs/{job_id}")
    page.fill("#backfill-form input[name=from]", page.evaluate(LOCAL_INPUT, (now - 3600) * 1000))
    page.fill("#backfill-form input[name=to]", page.evaluate(LOCAL_INPUT, (now + 7200) * 1000))
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#backfill-result [role=alert]")).to_contain_text("to: a backfill covers the past")
    expect(page.locator("#backfill-confirm")).to_be_disabled()


def test_an_edit_saves_the_changed_fields_and_a_400_shows_next_to_its_field(
    page: Any, console_stack: Stack
) -> None:
    job_id = create(console_stack, {"type": "recurring", "cron_expr": NEVER_SOON, "handler": "demo.echo"})
    open_console(page, f"#/jobs/{job_id}")
    form = page.locator("#edit-form")
    # A cron the API refuses: its message sits by the Cron field, which is marked invalid
    form.locator("input[name=cron_expr]").fill("every day")
    form.get_by_role("button", name="Save changes").click()
    expect(page.locator("#edit-error-cron_expr")).to_contain_text("cron_expr: must have 5 fields")
    expect(form.locator("input[name=cron_expr]")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#edit-error-timezone")).to_have_text("")
    # Then a valid cron, a new timezone and payload are saved, and the definition shows them
    form.locator("input[name=cron_expr]").fill("30 6 * * *")
    form.locator("input[name=timezone]").fill("Europe/Paris")
    form.locator("textarea[name=payload]").fill('{"region": "eu"}')
    form.get_by_role("button", name="Save changes").click()
    expect(page.locator("dl.def")).to_contain_text("30 6 * * *")
    expect(page.locator("dl.def")).to_contain_text("Europe/Paris")
    expect(page.locator("#edit-error-cron_expr")).to_have_text("")
    job = console_stack.get(f"/api/jobs/{job_id}", **AS_TENANT).json()
    edited = (job["cron_expr"], job["timezone"], job["payload"])
    assert edited == ("30 6 * * *", "Europe/Paris", {"region": "eu"})
    assert all(t.endswith(("04:30:00.000+00:00", "05:30:00.000+00:00")) for t in job["next_runs"])


def test_pause_and_resume_from_the_list_and_from_the_job(page: Any, console_stack: Stack) -> None:
    name = f"pause-{uuid.uuid4().hex[:8]}"
    job_id = create(
        console_stack, {"type": "recurring", "name": name, "cron_expr": NEVER_SOON, "handler": "demo.echo"}
    )
    open_console(page, "#/jobs")
    page.get_by_role("button", name=f"Pause {name}").click()
    expect(page.get_by_role("button", name=f"Resume {name}")).to_be_visible()
    assert console_stack.get(f"/api/jobs/{job_id}", **AS_TENANT).json()["status"] == "PAUSED"

    open_console(page, f"#/jobs/{job_id}")
    toggle = page.locator("#pause-toggle")
    expect(toggle).to_have_text("Resume")
    toggle.click()
    expect(toggle).to_have_text("Pause")
    expect(page.locator("dl.def .badge").first).to_have_text("SCHEDULED")
    assert console_stack.get(f"/api/jobs/{job_id}", **AS_TENANT).json()["status"] == "SCHEDULED"


def test_a_dead_letter_is_replayed_from_its_list(page: Any, console_stack: Stack) -> None:
    job_id = failing_job(console_stack, f"dead-{uuid.uuid4().hex[:8]}")
    run_id = dead_letter_of(console_stack, job_id)["run_id"]

    open_console(page, "#/dead-letters")
    row = page.locator("#dead-letters tr", has=page.locator(f'button[data-run="{run_id}"]'))
    expect(row).to_contain_text("demo.fail always fails")  # the last error, as the API gives it
    replay = page.locator(f'button[data-run="{run_id}"]')
    replay.click()
    expect(replay).to_have_text("Replayed")
    expect(replay).to_be_disabled()
    # The replay is a fresh attempt series on the same run: a second attempt appears.
    poll(
        lambda: console_stack.get(f"/api/runs/{run_id}", **AS_TENANT).json(),
        lambda run: len(run.get("attempts") or []) >= 2,
        timeout=60,
    )


def test_ticked_dead_letters_are_replayed_together_each_with_its_result(
    page: Any, console_stack: Stack
) -> None:
    # Given three dead letters
    jobs = [failing_job(console_stack, f"bulk-dead-{uuid.uuid4().hex[:8]}") for _ in range(3)]
    runs = [dead_letter_of(console_stack, job_id)["run_id"] for job_id in jobs]
    open_console(page, "#/dead-letters")
    for run_id in runs:
        expect(page.locator(f'button[data-run="{run_id}"]')).to_be_visible()
    # When two are ticked and replayed together
    for run_id in runs[:2]:
        page.get_by_role("checkbox", name=f"Select {run_id}").check()
    page.get_by_role("button", name="Replay selected").click()
    # Then each has its own result and its row's Replay is done; the third is left alone
    results = page.locator("#bulk-replay-results li")
    expect(results).to_have_count(2)
    for run_id in runs[:2]:
        result = page.locator(f'#bulk-replay-results li[data-run="{run_id}"]')
        expect(result).to_have_attribute("data-ok", "true")
        expect(result).to_contain_text("replayed")
        expect(page.locator(f'button[data-run="{run_id}"]')).to_have_text("Replayed")
    expect(page.locator(f'button[data-run="{runs[2]}"]')).to_have_text("Replay")
    for run_id in runs[:2]:
        poll(
            lambda r=run_id: console_stack.get(f"/api/runs/{r}", **AS_TENANT).json(),
            lambda run: len(run.get("attempts") or []) >= 2,
            timeout=60,
        )
    assert len(console_stack.get(f"/api/runs/{runs[2]}", **AS_TENANT).json()["attempts"]) == 1


def test_a_dead_letter_is_replayed_from_its_run_page_and_again_after_it_fails_again(
    page: Any, console_stack: Stack
) -> None:
    job_id = failing_job(console_stack, f"rerun-{uuid.uuid4().hex[:8]}")
    run_id = dead_letter_of(console_stack, job_id)["run_id"]
    for series in (2, 3):  # demo.fail dead-letters each replay again: each one is a new replay
        poll(
            lambda: console_stack.get(f"/api/runs/{run_id}", **AS_TENANT).json(),
            lambda run, n=series: run["status"] == "DEAD_LETTER" and len(run["attempts"]) == n - 1,
            timeout=60,
        )
        open_console(page, f"#/runs/{run_id}")
        page.get_by_role("button", name="Replay").click()
        poll(
            lambda: console_stack.get(f"/api/runs/{run_id}", **AS_TENANT).json(),
            lambda run, n=series: len(run.get("attempts") or []) >= n,
            timeout=60,
        )


def test_bulk_select_pauses_the_chosen_jobs_and_no_other(page: Any, console_stack: Stack) -> None:
    names = [f"bulk-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    for name in names:
        create(
            console_stack,
            {"type": "recurring", "name": name, "cron_expr": NEVER_SOON, "handler": "demo.echo"},
        )
    open_console(page, "#/jobs")
    page.get_by_label(f"Select {names[0]}").check()
    page.get_by_label(f"Select {names[1]}").check()
    page.get_by_role("button", name="Pause selected").click()
    expect(page.get_by_role("button", name=f"Resume {names[0]}")).to_be_visible()
    expect(page.get_by_role("button", name=f"Resume {names[1]}")).to_be_visible()
    expect(page.get_by_role("button", name=f"Pause {names[2]}")).to_be_visible()


def test_filters_narrow_the_list_and_the_counts_per_status_cover_every_matching_job(
    page: Any, console_stack: Stack
) -> None:
    # Given three jobs under one fresh name prefix: a tagged one, a paused one and a one-off
    prefix = f"filt-{uuid.uuid4().hex[:6]}-"
    tagged = {"type": "recurring", "cron_expr": NEVER_SOON, "handler": "demo.echo", "tags": {"env": "prod"}}
    create(console_stack, {**tagged, "name": prefix + "tagged"})
    paused = create(
        console_stack,
        {"type": "recurring", "name": prefix + "paused", "cron_expr": NEVER_SOON, "handler": "demo.echo"},
    )
    assert console_stack.post(f"/api/jobs/{paused}/pause", None, **AS_TENANT).status_code == 200
    later = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 86_400))
    create(
        console_stack, {"type": "one_off", "name": prefix + "once", "run_at": later, "handler": "demo.echo"}
    )
    open_console(page, "#/jobs")
    rows = page.locator("#jobs tbody tr")
    main = page.locator("main#main")
    filters = page.locator("#jobs-filter")
    # When the name prefix is filtered on, then the list and the counts hold those three jobs only
    filters.get_by_label("Name starts with").fill(prefix)
    filters.get_by_role("button", name="Filter").click()
    expect(main).to_have_attribute("data-route", f"#/jobs?name_prefix={prefix}")
    expect(rows).to_have_count(3)
    expect(page.locator("#status-counts")).to_have_text("All matching jobs: 2 SCHEDULED · 1 PAUSED")
    # A type narrows it further (a select applies at once)
    filters.get_by_label("Type").select_option("one_off")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(prefix + "once")
    filters.get_by_label("Type").select_option("")
    # A tag too
    filters.get_by_label("Tag").fill("env:prod")
    filters.get_by_label("Tag").press("Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(prefix + "tagged")
    expect(page.locator("#status-counts")).to_have_text("All matching jobs: 1 SCHEDULED")
    # And a count is a link to its status under the same filters
    filters.get_by_label("Tag").fill("")
    filters.get_by_role("button", name="Filter").click()
    page.locator("#status-counts a[data-status=PAUSED]").click()
    expect(main).to_have_attribute("data-route", f"#/jobs?status=PAUSED&name_prefix={prefix}")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(prefix + "paused")
    expect(filters.get_by_label("Status")).to_have_value("PAUSED")


def test_a_dag_shows_each_node_by_status_and_upstream_failed(page: Any, console_stack: Stack) -> None:
    upstream = failing_job(console_stack, f"up-{uuid.uuid4().hex[:6]}", in_seconds=4)
    dependant = create(
        console_stack,
        {
            "type": "dependent",
            "name": f"down-{uuid.uuid4().hex[:6]}",
            "depends_on": [upstream],
            "handler": "demo.echo",
        },
    )
    poll(
        lambda: console_stack.get(f"/api/jobs/{dependant}/graph", **AS_TENANT).json(),
        lambda g: any(p["status"].get(dependant) == "UPSTREAM_FAILED" for p in g["periods"]),
        timeout=60,
    )

    open_console(page, f"#/dag/{dependant}")
    expect(page.locator(f'svg.dag g.node[data-job="{dependant}"]')).to_have_attribute(
        "data-status", "UPSTREAM_FAILED"
    )
    expect(page.locator(f'svg.dag g.node[data-job="{upstream}"]')).to_have_attribute(
        "data-status", "DEAD_LETTER"
    )
    expect(page.locator("#dag-nodes")).to_contain_text("UPSTREAM_FAILED")


DAILY = "17 3 * * *"  # its past ticks are backfilled; a live one comes once a day at 03:17 UTC


def backfill(stack: Stack, job_id: str, first: float, last: float) -> None:
    """Backfill the job's ticks in [first, last) (Unix times), at once."""
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))  # noqa: E731
    answer = stack.post(f"/api/jobs/{job_id}/backfill", {"from": iso(first), "to": iso(last)}, **AS_TENANT)
    assert answer.status_code == 202, answer.text


def test_an_older_period_picked_from_the_run_history_recolours_the_dag(
    page: Any, console_stack: Stack
) -> None:
    # Given a daily root and its dependant over eight past days: on the oldest the root's one attempt
    # failed (its dependant UPSTREAM_FAILED), on the seven since both succeeded, so the API's five most
    # recent periods all show SUCCEEDED
    root = create(
        console_stack,
        {
            "type": "recurring",
            "name": f"daily-{uuid.uuid4().hex[:6]}",
            "cron_expr": DAILY,
            "handler": "demo.fail",
            "max_attempts": 1,
        },
    )
    down = create(
        console_stack,
        {
            "type": "dependent",
            "name": f"after-{uuid.uuid4().hex[:6]}",
            "depends_on": [root],
            "handler": "demo.echo",
        },
    )
    day = 86_400
    now = time.time()
    backfill(console_stack, root, now - 8 * day, now - 7 * day)
    oldest = dead_letter_of(console_stack, root)["scheduled_for"]
    edited = requests.patch(
        f"{console_stack.url}/api/jobs/{root}", json={"handler": "demo.echo"}, headers=AS_TENANT, timeout=10
    )
    assert edited.status_code == 200, edited.text
    backfill(console_stack, root, now - 7 * day, now)  # the seven ticks since
    poll(
        lambda: console_stack.get(f"/api/jobs/{down}/runs?status=SUCCEEDED", **AS_TENANT).json()["items"],
        lambda items: len(items) == 7,
        timeout=90,
    )
    poll(
        lambda: console_stack.get(f"/api/jobs/{down}/graph?period={quote(oldest)}", **AS_TENANT).json()[
            "periods"
        ][0],
        lambda p: p["status"].get(down) == "UPSTREAM_FAILED",
        timeout=60,
    )
    open_console(page, f"#/dag/{down}")
    node = page.locator(f'svg.dag g.node[data-job="{down}"]')
    expect(node).to_have_attribute("data-status", "SUCCEEDED")
    expect(page.locator("#period option")).to_have_count(5)
    expect(page.locator(f'#period option[value="{oldest}"]')).to_have_count(0)
    # When the keyboard asks for earlier periods and the oldest is picked
    tab_to(page, "#earlier-periods")
    page.keyboard.press("Enter")
    expect(page.locator("#period-note")).to_contain_text("earlier period")
    expect(page.locator(f'#period option[value="{oldest}"]')).to_have_count(1)
    page.get_by_label("Period").select_option(oldest)
    # Then the nodes show that period: the root dead-lettered, its dependant UPSTREAM_FAILED
    expect(node).to_have_attribute("data-status", "UPSTREAM_FAILED")
    expect(page.locator(f'svg.dag g.node[data-job="{root}"]')).to_have_attribute("data-status", "DEAD_LETTER")
    expect(page.locator("#dag-nodes")).to_contain_text("UPSTREAM_FAILED")
    # And a recent period picked again shows SUCCEEDED once more
    recent = page.locator("#period option").first.get_attribute("value")
    page.get_by_label("Period").select_option(recent)
    expect(node).to_have_attribute("data-status", "SUCCEEDED")
    # The picker, its button and its note stay accessible, and fit a phone's width
    expect(page.locator("#earlier-periods")).to_have_text("No earlier periods")
    assert serious_violations(page) == []
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def tab_to(page: Any, selector: str, limit: int = 80) -> None:
    """Press Tab until the element matching `selector` has the focus (at most `limit` presses)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_the_keyboard_alone_reaches_create_and_pause(page: Any, console_stack: Stack) -> None:
    open_console(page, "#/jobs")
    tab_to(page, "#create-form input[name=name]", limit=120)  # past a full page of 20 jobs and the filters
    page.keyboard.type(f"keys-{uuid.uuid4().hex[:8]}")
    tab_to(page, "#create-form button[type=submit]")
    page.keyboard.press("Enter")
    expect(page.locator("#runs")).to_be_visible()

    job_id = create(console_stack, {"type": "recurring", "cron_expr": NEVER_SOON, "handler": "demo.echo"})
    open_console(page, f"#/jobs/{job_id}")
    tab_to(page, "#pause-toggle")
    page.keyboard.press("Enter")
    # (the label changes once the API has answered: a wait bound for a loaded machine, not a speed)
    expect(page.locator("#pause-toggle")).to_have_text("Resume", timeout=30_000)
    expect(page.locator("#pause-toggle")).to_be_focused()


def test_the_keyboard_alone_reaches_edit_and_backfill_preview(page: Any, console_stack: Stack) -> None:
    job_id = create(console_stack, {"type": "recurring", "cron_expr": NEVER_SOON, "handler": "demo.echo"})
    open_console(page, f"#/jobs/{job_id}")
    tab_to(page, "#edit-form input[name=name]")
    name = f"keys-edit-{uuid.uuid4().hex[:8]}"
    page.keyboard.type(name)
    tab_to(page, "#edit-save")
    page.keyboard.press("Enter")
    poll(lambda: console_stack.get(f"/api/jobs/{job_id}", **AS_TENANT).json()["name"], lambda n: n == name)
    tab_to(page, "#backfill-form input[name=from]", limit=120)
    tab_to(page, "#backfill-preview-button")
    page.keyboard.press("Enter")
    expect(page.locator("#backfill-result [role=alert]")).to_contain_text("choose a start and an end")


# -- every page: accessibility, a phone-width layout, a screenshot ----------------------------------
@pytest.fixture(scope="module")
def pages(console_stack: Stack) -> dict[str, str]:
    """A route for each page, over jobs that exercise it (a run that succeeded, a DAG, a dead letter)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    done = create(
        console_stack, {"type": "one_off", "name": "nightly-report", "handler": "demo.echo", "run_at": now}
    )
    create(
        console_stack,
        {"type": "recurring", "name": "every-5-min", "cron_expr": "*/5 * * * *", "handler": "demo.echo"},
    )
    create(
        console_stack,
        {
            "type": "recurring",
            "name": "weekday-9am",
            "cron_expr": "0 9 * * 1-5",
            "timezone": "Europe/Paris",
            "handler": "demo.echo",
        },
    )
    upstream = failing_job(console_stack, "extract", in_seconds=4)
    create(
        console_stack, {"type": "dependent", "name": "load", "depends_on": [upstream], "handler": "demo.echo"}
    )
    dead_letter_of(console_stack, upstream)
    job = poll(
        lambda: console_stack.get(f"/api/jobs/{done}", **AS_TENANT).json(),
        lambda j: j["status"] == "COMPLETED",
    )
    run_id = job["recent_executions"][0]["run_id"]
    charted = create(
        console_stack,
        {
            "type": "recurring",
            "name": "hourly-export",
            "cron_expr": "0 * * * *",
            "handler": "demo.sleep",
            "payload": {"seconds": 0.2},
        },
    )
    for count in (1, 2, 3):  # three manual runs, one after the other: a run table and a chart to show
        assert console_stack.post(f"/api/jobs/{charted}/run-now", None, **AS_TENANT).status_code == 202
        poll(
            lambda: console_stack.get(f"/api/jobs/{charted}/runs", **AS_TENANT).json()["items"],
            lambda items, n=count: sum(r["status"] == "SUCCEEDED" for r in items) == n,
        )
    return {
        "jobs": "#/jobs",
        "job": f"#/jobs/{charted}",
        "run": f"#/runs/{run_id}",
        "dag": f"#/dag/{upstream}",
        "dead-letters": "#/dead-letters",
        "health": "#/health",
    }


PAGES = ["jobs", "job", "run", "dag", "dead-letters", "health"]


def serious_violations(page: Any) -> list[dict[str, Any]]:
    page.add_script_tag(path=str(VENDOR / "axe.min.js"))
    result = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:3]}
        for v in result
        if v["impact"] in ("serious", "critical")
    ]


@pytest.mark.parametrize("name", PAGES)
def test_each_page_has_no_serious_accessibility_violation_and_is_kept_as_a_screenshot(
    page: Any, pages: dict[str, str], name: str
) -> None:
    open_console(page, pages[name])
    shown = page.locator("main").inner_text()
    assert not [word for word in ("[object", "undefined", "NaN") if word in shown], shown
    assert serious_violations(page) == []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


@pytest.mark.parametrize("name", PAGES)
def test_each_page_fits_a_phone_width_screen(page: Any, pages: dict[str, str], name: str) -> None:
    page.set_viewport_size(PHONE)
    open_console(page, pages[name])
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert serious_violations(page) == []
    if name == "jobs":
        page.screenshot(path=str(SCREENSHOTS / "jobs-phone.png"))


def test_the_console_paints_within_two_seconds_and_shows_the_jobs_once_the_api_answers(
    page: Any, pages: dict[str, str]
) -> None:
    """Time to first render on the local stack: the console's own part (its files, parsed and
    painted) is bounded tightly; the page with its data waits on GET /api/jobs, which on the
    embedded AWS reads each job's last run with one more Query (printed, loosely bounded)."""
    open_console(page, pages["jobs"])
    paint = page.evaluate("performance.getEntriesByName('first-contentful-paint')[0].startTime")
    rendered = page.evaluate("performance.getEntriesByName('jobsched:first-render')[0].startTime")
    api = page.evaluate(
        "performance.getEntriesByType('resource').filter(e => e.name.includes('/api/jobs'))[0].duration"
    )
    print(
        f"\nconsole: first paint {paint:.0f} ms; jobs shown at {rendered:.0f} ms (GET /api/jobs {api:.0f} ms)"
    )
    assert paint < 2_000
    assert rendered < 10_000


# -- a tenant with many jobs: one page at a time, never all of them --------------------------------
PAGING_TENANT = "console-paging"
PAGED_JOBS = 250  # 12 full pages of 20 and a short one (creating more through the API: see docs/console.md)


def test_with_hundreds_of_jobs_the_jobs_page_asks_for_one_page_at_a_time_and_pages_through_all(
    browser: Any, console_stack: Stack
) -> None:
    # Given a tenant of its own with PAGED_JOBS jobs, created 100 at a time (POST /api/jobs/batch)
    started = time.monotonic()
    for first in range(0, PAGED_JOBS, 100):
        jobs = [
            {"type": "recurring", "name": f"paged-{i:04d}", "cron_expr": NEVER_SOON, "handler": "demo.echo"}
            for i in range(first, min(first + 100, PAGED_JOBS))
        ]
        answer = requests.post(  # Stack.post's 10 s is short for 100 creates on the embedded AWS
            console_stack.url + "/api/jobs/batch",
            json={"jobs": jobs},
            headers={"X-Tenant": PAGING_TENANT},
            timeout=180,
        )
        assert answer.status_code == 200 and all("job_id" in item for item in answer.json()["items"]), (
            answer.text
        )
    print(f"\ncreated {PAGED_JOBS} jobs in {time.monotonic() - started:.1f} s")
    context = browser.new_context(viewport=DESKTOP, base_url=console_stack.url)
    context.add_init_script(f"localStorage.setItem('jobsched.tenant', {PAGING_TENANT!r});")
    page = context.new_page()
    listings: list[str] = []  # every GET /api/jobs the page sends (the counts' path aside)
    page.on("request", lambda r: listings.append(r.url) if "/api/jobs?" in r.url else None)
    try:
        # When the Jobs page opens
        open_console(page, "#/jobs")
        rows = page.locator("#jobs tbody tr")
        # Then it shows one page of 20, asked for as one page, and counts all the tenant's jobs
        expect(rows).to_have_count(20)
        assert len(listings) == 1 and "limit=20" in listings[0] and "cursor=" not in listings[0]
        expect(page.locator("#status-counts")).to_have_text(f"All matching jobs: {PAGED_JOBS} SCHEDULED")
        expect(page.locator("#prev-page")).to_be_disabled()
        # And "Next page" walks through every job once, one page of at most 20 per request
        seen: list[str] = []
        for number in range(1, 100):
            expect(page.locator("#page-info")).to_contain_text(f"Page {number}:")
            names = page.locator("#jobs tbody tr td:first-child a").all_inner_texts()
            assert 0 < len(names) <= 20
            seen.extend(names)
            if page.locator("#next-page").is_disabled():
                break
            page.locator("#next-page").click()
        assert sorted(seen) == [f"paged-{i:04d}" for i in range(PAGED_JOBS)]
        assert len(listings) == number == -(-PAGED_JOBS // 20)
        assert all("limit=20" in url for url in listings) and all("cursor=" in url for url in listings[1:])
        # And "Previous page" goes back one page
        page.locator("#prev-page").click()
        expect(page.locator("#page-info")).to_contain_text(f"Page {number - 1}: 20 job(s)")
    finally:
        context.close()
