"""The failure and DAG workflows in the simulator: the ASL of jobsched/asl.py, interpreted.

Why an interpreter rather than a step-for-step model: the control flow the simulator runs IS the
definition CDK deploys (Choice, Wait, Map, Task, Succeed, Fail, Retry with its backoff, Catch,
Parameters with `.$` paths and intrinsics, ResultSelector, ResultPath), so an edit to asl.py changes
the simulation with it. Only the Task states' effects are modelled, by one table (TASKS) from a
Task's (Resource, UpdateExpression, ConditionExpression) to the same conditional write on the
in-memory fakes. A Task the table does not know, or a state name the model has not been told about
(KNOWN_STATES), is a gap that tests/sim/test_workflows.py reports.

Each state is one step on the simulator's loop, `schedule(delay, step)`: a Wait state's delay is the
seconds it waits, a Task's a seeded latency (0 by default), every other state's 0; so the dispatcher,
workers and API calls interleave between any two states, as on AWS. Before a Task's call,
`fault(state)` may raise a transient error (a throttle, a 500); after its write, `fault_after(state)`
may raise one too (a timeout after the write applied). Either goes to the state's Retry (interval,
backoff rate, max attempts, on the schedule), then its Catch, as Step Functions does.

    start(arn, name, input) ── at most one per (arn, name) ──> enter StartAt
    enter(state): Choice | Wait | Task | Map | Succeed | Fail, one scheduled step each
        Task: fault ─> effect on the fakes ─> fault_after ─> ResultSelector/ResultPath ─> Next
              error: Retry (delay = IntervalSeconds * BackoffRate ** n, n < MaxAttempts) ─> Catch ─> fail
        Map:  up to MaxConcurrency iterations at once, each its own walk of the Iterator
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobsched import asl
from jobsched.adapters.memory import MemoryJobStore, MemoryRunQueue, MemoryRunStore
from jobsched.domain import times
from jobsched.domain.models import RunMessage
from jobsched.domain.records import NewRun, Outgoing
from jobsched.domain.status import JobStatus
from jobsched.errors import StoreError, TransientStoreError
from jobsched.ports import Clock
from jobsched.settings import Settings

Schedule = Callable[[float, Callable[[], None]], None]
Json = Any

CONDITION_FAILED = "DynamoDB.ConditionalCheckFailedException"

# Every state of each definition the model knows, by name and type (Map iterators included).
KNOWN_STATES: dict[str, dict[str, str]] = {
    "failure": {
        "Route": "Choice",
        "CanRetry": "Choice",
        "Backoff": "Wait",
        "Rearm": "Task",
        "ReplayRearm": "Task",
        "ReplayOfJobRun": "Choice",
        "RestoreJob": "Task",
        "Enqueue": "Task",
        "DeadLetter": "Task",
        "DeadJobRun": "Choice",
        "FailJob": "Task",
        "AlertWanted": "Choice",
        "RecordAlert": "Task",
        "Alert": "Task",
        "Propagate": "Map",
        "MarkUpstreamFailed": "Task",
        "Marked": "Succeed",
        "Stale": "Succeed",
        "Done": "Succeed",
    },
    "dag": {
        "Dependants": "Map",
        "Count": "Task",
        "Recheck": "Task",
        "Ready": "Choice",
        "Release": "Task",
        "Existing": "Task",
        "StillPending": "Choice",
        "Enqueue": "Task",
        "Waiting": "Succeed",
        "Released": "Succeed",
    },
}
SUPPORTED_TYPES = {"Choice", "Wait", "Task", "Map", "Succeed", "Fail", "Pass"}


class StatesError(Exception):
    """A Step Functions error (its name is what Retry and Catch match)."""

    def __init__(self, error: str, cause: str = "") -> None:
        super().__init__(f"{error}: {cause}" if cause else error)
        self.error = error
        self.cause = cause


# -- JSONPath, intrinsics, Parameters -----------------------------------------------------------------
def _path(doc: Json, path: str, context: Json) -> Json:
    """A reference path ($.a.b, $$.Map.Item.Value); States.Runtime if a field is missing."""
    if path.startswith("$$"):
        doc, rest = context, path[2:]
    elif path.startswith("$"):
        rest = path[1:]
    else:
        raise StatesError("States.Runtime", f"not a path: {path}")
    for part in filter(None, rest.split(".")):
        if not isinstance(doc, Mapping) or part not in doc:
            raise StatesError("States.Runtime", f"{path}: no field {part!r}")
        doc = doc[part]
    return doc


_INTRINSIC = re.compile(r"^(States\.\w+)\((.*)\)$", re.DOTALL)


def _args(text: str) -> list[str]:
    out, current, quoted = [], "", False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == "," and not quoted:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        out.append(current.strip())
    return out


def _value(expr: str, doc: Json, context: Json) -> Json:
    """The value of a `.$` field: a path or an intrinsic function."""
    match = _INTRINSIC.match(expr.strip())
    if not match:
        return _path(doc, expr, context)
    name = match.group(1)
    args = [a[1:-1] if a.startswith("'") else _value(a, doc, context) for a in _args(match.group(2))]
    if name == "States.Format":
        template, *rest = args
        rendered = [v if isinstance(v, str) else json.dumps(v) for v in rest]
        return str(template).format(*rendered)
    if name == "States.Array":
        return list(args)
    if name == "States.JsonToString":
        return json.dumps(args[0], separators=(",", ":"))
    raise StatesError("States.Runtime", f"intrinsic {name} is not modelled")


def _resolve(template: Json, doc: Json, context: Json) -> Json:
    """Parameters / ResultSelector: every `key.$` is replaced by key: its value."""
    if isinstance(template, Mapping):
        out = {}
        for key, value in template.items():
            if key.endswith(".$"):
                out[key[:-2]] = _value(value, doc, context)
            else:
                out[key] = _resolve(value, doc, context)
        return out
    if isinstance(template, list):
        return [_resolve(v, doc, context) for v in template]
    return template


def _place(doc: Json, result: Json, result_path: str | None, *, absent: bool) -> Json:
    """ResultPath: None keeps the input; absent or "$" replaces it; "$.a.b" sets that field."""
    if absent or result_path == "$":
        return result
    if result_path is None:
        return doc
    out = copy.deepcopy(doc)
    parts = [p for p in result_path[1:].split(".") if p]
    target = out
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = result
    return out


def _into(doc: Json, result: Json, state: Mapping[str, Any]) -> Json:
    """A state's result placed into its input by the state's ResultPath."""
    return _place(doc, result, state.get("ResultPath"), absent="ResultPath" not in state)


def _choose(rule: Mapping[str, Any], doc: Json, context: Json) -> bool:
    if "And" in rule:
        return all(_choose(r, doc, context) for r in rule["And"])
    if "Or" in rule:
        return any(_choose(r, doc, context) for r in rule["Or"])
    if "Not" in rule:
        return not _choose(rule["Not"], doc, context)
    value = _path(doc, rule["Variable"], context)
    for op, expected in rule.items():
        if op in ("Variable", "Next"):
            continue
        if op.endswith("Path"):
            op, expected = op[: -len("Path")], _path(doc, expected, context)
        if op in ("BooleanEquals", "StringEquals", "NumericEquals"):
            return bool(value == expected)
        if op == "NumericLessThan":
            return bool(value < expected)
        if op == "NumericGreaterThan":
            return bool(value > expected)
        raise StatesError("States.Runtime", f"Choice operator {op} is not modelled")
    raise StatesError("States.Runtime", f"Choice rule without an operator: {rule}")


# -- the Task table: (Resource, UpdateExpression, ConditionExpression) -> an effect on the fakes --------
def _s(attr: Mapping[str, str]) -> str:
    return attr["S"]


def _n(attr: Mapping[str, str]) -> int:
    return int(attr["N"])


def _key(params: Mapping[str, Any]) -> tuple[str, str]:
    """(job_id, sort key) of a Key {"PK": JOB#<id>, "SK": ...}."""
    pk, sk = _s(params["Key"]["PK"]), _s(params["Key"]["SK"])
    return pk.removeprefix("JOB#"), sk


def _run_key(params: Mapping[str, Any]) -> tuple[str, str]:
    job_id, sk = _key(params)
    return job_id, sk.removeprefix("RUN#")


def _refused(applied: bool) -> Json:
    if not applied:
        raise StatesError(CONDITION_FAILED, "The conditional request failed")
    return {}


@dataclass
class Fakes:
    """What the Task states act on."""

    jobs: MemoryJobStore
    runs: MemoryRunStore
    queue: MemoryRunQueue
    alerts: list[dict[str, Any]]
    recorded: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def _rearm(f: Fakes, p: Mapping[str, Any], v: Mapping[str, Any]) -> Json:
    job_id, sf = _run_key(p)
    return _refused(f.runs.rearm(job_id, sf, attempt=_n(v[":attempt"])))


def _replay_rearm(f: Fakes, p: Mapping[str, Any], v: Mapping[str, Any]) -> Json:
    return _refused(f.runs.replay_rearm(*_run_key(p), replays=_n(v[":replays"])))


def _dead_letter(f: Fakes, p: Mapping[str, Any], v: Mapping[str, Any]) -> Json:
    job_id, sf = _run_key(p)
    dead_at = times.parse_stored(_s(v[":dead_at"]))
    return _refused(
        f.runs.dead_letter_failed(
            job_id,
            sf,
            attempt=_n(v[":attempt"]),
            dl_key=_s(v[":dl_key"]),
            dl_sk=_s(v[":dl_sk"]),
            dead_at=dead_at,
        )
    )


def _job_status(f: Fakes, p: Mapping[str, Any], v: Mapping[str, Any]) -> Json:
    job_id, _ = _key(p)
    applied, _job = f.jobs.set_job_status(
        job_id,
        target=JobStatus(_s(v[":target"])),
        sources=[JobStatus(_s(v[":source"])), *([JobStatus(_s(v[":paused"]))] if ":paused" in v else [])],
        now=times.parse_stored(_s(v[":now"])),
        leave_index=False,  # the ASL's update sets status, updated_at and version only
    )
    return _refused(applied)


def _mark_upstream_failed(f: Fakes, p: Mapping[str, Any], v: Mapping[str, Any]) -> Json:
    job_id, sf = _run_key(p)
    return _refused(
        f.runs.mark_upstream_failed(
            NewRun(job_id, _s(v[":tenant"]), sf, "dependant"),
            reason=_s(v[":why"]),
            now=times.parse_stored(_s(v[":now"])),
        )
    )


def _count(f: Fakes, p: Mapping[str, Any], v: Mapping[str, Any]) -> Json:
    job_id, sk = _key(p)
    upstream_run = _s(v[":run_id"])
    outstanding = f.runs.count_upstream(
        job_id, sk.removeprefix("WAIT#"), fan_in=_n(v[":fan_in"]), upstream_run=upstream_run
    )
    if outstanding is None:
        raise StatesError(CONDITION_FAILED, "The conditional request failed")
    # UPDATED_NEW: the attributes the update set (outstanding, counted).
    counted = sorted(f.runs.waits[(job_id, sk.removeprefix("WAIT#"))][1])
    return {"Attributes": {"outstanding": {"N": str(outstanding)}, "counted": {"SS": counted}}}


def _release(f: Fakes, p: Mapping[str, Any], v: Mapping[str, Any]) -> Json:
    job_id, sf = _run_key(p)
    return _refused(
        f.runs.release_dependant(
            job_id,
            sf,
            run_id=_s(v[":rid"]),
            tenant=_s(v[":tenant"]),
            now=times.parse_stored(_s(v[":now"])),
        )
    )


def _get_item(f: Fakes, p: Mapping[str, Any]) -> Json:
    """GetItem (consistent): the item's attributes the workflows read (status, attempt, outstanding)."""
    job_id, sk = _key(p)
    item: dict[str, Any] = {"PK": p["Key"]["PK"], "SK": p["Key"]["SK"]}
    if sk.startswith("WAIT#"):
        wait = f.runs.waits.get((job_id, sk.removeprefix("WAIT#")))
        if wait is None:
            return {}
        item.update(outstanding={"N": str(wait[0])}, counted={"SS": sorted(wait[1])})
        return {"Item": item}
    row = f.runs.get(job_id, sk.removeprefix("RUN#"))
    if row is None:
        return {}
    item.update(status={"S": row.status.value}, attempt={"N": str(row.attempt)})
    return {"Item": item}


def _send(f: Fakes, p: Mapping[str, Any]) -> Json:
    # No DelaySeconds in the ASL: the message is visible at once (the backoff was the Wait state).
    f.queue.send([Outgoing(RunMessage.model_validate_json(p["MessageBody"]), 0)])
    return {}


def _put_alert(f: Fakes, p: Mapping[str, Any]) -> Json:
    """RecordAlert: the alert item, kept once per key (its ConditionExpression)."""
    key = (p["Item"]["PK"]["S"], p["Item"]["SK"]["S"])
    if key in f.recorded:
        raise StatesError(CONDITION_FAILED, "The conditional request failed")
    f.recorded[key] = dict(p["Item"])
    return {}


def _publish(f: Fakes, p: Mapping[str, Any]) -> Json:
    f.alerts.append({"topic": p["TopicArn"], "subject": p["Subject"], "message": json.loads(p["Message"])})
    return {}


_UpdateOp = Callable[[Fakes, Mapping[str, Any], Mapping[str, Any]], Json]
_CallOp = Callable[[Fakes, Mapping[str, Any]], Json]


# Each updateItem of asl.py, pinned by its (UpdateExpression, ConditionExpression) as the model was
# written against it: an edit of either in asl.py no longer finds its entry (model_gaps reports it).
UPDATES: dict[tuple[str, str], _UpdateOp] = {
    (  # Rearm
        "SET #s = :pending REMOVE lease_owner, lease_until, lease_message",
        "(#s = :failed OR #s = :pending) AND attempt = :attempt",
    ): _rearm,
    (  # ReplayRearm
        "SET #s = :pending, attempt = :zero, replays = :replays "
        "REMOVE dl_key, dl_sk, lease_owner, lease_until, lease_message",
        "#s = :dead OR (#s = :pending AND attempt = :zero AND replays = :replays)",
    ): _replay_rearm,
    (  # DeadLetter
        "SET #s = :dead, dl_key = :dl_key, dl_sk = :dl_sk, dead_at = :dead_at",
        "(#s = :failed OR #s = :dead) AND attempt = :attempt",
    ): _dead_letter,
    (  # RestoreJob
        "SET #s = :target, updated_at = :now ADD version :one",
        "#s = :source",
    ): _job_status,
    (  # FailJob: from PAUSED too (a one-off paused after its tick was due)
        "SET #s = :target, updated_at = :now ADD version :one",
        "#s = :source OR #s = :paused",
    ): _job_status,
    (  # MarkUpstreamFailed
        "SET #s = :upstream_failed, run_id = :rid, job_id = :jid, tenant = :tenant, scheduled_for = :sf,"
        " kind = :kind, reason = :why, attempt = :zero, updated_at = :now, created_at = :now",
        "attribute_not_exists(PK)",
    ): _mark_upstream_failed,
    (  # Count
        "SET outstanding = if_not_exists(outstanding, :fan_in) - :one ADD counted :run",
        "attribute_not_exists(counted) OR NOT contains(counted, :run_id)",
    ): _count,
    (  # Release
        "SET #s = :pending, run_id = :rid, job_id = :jid, tenant = :tenant, "
        "scheduled_for = :sf, attempt = :zero, kind = :kind, updated_at = :now, "
        "created_at = if_not_exists(created_at, :now) REMOVE reason",
        "attribute_not_exists(PK) OR #s = :upstream_failed",
    ): _release,
}


def _walk(states: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
    for name, state in states.items():
        out.append((name, state))
        if state.get("Type") == "Map":
            out += _walk(state["Iterator"]["States"])
    return out


def _walk_all(
    definitions: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[tuple[str, str, Mapping[str, Any]]]:
    definitions = definitions or {"failure": asl.failure_definition(), "dag": asl.dag_definition()}
    return [(m, n, s) for m, d in definitions.items() for n, s in _walk(d["States"])]


CALLS: dict[str, _CallOp] = {
    "arn:aws:states:::dynamodb:getItem": _get_item,
    "arn:aws:states:::sqs:sendMessage": _send,
    "arn:aws:states:::sns:publish": _publish,
    "arn:aws:states:::dynamodb:putItem": _put_alert,
}


def _task_op(state: Mapping[str, Any]) -> Callable[[Fakes, Mapping[str, Any]], Json] | None:
    resource = state.get("Resource", "")
    if resource == "arn:aws:states:::dynamodb:updateItem":
        params = state.get("Parameters", {})
        update = UPDATES.get((params.get("UpdateExpression", ""), params.get("ConditionExpression", "")))
        if update is None:
            return None
        return lambda fakes, p: update(fakes, p, p.get("ExpressionAttributeValues", {}))
    return CALLS.get(resource)


def model_gaps(definitions: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What the model does not know in these definitions: states gained, lost, renamed or retyped,
    and Tasks without an effect in the table. Empty: every state of the ASL is modelled."""
    gaps: list[str] = []
    for machine, definition in definitions.items():
        known = KNOWN_STATES.get(machine, {})
        seen = {name: state.get("Type", "?") for name, state in _walk(definition["States"])}
        for name, kind in seen.items():
            if name not in known:
                gaps.append(f"{machine}: state {name} ({kind}) is not modelled")
            elif known[name] != kind:
                gaps.append(f"{machine}: state {name} is a {kind}, modelled as a {known[name]}")
            if kind not in SUPPORTED_TYPES:
                gaps.append(f"{machine}: state type {kind} ({name}) is not interpreted")
        gaps += [f"{machine}: modelled state {name} is gone" for name in known if name not in seen]
        for name, state in _walk(definition["States"]):
            if state.get("Type") == "Task" and _task_op(state) is None:
                gaps.append(f"{machine}: Task {name} has no modelled effect ({state.get('Resource')})")
    return gaps


# -- executions ------------------------------------------------------------------------------------------
@dataclass
class SimExecution:
    """One execution: its input, the states it entered (Step Functions bills each), how it ended."""

    arn: str
    name: str
    input: dict[str, Any]
    started_at: datetime
    status: str = "RUNNING"  # RUNNING | SUCCEEDED | FAILED
    entered: list[str] = field(default_factory=list)
    ended_in: list[str] = field(default_factory=list)  # the Succeed/Fail states reached (Map: one each)
    error: str | None = None
    retries: int = 0


@dataclass
class _Walk:
    """A position in one (sub-)state machine of an execution."""

    execution: SimExecution
    states: Mapping[str, Any]
    context: dict[str, Any]
    done: Callable[[Json], None]


class SimStateMachines:
    """jobsched.ports.StateMachines on the simulator's loop: the ASL interpreted on the fakes."""

    def __init__(
        self,
        *,
        jobs: MemoryJobStore,
        runs: MemoryRunStore,
        queue: MemoryRunQueue,
        settings: Settings,
        clock: Clock,
        schedule: Schedule,
        fault: Callable[[str], None] = lambda step: None,
        fault_after: Callable[[str], None] = lambda step: None,
        latency: Callable[[str], float] = lambda step: 0.0,
        definitions: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.fakes = Fakes(jobs, runs, queue, self.alerts)
        self.settings, self.clock, self.schedule = settings, clock, schedule
        self.fault, self.fault_after, self.latency = fault, fault_after, latency
        defs = definitions or {"failure": asl.failure_definition(), "dag": asl.dag_definition()}
        self.definitions = {
            settings.failure_workflow_arn: defs["failure"],
            settings.dag_workflow_arn: defs["dag"],
        }
        self.executions: dict[tuple[str, str], SimExecution] = {}

    # -- the port ------------------------------------------------------------------------------------
    def start_failure(self, name: str, payload: Mapping[str, Any]) -> bool:
        """start() on the failure workflow."""
        return self.start(self.settings.failure_workflow_arn, name, payload)

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> bool:
        """Start an execution named `name`; False if that state machine has one of that name."""
        definition = self.definitions.get(state_machine_arn)
        if definition is None:
            raise StoreError(f"no state machine {state_machine_arn}", aws_code="StateMachineDoesNotExist")
        if (state_machine_arn, name) in self.executions:
            return False
        data = json.loads(json.dumps(dict(payload)))  # the input crosses the wire as JSON
        execution = SimExecution(state_machine_arn, name, data, self.clock.now())
        self.executions[(state_machine_arn, name)] = execution

        def finished(_output: Json) -> None:
            execution.status = "SUCCEEDED" if execution.status == "RUNNING" else execution.status

        walk = _Walk(execution, definition["States"], {"Execution": {"Name": name, "Input": data}}, finished)
        self._enter(walk, definition["StartAt"], data)
        return True

    # -- reads for checks ----------------------------------------------------------------------------
    def running(self) -> list[SimExecution]:
        """Executions not yet ended."""
        return [e for e in self.executions.values() if e.status == "RUNNING"]

    def busy(self) -> bool:
        """Whether any execution is still running (the simulator's drain waits for none)."""
        return bool(self.running())

    def failed(self) -> list[SimExecution]:
        """Executions that ended FAILED (an error no Retry or Catch handled)."""
        return [e for e in self.executions.values() if e.status == "FAILED"]

    def transitions(self) -> int:
        """States entered over every execution (what Standard workflows bill)."""
        return sum(len(e.entered) for e in self.executions.values())

    # -- the interpreter -----------------------------------------------------------------------------
    def _enter(self, walk: _Walk, name: str, data: Json) -> None:
        if walk.execution.status != "RUNNING":
            return  # the execution failed elsewhere (a Map iteration): the rest is aborted
        state = walk.states[name]
        walk.execution.entered.append(name)
        kind = state["Type"]
        delay = 0.0
        if kind == "Wait":
            delay = float(
                _path(data, state["SecondsPath"], walk.context)
                if "SecondsPath" in state
                else state["Seconds"]
            )
        elif kind == "Task":
            delay = self.latency(name)
        self.schedule(max(0.0, delay), lambda: self._step(walk, name, data, {}))

    def _step(self, walk: _Walk, name: str, data: Json, tries: dict[int, int]) -> None:
        if walk.execution.status != "RUNNING":
            return
        state = walk.states[name]
        try:
            kind = state["Type"]
            if kind == "Choice":
                following = next(
                    (c["Next"] for c in state["Choices"] if _choose(c, data, walk.context)),
                    state.get("Default"),
                )
                if following is None:
                    raise StatesError("States.NoChoiceMatched", name)
                self._enter(walk, following, data)
            elif kind in ("Wait", "Pass"):
                self._next(walk, state, data)
            elif kind == "Succeed":
                walk.execution.ended_in.append(name)
                walk.done(data)
            elif kind == "Fail":
                walk.execution.ended_in.append(name)
                raise StatesError(state.get("Error", "States.Fail"), state.get("Cause", ""))
            elif kind == "Task":
                self._task(walk, name, state, data, tries)
            elif kind == "Map":
                self._map(walk, state, data)
            else:
                raise StatesError("States.Runtime", f"state type {kind} is not interpreted")
        except StatesError as err:
            self._fail(walk.execution, err)

    def _next(self, walk: _Walk, state: Mapping[str, Any], data: Json) -> None:
        if state.get("End"):
            walk.done(data)
        else:
            self._enter(walk, state["Next"], data)

    def _task(
        self, walk: _Walk, name: str, state: Mapping[str, Any], data: Json, tries: dict[int, int]
    ) -> None:
        op = _task_op(state)
        if op is None:
            raise StatesError("States.Runtime", f"Task {name} has no modelled effect")
        params = _resolve(state.get("Parameters", {}), data, walk.context)
        try:
            try:
                self.fault(name)
                result = op(self.fakes, params)
                self.fault_after(name)
            except TransientStoreError as exc:
                raise StatesError(_transient_name(state["Resource"]), str(exc)) from exc
            if "ResultSelector" in state:
                result = _resolve(state["ResultSelector"], result, walk.context)
        except StatesError as err:
            for i, retrier in enumerate(state.get("Retry", [])):
                if _matches(retrier["ErrorEquals"], err.error):
                    count = tries.get(i, 0)
                    if count < retrier.get("MaxAttempts", 3):
                        wait = retrier.get("IntervalSeconds", 1) * retrier.get("BackoffRate", 2.0) ** count
                        walk.execution.retries += 1
                        again = {**tries, i: count + 1}
                        self.schedule(wait, lambda again=again: self._step(walk, name, data, again))
                        return
                    break  # the first matching retrier decides; exhausted, the Catch is next
            for catcher in state.get("Catch", []):
                if _matches(catcher["ErrorEquals"], err.error):
                    output = {"Error": err.error, "Cause": err.cause}
                    path = catcher.get("ResultPath", "$")
                    self._enter(walk, catcher["Next"], _place(data, output, path, absent=False))
                    return
            raise
        self._next(walk, state, _into(data, result, state))

    def _map(self, walk: _Walk, state: Mapping[str, Any], data: Json) -> None:
        items = list(_path(data, state["ItemsPath"], walk.context))
        iterator = state["Iterator"]
        limit = state.get("MaxConcurrency", 0) or len(items) or 1
        results: list[Json] = [None] * len(items)
        pending = list(range(len(items)))
        left = [len(items)]

        def launch() -> None:
            index = pending.pop(0)
            context = {**walk.context, "Map": {"Item": {"Index": index, "Value": items[index]}}}
            params = state.get("Parameters")
            item_input = _resolve(params, data, context) if params else items[index]
            sub = _Walk(walk.execution, iterator["States"], context, lambda out: finish(index, out))
            self._enter(sub, iterator["StartAt"], item_input)

        def finish(index: int, output: Json) -> None:
            results[index] = output
            left[0] -= 1
            if pending:
                launch()
            elif left[0] == 0:
                self._next(
                    walk,
                    state,
                    _into(data, results, state),
                )

        if not items:
            self._next(walk, state, _into(data, [], state))
            return
        for _ in range(min(limit, len(items))):
            launch()

    @staticmethod
    def _fail(execution: SimExecution, err: StatesError) -> None:
        execution.status = "FAILED"
        execution.error = err.error


def _matches(names: list[str], error: str) -> bool:
    return error in names or "States.ALL" in names


def _transient_name(resource: str) -> str:
    """The error Step Functions reports for a throttle or 5xx of the integrated service."""
    if ":dynamodb:" in resource:
        return "DynamoDB.ThrottlingException"
    if ":sqs:" in resource:
        return "SQS.SdkClientException"
    if ":sns:" in resource:
        return "SNS.SdkClientException"
    return "States.TaskFailed"
