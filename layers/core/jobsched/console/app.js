// jobsched console: hash-routed pages over the HTTP API, plain ES modules, no framework, no build.
// Why: a few hundred lines that a reader can follow from route to fetch, zero supply chain, and the
// files ship in the package and the Lambda layer exactly as written (see jobsched/console/__init__.py).
import { api, get, post, del, query, tenant, setTenant, ApiError } from "./api.js";
import { h, s, badge, when, countdown, relative, ms, toast } from "./dom.js";
import { describeCron } from "./cron.js";

const main = document.getElementById("main");
const PAGE = 20;
let timers = [];

function every(msInterval, fn) {
  timers.push(setInterval(fn, msInterval));
}

function stopTimers() {
  for (const t of timers) clearInterval(t);
  timers = [];
}

function page(title, ...children) {
  document.title = `${title} · jobsched console`;
  main.replaceChildren(h("h1", {}, title), ...children.filter((c) => c !== null && c !== undefined));
}

// On a phone a wide table becomes one card per row: each cell carries its column's name.
function cards(tbody) {
  const names = [...tbody.closest("table").querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of tbody.rows) [...row.cells].forEach((td, i) => { if (names[i] && td.colSpan === 1) td.dataset.label = names[i]; });
}

function failure(err) {
  return h("p", { class: "error", role: "alert" }, err instanceof ApiError ? `${err.code}: ${err.message}` : String(err));
}

async function act(label, fn) {
  try {
    await fn();
    toast(label);
    return true;
  } catch (err) {
    toast(err instanceof ApiError ? `${err.code}: ${err.message}` : String(err));
    return false;
  }
}

// -- Jobs ------------------------------------------------------------------------------------------
const JOB_STATUSES = ["", "SCHEDULED", "PAUSED", "COMPLETED", "FAILED", "CANCELLED"];

function schedule(job) {
  const sc = job.schedule || job;
  if (sc.cron_expr) {
    return h("span", { title: sc.cron_expr }, describeCron(sc.cron_expr), sc.timezone && sc.timezone !== "UTC" ? ` (${sc.timezone})` : "");
  }
  if (sc.depends_on && sc.depends_on.length) return `after ${sc.depends_on.length} upstream job(s)`;
  return sc.run_at ? `once at ${when(sc.run_at)}` : "once";
}

function pauseToggle(job, after) {
  const paused = job.status === "PAUSED";
  if (job.status !== "SCHEDULED" && !paused) return h("span", { class: "muted" }, "—");
  const label = paused ? "Resume" : "Pause";
  return h("button", {
    type: "button", "aria-label": `${label} ${job.name || job.job_id}`, "data-action": label.toLowerCase(),
    onclick: async () => {
      if (await act(`${label}d ${job.name || job.job_id}`, () => post(`/api/jobs/${job.job_id}/${label.toLowerCase()}`))) after();
    },
  }, label);
}

// The filters GET /api/jobs takes, as the page's hash query: #/jobs?status=&type=&name_prefix=&tag=
const JOB_FILTERS = ["status", "type", "name_prefix", "tag"];
const JOB_TYPES = ["", "recurring", "one_off", "dependent"];

function filterForm(chosen) {
  const select = (name, options) => h("select", { id: `filter-${name}`, name, onchange: () => form.requestSubmit() },
    options.map((v) => h("option", { value: v, selected: v === chosen[name] }, v || "any")));
  const text = (name, placeholder) => h("input", { id: `filter-${name}`, name, value: chosen[name], placeholder, size: 14 });
  const label = (name, text_) => h("label", { for: `filter-${name}` }, text_);
  const form = h("form", { id: "jobs-filter", class: "toolbar", role: "search", "aria-label": "Filter jobs",
    onsubmit: (event) => {
      event.preventDefault();
      const data = new FormData(form);
      location.hash = "#/jobs" + query(Object.fromEntries(JOB_FILTERS.map((k) => [k, String(data.get(k) || "").trim()])));
    } },
    // Each label stays by its field when the toolbar wraps (a phone).
    h("span", { class: "pair" }, label("status", "Status"), select("status", JOB_STATUSES)),
    h("span", { class: "pair" }, label("type", "Type"), select("type", JOB_TYPES)),
    h("span", { class: "pair" }, label("name_prefix", "Name starts with"), text("name_prefix", "nightly-")),
    h("span", { class: "pair" }, label("tag", "Tag"), text("tag", "key:value")),
    h("button", { type: "submit" }, "Filter"));
  return form;
}

// The tenant's jobs per status under the filters (GET /api/jobs/counts: its whole partition, not this
// page; past the API's bound each count is a lower bound, shown "N+"). Each links to that status.
function statusCounts(data, chosen) {
  const plus = data.complete ? "" : "+";
  const shown = Object.entries(data.counts).filter(([, n]) => n > 0);
  if (!shown.length) return ["No job matches."];
  return ["All matching jobs: ", shown.map(([st, n], i) => [i ? " · " : "",
    h("a", { href: "#/jobs" + query({ ...chosen, status: st }), "data-status": st, "aria-current": st === chosen.status ? "true" : undefined },
      `${n}${plus} ${st}`)]),
    data.complete ? "" : ` (counted over the newest ${data.bound.toLocaleString("en")} jobs)`];
}

async function jobsPage(params) {
  const chosen = Object.fromEntries(JOB_FILTERS.map((k) => [k, params.get(k) || ""]));
  const { status, ...others } = chosen;
  const cursors = [null];
  let at = 0;
  const body = h("tbody");
  const more = h("button", { type: "button", id: "next-page", onclick: () => { at += 1; load(); } }, "Next page");
  const back = h("button", { type: "button", id: "prev-page", onclick: () => { at -= 1; load(); } }, "Previous page");
  const info = h("p", { class: "muted", id: "page-info" });
  const counts = h("p", { id: "status-counts" });
  // Bulk select: the jobs ticked on this page, acted on with one POST /api/jobs/actions (<= 100 ids).
  const selected = new Set();
  const bulk = (action, label) => h("button", { type: "button", "data-bulk": action, onclick: async () => {
    if (!selected.size) return toast("Select jobs first");
    const ids = [...selected];
    if (await act(`${label}: ${ids.length} job(s)`, () => post("/api/jobs/actions", { action, job_ids: ids }))) {
      selected.clear();
      load();
      loadCounts();
    }
  } }, `${label} selected`);
  async function loadCounts() {
    try {
      counts.replaceChildren(...statusCounts(await get("/api/jobs/counts" + query(others)), chosen).flat(Infinity));
    } catch (err) {
      counts.replaceChildren(failure(err));
    }
  }
  async function load() {
    try {
      const data = await get("/api/jobs" + query({ ...chosen, limit: PAGE, cursor: cursors[at] }));
      cursors[at + 1] = data.next_cursor || null;
      selected.clear();
      body.replaceChildren(...data.items.map((job) => h("tr", {},
        h("td", {}, h("input", { type: "checkbox", "aria-label": `Select ${job.name || job.job_id}`, "data-job": job.job_id,
          onchange: (e) => { if (e.target.checked) selected.add(job.job_id); else selected.delete(job.job_id); } }), " ",
          h("a", { href: `#/jobs/${job.job_id}` }, job.name || job.job_id)),
        h("td", { class: "hide-narrow" }, job.type),
        h("td", {}, schedule(job)),
        h("td", {}, countdown(job.next_run_at)),
        h("td", {}, badge(job.status), " ", job.last_run ? badge(job.last_run.status) : h("span", { class: "muted" }, "no run")),
        h("td", {}, pauseToggle(job, () => { load(); loadCounts(); })),
      )));
      if (!data.items.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No jobs on this page.")));
      info.textContent = `Page ${at + 1}: ${data.items.length} job(s)${data.next_cursor ? ", more on the next page" : ""}`;
      more.disabled = !cursors[at + 1];
      back.disabled = at === 0;
      cards(body);
    } catch (err) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 6 }, failure(err))));
    }
  }
  page("Jobs",
    filterForm(chosen),
    counts,
    h("div", { class: "toolbar", role: "group", "aria-label": "Bulk actions" },
      bulk("pause", "Pause"), bulk("resume", "Resume"), bulk("run_now", "Run now"), bulk("cancel", "Cancel")),
    h("div", { class: "toolbar" }, back, more, info),
    h("div", { class: "scroll" }, h("table", { id: "jobs", class: "cards" },
      h("caption", { class: "muted" }, "Newest first; the API pages with a cursor, 20 jobs a page."),
      h("thead", {}, h("tr", {}, ["Job", "Type", "Schedule", "Next run", "Status / last run", "Pause"].map(
        (t, i) => h("th", { scope: "col", class: i === 1 ? "hide-narrow" : undefined }, t)))),
      body)),
    createForm());
  await Promise.all([load(), loadCounts()]);
}

function createForm() {
  const field = (label, input) => h("label", {}, label, input);
  const type = h("select", { name: "type" }, h("option", { value: "one_off" }, "one-off"), h("option", { value: "recurring" }, "recurring"));
  const name = h("input", { name: "name", maxlength: 200 });
  const handler = h("input", { name: "handler", value: "demo.echo", required: true });
  const cron = h("input", { name: "cron_expr", placeholder: "*/5 * * * *" });
  const tz = h("input", { name: "timezone", value: "UTC" });
  const runAt = h("input", { name: "run_at", placeholder: "now" });
  const attempts = h("input", { name: "max_attempts", type: "number", min: 1, max: 25, value: 3 });
  const payload = h("textarea", { name: "payload", rows: 2 }, "{}");
  const out = h("p", { role: "status" });
  const form = h("form", { id: "create-form", onsubmit: async (event) => {
    event.preventDefault();
    let body;
    try {
      body = { type: type.value, handler: handler.value.trim(), max_attempts: Number(attempts.value) };
      if (name.value.trim()) body.name = name.value.trim();
      const p = payload.value.trim();
      if (p) body.payload = JSON.parse(p);
      if (type.value === "recurring") Object.assign(body, { cron_expr: cron.value.trim(), timezone: tz.value.trim() || "UTC" });
      else body.run_at = runAt.value.trim() || new Date().toISOString();
    } catch (err) {
      out.replaceChildren(failure(`payload: ${err.message}`));
      return;
    }
    try {
      const made = await post("/api/jobs", body, { "Idempotency-Key": crypto.randomUUID() });
      toast(`Created ${made.job_id}`);
      location.hash = `#/jobs/${made.job_id}`;
    } catch (err) {
      out.replaceChildren(failure(err));
    }
  } },
  h("fieldset", {}, h("legend", {}, "Create a job"),
    h("div", { class: "form-grid" },
      field("Type", type), field("Name", name), field("Handler", handler), field("Cron (recurring)", cron),
      field("Timezone", tz), field("Run at (one-off, ISO-8601 with offset)", runAt), field("Max attempts", attempts),
      field("Payload (JSON)", payload)),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create job")), out));
  return form;
}

// -- Job -------------------------------------------------------------------------------------------
function bars(runs) {
  const late = Math.max(1, ...runs.map((r) => r.lateness_ms || 0));
  const dur = Math.max(1, ...runs.map((r) => r.duration_ms || 0));
  const bar = (value, max, status) => h("div", { class: `bar s-${status}`, style: `width:${Math.round(100 * (value || 0) / max)}%`, "aria-hidden": "true" });
  return (run) => [
    h("td", { class: "barcell" }, ms(run.lateness_ms), bar(run.lateness_ms, late, run.status)),
    h("td", { class: "barcell" }, ms(run.duration_ms), bar(run.duration_ms, dur, run.status)),
  ];
}

// Lateness and duration over time: two lines over the runs shown, oldest left, on one ms axis.
function trend(runs) {
  const points = runs.filter((r) => r.lateness_ms !== null || r.duration_ms !== null).slice().reverse();
  if (points.length < 2) return h("p", { class: "muted", id: "trend" }, "A chart appears after two finished runs.");
  const W = 600, H = 120, top = Math.max(1, ...points.map((r) => Math.max(r.lateness_ms || 0, r.duration_ms || 0)));
  const x = (i) => 30 + (i * (W - 40)) / (points.length - 1);
  const y = (v) => H - 15 - ((v || 0) * (H - 30)) / top;
  const line = (key, colour) => s("polyline", { fill: "none", stroke: colour, "stroke-width": 2,
    points: points.map((r, i) => `${x(i)},${y(r[key])}`).join(" ") });
  return h("figure", { id: "trend" },
    s("svg", { class: "trend", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
      "aria-label": `Lateness and duration of the last ${points.length} runs; peak ${ms(top)}` },
      s("line", { x1: 30, y1: H - 15, x2: W - 10, y2: H - 15, stroke: "#8c959f" }),
      s("text", { x: 0, y: 14, "font-size": 11, fill: "#57606a" }, ms(top)),
      line("lateness_ms", "#8a5a00"), line("duration_ms", "#0969da")),
    h("figcaption", { class: "muted" }, h("span", { class: "key late-key" }, "lateness"), " ",
      h("span", { class: "key dur-key" }, "duration"), ` over the last ${points.length} runs (oldest left)`));
}

async function jobPage(jobId) {
  let job;
  try {
    job = await get(`/api/jobs/${jobId}`);
  } catch (err) {
    return page("Job", failure(err));
  }
  const title = job.name || job.job_id;
  const def = h("dl", { class: "def" });
  const actions = h("div", { class: "actions" });
  const runs = h("tbody");
  const chart = h("div");
  const fires = h("ol", { id: "fire-times" });
  const stats = h("p", { id: "job-stats", class: "muted" }, "Loading run statistics…");
  let statsSeen = null;
  async function loadStats() {
    try {
      const st = await get(`/api/jobs/${jobId}/stats`);
      stats.replaceChildren(st.runs
        ? `${st.runs} run(s)${st.truncated ? " (the newest counted)" : ""}: lateness p50 ${ms(st.lateness_ms.p50)}, p99 ${ms(st.lateness_ms.p99)}; `
          + `duration p50 ${ms(st.duration_ms.p50)}, p99 ${ms(st.duration_ms.p99)}; success ${st.success_rate === null ? "—" : `${Math.round(100 * st.success_rate)}%`}`
        : "No finished run to measure yet.");
    } catch (err) {
      stats.replaceChildren(failure(err));
    }
  }
  function showDefinition() {
    const rows = [["Job id", job.job_id], ["Status", badge(job.status)], ["Type", job.type], ["Schedule", schedule(job)],
      ["Cron", job.cron_expr || "—"], ["Timezone", job.timezone || "UTC"], ["Next run", job.next_run_at ? [countdown(job.next_run_at), " ", when(job.next_run_at)] : "none pending"],
      ["Handler", job.handler || (job.target && job.target.type) || "—"], ["Max attempts", job.max_attempts ?? "—"],
      ["Depends on", (job.depends_on || []).length ? job.depends_on.map((id) => h("a", { href: `#/jobs/${id}` }, id, " ")) : "—"],
      ["Payload", h("code", {}, JSON.stringify(job.payload ?? {}))]];
    def.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
    const next = job.next_runs || [];
    fires.replaceChildren(...(next.length
      ? next.map((at) => h("li", {}, h("time", { datetime: at }, when(at)), " ", h("span", { class: "muted" }, `(${at})`)))
      : [h("li", { class: "muted" }, "none: only a scheduled recurring job has fire times")]));
    const paused = job.status === "PAUSED";
    actions.replaceChildren(
      h("button", { type: "button", id: "run-now", onclick: () => act("Run queued", () => post(`/api/jobs/${jobId}/run-now`)).then(refresh) }, "Run now"),
      h("button", { type: "button", id: "pause-toggle", "data-action": paused ? "resume" : "pause",
        onclick: async () => {
          await act(paused ? "Resumed" : "Paused", () => post(`/api/jobs/${jobId}/${paused ? "resume" : "pause"}`));
          await refresh();
          document.getElementById("pause-toggle")?.focus();
        } }, paused ? "Resume" : "Pause"),
      h("button", { type: "button", id: "cancel-job", class: "danger", onclick: () => act("Cancelled", () => del(`/api/jobs/${jobId}`)).then(refresh) }, "Cancel job"),
      h("a", { href: `#/dag/${jobId}` }, "Open DAG"));
  }
  async function refresh() {
    try {
      job = await get(`/api/jobs/${jobId}`);
      showDefinition();
    } catch (err) { /* keep what is shown; the runs table reports errors */ }
  }
  async function loadRuns() {
    try {
      const data = await get(`/api/jobs/${jobId}/runs` + query({ limit: PAGE }));
      // The stats are read again only when a run shown changed status, not every 2 s.
      const seen = data.items.map((r) => `${r.run_id}:${r.status}`).join(",");
      if (seen !== statsSeen) { statsSeen = seen; loadStats(); }
      const cells = bars(data.items);
      chart.replaceChildren(trend(data.items));
      runs.replaceChildren(...data.items.map((run) => h("tr", {},
        h("td", {}, h("a", { href: `#/runs/${run.run_id}` }, when(run.scheduled_for))),
        h("td", {}, badge(run.status)), h("td", { class: "hide-narrow" }, run.kind), h("td", {}, run.attempts), ...cells(run))));
      if (!data.items.length) runs.replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No runs yet.")));
      cards(runs);
    } catch (err) {
      runs.replaceChildren(h("tr", {}, h("td", { colspan: 6 }, failure(err))));
    }
  }
  const editor = h("div");
  const showEditor = () => editor.replaceChildren(editForm(job, (edited) => { job = edited; showDefinition(); showEditor(); }));
  showDefinition();
  showEditor();
  page(title, actions, def,
    h("h2", {}, "Next fire times"),
    fires,
    editor,
    job.type === "recurring" ? backfillForm(jobId, loadRuns) : null,
    h("h2", {}, "Runs"),
    stats,
    chart,
    h("div", { class: "scroll" }, h("table", { id: "runs", class: "cards" },
      h("thead", {}, h("tr", {}, ["Scheduled for", "Status", "Kind", "Attempts", "Lateness", "Duration"].map(
        (t, i) => h("th", { scope: "col", class: i === 2 ? "hide-narrow" : undefined }, t)))),
      runs)));
  await loadRuns();
  every(2000, () => { loadRuns(); });
}

// Edit sends only the fields changed (PATCH keeps the rest). The API's 400 message starts with the
// field it names ("cron_expr: ..."), so the message goes next to that input, or above the buttons.
const EDITABLE = [
  ["name", "Name", "text"], ["handler", "Handler", "text"], ["cron_expr", "Cron", "text", "recurring"],
  ["timezone", "Timezone", "text", "recurring"], ["max_attempts", "Max attempts", "number"],
  ["timeout_seconds", "Timeout (s, empty: none)", "number"], ["jitter_seconds", "Jitter (s)", "number", "recurring"],
  ["payload", "Payload (JSON)", "json"],
];

function editForm(job, saved) {
  const inputs = {};
  const errors = {};
  const shown = EDITABLE.filter(([, , , only]) => !only || job.type === only);
  const initial = (key, kind) => kind === "json" ? JSON.stringify(job[key] ?? {}) : job[key] ?? "";
  const cells = shown.map(([key, label, kind]) => {
    const input = kind === "json"
      ? h("textarea", { name: key, rows: 2, "aria-describedby": `edit-error-${key}` }, initial(key, kind))
      : h("input", { name: key, type: kind, value: initial(key, kind), "aria-describedby": `edit-error-${key}` });
    inputs[key] = input;
    errors[key] = h("span", { class: "error", id: `edit-error-${key}` });
    return h("label", {}, label, input, errors[key]);
  });
  const out = h("div", { role: "status", id: "edit-result" });
  const clear = () => {
    for (const key of Object.keys(inputs)) { errors[key].textContent = ""; inputs[key].removeAttribute("aria-invalid"); }
    out.replaceChildren();
  };
  const blame = (key, message) => {
    if (inputs[key]) {
      errors[key].textContent = message;
      inputs[key].setAttribute("aria-invalid", "true");
      inputs[key].focus();
    } else out.replaceChildren(failure(message));
  };
  const changes = () => {
    const body = {};
    for (const [key, , kind] of shown) {
      const text = inputs[key].value.trim();
      if (text === String(initial(key, kind))) continue;
      if (kind === "json") {
        try { body[key] = JSON.parse(text || "{}"); } catch (err) { throw Object.assign(new Error(`${key}: ${err.message}`), { field: key }); }
      } else if (kind === "number") body[key] = text === "" ? null : Number(text);
      else body[key] = text === "" && key === "name" ? null : text;
    }
    return body;
  };
  return h("form", { id: "edit-form", onsubmit: async (event) => {
    event.preventDefault();
    clear();
    let body;
    try { body = changes(); } catch (err) { return blame(err.field, err.message); }
    if (!Object.keys(body).length) return out.replaceChildren(h("p", { class: "muted" }, "Nothing changed."));
    try {
      const edited = await api("PATCH", `/api/jobs/${job.job_id}`, body);
      toast("Saved");
      saved(edited);
    } catch (err) {
      const named = err instanceof ApiError && err.status === 400 ? /^([a-z_]+)(?:[.[][^:]*)?:/.exec(err.message) : null;
      if (named && inputs[named[1]]) blame(named[1], err.message);
      else out.replaceChildren(failure(err));
    }
  } },
  h("fieldset", {}, h("legend", {}, "Edit the job"),
    h("div", { class: "form-grid" }, cells),
    h("div", { class: "actions" }, h("button", { type: "submit", id: "edit-save" }, "Save changes")), out));
}

// Backfill in two steps: Preview asks the API for a dry run (nothing written, no quota), and only
// then Confirm sends the same range for real, so an operator sees the ticks before creating runs.
function backfillForm(jobId, after) {
  const field = (label, input) => h("label", {}, label, input);
  // Not `required`: the form's own message says what is missing, the same way for every browser.
  const start = h("input", { name: "from", type: "datetime-local", step: 1 });
  const end = h("input", { name: "to", type: "datetime-local", step: 1 });
  const out = h("div", { role: "status", id: "backfill-result" });
  let planned = null;
  const confirm = h("button", { type: "button", id: "backfill-confirm", class: "primary", disabled: true, onclick: async () => {
    if (!planned) return;
    try {
      const done = await post(`/api/jobs/${jobId}/backfill`, planned);
      out.replaceChildren(h("p", {}, done.status === "RUNNING"
        ? `Accepted: ${done.ticks} tick(s), carried out outside the request (operation ${done.operation_id}).`
        : `Done: ${done.created} run(s) created, ${done.existing} tick(s) had one already.`));
      planned = null;
      confirm.disabled = true;
      after();
    } catch (err) {
      out.replaceChildren(failure(err));
    }
  } }, "Confirm backfill");
  const range = () => {
    if (!start.value || !end.value) throw new Error("choose a start and an end");
    return { from: new Date(start.value).toISOString(), to: new Date(end.value).toISOString() };
  };
  const form = h("form", { id: "backfill-form", onsubmit: async (event) => {
    event.preventDefault();
    planned = null;
    confirm.disabled = true;
    try {
      const body = range();
      const seen = await post(`/api/jobs/${jobId}/backfill`, { ...body, dry_run: true });
      out.replaceChildren(
        h("p", { id: "backfill-count" }, seen.ticks ? `${seen.ticks} tick(s) from ${when(seen.first)} to ${when(seen.last)}.` : "No tick in that range."),
        seen.ticks ? h("ol", { id: "backfill-preview" }, seen.preview.map((at) => h("li", {}, h("time", { datetime: at }, when(at))))) : null,
        seen.truncated ? h("p", { class: "muted" }, `The first ${seen.preview.length} shown.`) : null);
      if (seen.ticks) { planned = body; confirm.disabled = false; }
    } catch (err) {
      out.replaceChildren(failure(err instanceof ApiError ? err : `${err.message}`));
    }
  } },
  h("fieldset", {}, h("legend", {}, "Backfill (your local time; the end is excluded)"),
    h("div", { class: "form-grid" }, field("Start", start), field("End", end)),
    h("div", { class: "actions" }, h("button", { type: "submit", id: "backfill-preview-button" }, "Preview"), confirm), out));
  return form;
}

// -- Run -------------------------------------------------------------------------------------------
async function runPage(runId) {
  let run;
  try {
    run = await get(`/api/runs/${encodeURIComponent(runId)}`);
  } catch (err) {
    return page("Run", failure(err), h("p", {}, "A run handed over on the fast path has no row until it ends."));
  }
  const attempts = run.attempts || [];
  const t0 = Math.min(...attempts.map((a) => +new Date(a.started_at || run.scheduled_for)), +new Date(run.scheduled_for));
  const t1 = Math.max(t0 + 1, ...attempts.map((a) => +new Date(a.finished_at || a.started_at || Date.now())));
  const span = t1 - t0;
  // Each attempt on one time axis from the tick (scheduled_for): the first attempt's lateness is the
  // hatched lead-in, so a late start and a slow run look different at a glance.
  const timeline = h("ol", { class: "timeline", "aria-label": "Attempts" }, attempts.map((a) => {
    const from = +new Date(a.started_at || t0), to = +new Date(a.finished_at || Date.now());
    const left = (100 * (from - t0)) / span, width = Math.max(0.5, (100 * (to - from)) / span);
    const outcome = a.outcome === "succeeded" || a.outcome === "SUCCEEDED" ? "SUCCEEDED" : (a.outcome || "").toUpperCase();
    return h("li", {}, h("span", {}, `Attempt ${a.attempt} `, badge(outcome)),
      h("div", { class: "track", title: `${when(a.started_at)} → ${when(a.finished_at)}` },
        a.attempt === 1 && left > 0 ? h("div", { class: "bar late", style: `left:0;width:${left}%`, title: "lateness" }) : null,
        h("div", { class: `bar s-${outcome}`, style: `left:${left}%;width:${width}%` })),
      a.error ? h("span", { class: "error" }, `${a.error.type}: ${a.error.message}`) : null);
  }));
  const logs = h("pre", { id: "logs", tabindex: 0, "aria-label": "Logs" }, "Loading logs…");
  const replay = run.status === "DEAD_LETTER"
    ? h("div", { class: "actions" }, h("button", { type: "button", id: "replay-run", onclick: async () => {
      if (await act("Replayed", () => post(`/api/dead-letter/${encodeURIComponent(run.run_id)}/replay`, undefined,
        { "Idempotency-Key": replayKey(run.run_id, run.finished_at) }))) route();
    } }, "Replay"))
    : null;
  page(`Run ${run.run_id}`, replay,
    h("dl", { class: "def" }, [["Job", h("a", { href: `#/jobs/${run.job_id}` }, run.job_id)], ["Status", badge(run.status)],
      ["Kind", run.kind], ["Scheduled for", when(run.scheduled_for)], ["Started", when(run.started_at)],
      ["Finished", when(run.finished_at)], ["Lateness", ms(run.lateness_ms)], ["Duration", ms(run.duration_ms)]]
      .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h2", {}, "Attempts"), attempts.length ? timeline : h("p", { class: "muted" }, "No attempt yet."),
    h("h2", {}, run.error ? "Error" : "Result"),
    h("pre", {}, run.error ? `${run.error.type}: ${run.error.message}` : JSON.stringify(run.result ?? null, null, 2)),
    h("h2", {}, "Logs"), logs);
  try {
    const data = await get(`/api/runs/${encodeURIComponent(runId)}/logs` + query({ limit: 200 }));
    logs.textContent = data.lines.length ? data.lines.map((l) => `${l.at}  ${l.message}`).join("\n") : "No log lines.";
  } catch (err) {
    logs.textContent = err.message;
  }
}

// -- DAG -------------------------------------------------------------------------------------------
const LEGEND = ["SUCCEEDED", "RUNNING", "PENDING", "FAILED", "DEAD_LETTER", "UPSTREAM_FAILED", "SKIPPED"];

function layout(graph) {
  const ups = new Map(graph.nodes.map((n) => [n.job_id, []]));
  for (const e of graph.edges) ups.get(e.dependant)?.push(e.upstream);
  const depth = new Map();
  const visit = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const d = Math.max(-1, ...(ups.get(id) || []).filter((u) => ups.has(u)).map((u) => visit(u, seen))) + 1;
    depth.set(id, d);
    return d;
  };
  graph.nodes.forEach((n) => visit(n.job_id));
  const columns = [];
  for (const n of graph.nodes) (columns[depth.get(n.job_id)] ||= []).push(n);
  const pos = new Map();
  columns.forEach((col, x) => col.forEach((n, y) => pos.set(n.job_id, { x: 20 + x * 220, y: 20 + y * 70 })));
  return { pos, width: 40 + columns.length * 220, height: 40 + Math.max(1, ...columns.map((c) => c.length)) * 70 };
}

// Where a DAG's periods come from: a period is the scheduled_for of the chain's root tick, so the
// run history of a recurring root (the nearest among the job's ancestors, or the job itself) lists
// every period, newest first and paged. A one-off chain has the one period "once": nothing to page.
function periodSource(graph, jobId) {
  const byId = new Map(graph.nodes.map((n) => [n.job_id, n]));
  const ups = new Map();
  for (const e of graph.edges) ups.set(e.dependant, [...(ups.get(e.dependant) || []), e.upstream]);
  const seen = new Set();
  const queue = [jobId];
  while (queue.length) {
    const id = queue.shift();
    if (seen.has(id)) continue;
    seen.add(id);
    if (byId.get(id)?.type === "recurring") return id;
    queue.push(...(ups.get(id) || []));
  }
  return graph.nodes.find((n) => n.type === "recurring")?.job_id || null;
}

async function dagPage(jobId) {
  let graph;
  try {
    graph = await get(`/api/jobs/${encodeURIComponent(jobId)}/graph`);
  } catch (err) {
    return page("DAG", failure(err));
  }
  const { pos, width, height } = layout(graph);
  const holder = h("div", { class: "scroll" });
  const nodes = h("tbody");
  // Each node's status by period: the API's recent periods first, any other read when picked.
  const known = new Map((graph.periods || []).map((p) => [p.period, p.status]));
  const choose = h("select", { id: "period", onchange: () => pick() });
  const note = h("span", { id: "period-note", class: "muted", role: "status" });
  function options(values) {
    const chosen = choose.value;
    const sorted = [...new Set(values)].sort().reverse(); // ISO times in UTC: text order is time order
    choose.replaceChildren(...(sorted.length
      ? sorted.map((p) => h("option", { value: p }, p === "once" ? "once" : when(p)))
      : [h("option", { value: "" }, "no period yet")]));
    if (chosen && sorted.includes(chosen)) choose.value = chosen;
  }
  options([...known.keys()]);
  const source = periodSource(graph, jobId);
  let cursor = null;
  const earlier = source && h("button", { type: "button", id: "earlier-periods", onclick: () => more() }, "Earlier periods");
  async function more() {
    earlier.disabled = true;
    try {
      const runs = await get(`/api/jobs/${encodeURIComponent(source)}/runs` + query({ limit: PAGE, cursor }));
      const shown = new Set([...choose.options].map((o) => o.value));
      const added = runs.items.map((r) => r.scheduled_for).filter((p) => !shown.has(p));
      options([...shown, ...added].filter(Boolean));
      cursor = runs.next_cursor;
      note.textContent = added.length ? `${added.length} earlier periods to pick from` : "No earlier period";
      if (!cursor) earlier.textContent = "No earlier periods";
      earlier.disabled = !cursor;
    } catch (err) {
      note.textContent = err.message;
      earlier.disabled = false;
    }
  }
  async function pick() {
    const p = choose.value;
    if (p && !known.has(p)) {
      note.textContent = "Reading the period…";
      try {
        const answer = await get(`/api/jobs/${encodeURIComponent(jobId)}/graph` + query({ period: p }));
        known.set(p, (answer.periods[0] || {}).status || {});
        note.textContent = "";
      } catch (err) {
        note.textContent = err.message;
        return;
      }
    }
    if (choose.value === p) draw();
  }
  const statusOf = (id) => (known.get(choose.value) || {})[id] || null;
  function draw() {
    const svg = s("svg", { class: "dag", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": `Graph of ${graph.nodes.length} jobs and ${graph.edges.length} edges` });
    svg.append(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" },
      s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#57606a" }))));
    for (const e of graph.edges) {
      const a = pos.get(e.upstream), b = pos.get(e.dependant);
      if (a && b) svg.append(s("line", { x1: a.x + 180, y1: a.y + 22, x2: b.x, y2: b.y + 22, stroke: "#57606a", "stroke-width": 1.5, "marker-end": "url(#arrow)" }));
    }
    for (const n of graph.nodes) {
      const p = pos.get(n.job_id);
      const st = statusOf(n.job_id) || "NONE";
      const g = s("g", { class: `node`, "data-job": n.job_id, "data-status": st });
      g.append(s("rect", { x: p.x, y: p.y, width: 180, height: 44, rx: 8, class: `s-${st}`, fill: `var(--${colour(st)})`,
        stroke: n.job_id === graph.job_id ? "#1f2328" : "none", "stroke-width": 3 }));
      g.append(s("text", { x: p.x + 10, y: p.y + 18 }, (n.name || n.job_id).slice(0, 22)));
      g.append(s("text", { x: p.x + 10, y: p.y + 36 }, st === "NONE" ? "no run" : st));
      svg.append(g);
    }
    holder.replaceChildren(svg);
    nodes.replaceChildren(...graph.nodes.map((n) => h("tr", {},
      h("td", {}, h("a", { href: `#/jobs/${n.job_id}` }, n.name || n.job_id)), h("td", {}, badge(n.status)),
      h("td", {}, statusOf(n.job_id) ? badge(statusOf(n.job_id)) : h("span", { class: "muted" }, "no run")))));
  }
  page("DAG",
    h("div", { class: "toolbar" }, h("label", { for: "period" }, "Period"), choose, earlier || null, note,
      h("a", { href: `#/jobs/${jobId}` }, "Back to the job")),
    h("ul", { class: "legend", "aria-label": "Legend" }, LEGEND.map((st) => h("li", {}, badge(st)))),
    holder, graph.truncated ? h("p", { class: "muted" }, "Truncated: the graph has more jobs than shown.") : null,
    h("h2", {}, "Nodes"),
    h("table", { id: "dag-nodes" }, h("thead", {}, h("tr", {}, ["Job", "Job status", "Run in period"].map((t) => h("th", { scope: "col" }, t)))), nodes));
  draw();
}

function colour(status) {
  return { SUCCEEDED: "ok", COMPLETED: "ok", FAILED: "bad", LOST: "bad", DEAD_LETTER: "dead", RUNNING: "run", LEASED: "run",
    PENDING: "wait", UPSTREAM_FAILED: "upfail" }[status] || "skip";
}

// The dead-letter list answers last_error as text; a run's error is {type, message}.
function errorText(error) {
  if (!error) return "—";
  return typeof error === "string" ? error : `${error.type}: ${error.message}`;
}

// One key per dead-lettering of a run: a double click replays once, yet the same run dead-lettered
// again later replays again (a key for the run alone would answer the first replay forever).
function replayKey(runId, deadAt) {
  return `console:${Date.parse(deadAt) || 0}:${runId}`;
}

// -- Dead letters ----------------------------------------------------------------------------------
// One replay, as its button and the bulk replay both send it: the key is per dead-lettering of the
// run (replayKey), so a double click or a bulk replay after a single one replays once.
function replayOne(d) {
  return post(`/api/dead-letter/${encodeURIComponent(d.run_id)}/replay`, undefined, { "Idempotency-Key": replayKey(d.run_id, d.dead_at) });
}

async function deadLettersPage() {
  const cursors = [null];
  let at = 0;
  const body = h("tbody");
  const more = h("button", { type: "button", onclick: () => { at += 1; load(); } }, "Next page");
  const results = h("ul", { id: "bulk-replay-results", "aria-live": "polite" });
  let rows = [];  // [{ d, box, button }] of the page shown
  const markReplayed = (row) => { row.button.disabled = true; row.button.textContent = "Replayed"; row.box.checked = false; };
  const all = h("input", { type: "checkbox", id: "select-all-dead", onchange: () => {
    for (const row of rows) if (!row.button.disabled) row.box.checked = all.checked;
  } });
  // Bulk replay: each ticked run replayed in turn (the API has no bulk replay), each outcome listed.
  const bulk = h("button", { type: "button", id: "replay-selected", onclick: async () => {
    const chosen = rows.filter((row) => row.box.checked);
    if (!chosen.length) return results.replaceChildren(h("li", { class: "muted" }, "Tick the dead letters to replay first."));
    bulk.disabled = true;
    results.replaceChildren();
    let ok = 0;
    for (const row of chosen) {
      try {
        const done = await replayOne(row.d);
        ok += 1;
        markReplayed(row);
        results.append(h("li", { "data-run": row.d.run_id, "data-ok": "true" }, `${row.d.run_id}: replayed (${done.status})`));
      } catch (err) {
        results.append(h("li", { "data-run": row.d.run_id, "data-ok": "false", class: "error" },
          `${row.d.run_id}: ${err instanceof ApiError ? `${err.code}: ${err.message}` : String(err)}`));
      }
    }
    all.checked = false;
    bulk.disabled = false;
    toast(`Replayed ${ok} of ${chosen.length}`);
  } }, "Replay selected");
  async function load() {
    try {
      const data = await get("/api/dead-letter" + query({ limit: PAGE, cursor: cursors[at] }));
      cursors[at + 1] = data.next_cursor || null;
      more.disabled = !data.next_cursor;
      all.checked = false;
      rows = data.items.map((d) => {
        const row = { d };
        row.box = h("input", { type: "checkbox", "data-run": d.run_id, "aria-label": `Select ${d.run_id}` });
        row.button = h("button", { type: "button", "data-run": d.run_id, "aria-label": `Replay ${d.run_id}`, onclick: async () => {
          if (await act(`Replayed ${d.run_id}`, () => replayOne(d))) markReplayed(row);
        } }, "Replay");
        return row;
      });
      body.replaceChildren(...rows.map(({ d, box, button }) => h("tr", {}, h("td", {}, box),
        h("td", {}, h("a", { href: `#/runs/${d.run_id}` }, d.run_id)),
        h("td", {}, h("a", { href: `#/jobs/${d.job_id}` }, d.job_id)), h("td", { class: "hide-narrow" }, when(d.dead_at)),
        h("td", {}, d.attempts), h("td", {}, errorText(d.last_error)), h("td", {}, button))));
      if (!data.items.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No dead letters.")));
      cards(body);
    } catch (err) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 7 }, failure(err))));
    }
  }
  page("Dead letters", h("div", { class: "toolbar" }, h("label", {}, all, " Select all on this page"), bulk, more),
    results,
    h("div", { class: "scroll" }, h("table", { id: "dead-letters", class: "cards" },
      h("thead", {}, h("tr", {}, ["Select", "Run", "Job", "Dead at", "Attempts", "Last error", "Replay"].map(
        (t, i) => h("th", { scope: "col", class: i === 3 ? "hide-narrow" : undefined }, t)))), body)));
  await load();
}

// -- Health ----------------------------------------------------------------------------------------
async function healthPage() {
  const [health, dead, alerts, soonest, stats, counts] = await Promise.allSettled([
    get("/api/health"), get("/api/dead-letter" + query({ limit: 100 })), get("/api/alerts" + query({ limit: 20 })),
    get("/api/jobs" + query({ order: "next_run", limit: 1 })), get("/api/stats"), get("/api/jobs/counts")]);
  const value = (r, fn) => (r.status === "fulfilled" ? fn(r.value) : failure(r.reason));
  // Over the tenant's whole partition (GET /api/jobs/counts), "N+" past the API's bound.
  const tally = (data) => Object.entries(data.counts).filter(([, n]) => n > 0)
    .map(([k, n]) => [badge(k), ` ${n}${data.complete ? "" : "+"}  `]);
  page("Health",
    h("dl", { class: "def", id: "health" },
      h("dt", {}, "API"), h("dd", {}, value(health, (d) => [h("span", { class: `badge s-${d.status === "ok" ? "SUCCEEDED" : "FAILED"}` }, d.status === "ok" ? "UP" : "DOWN"), ` ${d.status} (version ${d.version ?? "?"})`])),
      h("dt", {}, "Dead letters"), h("dd", {}, value(dead, (d) => `${d.items.length}${d.next_cursor ? "+" : ""} dead-lettered run(s)`)),
      h("dt", {}, "Jobs by status"), h("dd", { id: "health-counts" }, value(counts, (d) => tally(d).length ? tally(d) : "no jobs")),
      // The soonest pending tick: the first item of the listing by next run.
      h("dt", {}, "Next due"), h("dd", {}, value(soonest, (d) => {
        const next = d.items.length ? d.items[0].next_run_at : null;
        return next ? [countdown(next), " ", when(next)] : "nothing pending";
      })),
      // GET /api/stats: a sample (the newest and the soonest-due jobs' recent runs), said as such.
      h("dt", {}, "Lateness p99"), h("dd", { id: "health-lateness" }, value(stats, (d) => d.runs
        ? `${ms(d.lateness_ms.p99)} (p50 ${ms(d.lateness_ms.p50)}) over ${d.runs} recent run(s) of ${d.sampled_jobs} job(s)`
        : "no run yet")),
      h("dt", {}, "Due backlog"), h("dd", { id: "health-backlog" }, value(stats, (d) => d.backlog
        ? [`${d.backlog}${d.truncated ? "+" : ""} job(s) overdue, the oldest since `, when(d.oldest_due)]
        : "none: every due tick has been handed over"))),
    h("h2", {}, "Recent alerts"),
    value(alerts, (d) => d.items.length ? h("div", { class: "scroll" }, h("table", { id: "alerts" },
      h("thead", {}, h("tr", {}, ["At", "Kind", "Job", "Detail"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, d.items.map((a) => h("tr", {}, h("td", {}, when(a.at)), h("td", {}, a.kind),
        h("td", {}, h("a", { href: `#/jobs/${a.job_id}` }, a.job_id)), h("td", {}, typeof a.detail === "string" ? a.detail : JSON.stringify(a.detail ?? "")))))))
      : h("p", { class: "muted" }, "No alerts.")));
}

// -- Router ----------------------------------------------------------------------------------------
const ROUTES = [
  [/^#\/jobs\/?$/, (m, params) => jobsPage(params)],
  [/^#\/jobs\/([^/]+)$/, (m) => jobPage(decodeURIComponent(m[1]))],
  [/^#\/runs\/([^/]+)$/, (m) => runPage(decodeURIComponent(m[1]))],
  [/^#\/dag\/([^/]+)$/, (m) => dagPage(decodeURIComponent(m[1]))],
  [/^#\/dead-letters\/?$/, () => deadLettersPage()],
  [/^#\/health\/?$/, () => healthPage()],
];

async function route() {
  stopTimers();
  const [path, search] = (location.hash || "#/jobs").split("?");
  const params = new URLSearchParams(search || "");
  for (const [pattern, render] of ROUTES) {
    const m = path.match(pattern);
    if (m) {
      main.dataset.ready = "false";
      try { await render(m, params); } catch (err) { page("Error", failure(err)); }
      // What a test (or a script) waits on: this route's page is fully rendered.
      main.dataset.route = location.hash;
      main.dataset.ready = "true";
      // Time to first render: navigation start to the first page drawn with its API data.
      if (!performance.getEntriesByName("jobsched:first-render").length) performance.mark("jobsched:first-render");
      return;
    }
  }
  page("Not found", h("p", {}, "No such page. "), h("a", { href: "#/jobs" }, "Jobs"));
  main.dataset.route = location.hash;
  main.dataset.ready = "true";
}

function tickCountdowns() {
  for (const el of document.querySelectorAll("[data-countdown]")) el.textContent = relative(el.dataset.countdown);
}

const tenantInput = document.getElementById("tenant");
tenantInput.value = tenant();
document.getElementById("tenant-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setTenant(tenantInput.value);
  tenantInput.value = tenant();
  toast(`Tenant ${tenant()}`);
  route();
});
window.addEventListener("hashchange", route);
setInterval(tickCountdowns, 1000);
if (!location.hash) history.replaceState(null, "", "#/jobs");
route();
