"""The workflows' definitions and their input models cannot drift apart.

Every JSONPath `$.x` a state reads (its Parameters, Choice variables, Wait and Map paths, intrinsic
functions) is resolved against the input model of the way in that reaches that state: the failure
workflow's retry path (FailureInput) and replay path (ReplayInput), and the DAG workflow (DagInput).
A Map's iterator reads its own Parameters (`item` is one element of the list its ItemsPath names).
Paths a state writes (ResultPath) and reads of a task's own result (ResultSelector) are not input.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from jobsched.asl import dag_definition, failure_definition
from jobsched.asl_inputs import DagInput, FailureInput, ReplayInput

Schema = dict[str, Any]
"""A model's fields: a nested Schema for a model, {"[]": Schema} for a list of models, None for a value."""

_PATH = re.compile(r"(?<![\w$])\$\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
_NOT_INPUT = {"ResultSelector", "ResultPath", "Iterator", "ItemProcessor"}


def schema_of(model: type[BaseModel]) -> Schema:
    out: Schema = {}
    for name, info in model.model_fields.items():
        kind, args = typing.get_origin(info.annotation), typing.get_args(info.annotation)
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out[name] = schema_of(info.annotation)
        elif kind is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            out[name] = {"[]": schema_of(args[0])}
        else:
            out[name] = None
    return out


def reads(node: Any, key: str = "") -> Iterator[str]:
    """Every input path a state (or part of one) reads, without descending into a Map's iterator."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k not in _NOT_INPUT:
                yield from reads(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from reads(v, key)
    elif isinstance(node, str) and (key.endswith(".$") or key == "Variable" or key.endswith("Path")):
        yield from _PATH.findall(node)


def reachable(states: dict[str, Any], start: str) -> list[str]:
    seen: list[str] = []
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        state = states[name]
        todo += [n for n in (state.get("Next"), state.get("Default")) if n]
        todo += [c["Next"] for c in state.get("Choices", []) + state.get("Catch", [])]
    return seen


def resolve(schema: Schema, path: str) -> tuple[bool, Any]:
    """Whether `path` ("a.b") names a field of `schema`, and what it names."""
    node: Any = schema
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def problems(states: dict[str, Any], start: str, schema: Schema, where: str) -> Iterator[str]:
    """Paths the states reachable from `start` read that `schema` lacks; fields of it nobody reads."""
    names = reachable(states, start)
    written = {p for n in names for p in _PATH.findall(str(states[n].get("ResultPath") or ""))}
    used: set[str] = set()
    for name in names:
        state = states[name]
        for path in reads(state):
            used.add(path.split(".")[0])
            ok, _ = resolve(schema, path)
            if not ok and not any(path == w or path.startswith(f"{w}.") for w in written):
                yield f"{where}.{name} reads $.{path}, which the input model has no field for"
        if state.get("Type") == "Map":
            inner: Schema = {}
            for param, value in state.get("Parameters", {}).items():
                if value == "$$.Map.Item.Value":
                    _, listed = resolve(schema, _PATH.findall(state["ItemsPath"])[0])
                    inner[param.removesuffix(".$")] = (listed or {}).get("[]")
                else:
                    inner[param.removesuffix(".$")] = resolve(schema, _PATH.findall(value)[0])[1]
            iterator = state.get("Iterator") or state["ItemProcessor"]
            yield from problems(iterator["States"], iterator["StartAt"], inner, f"{where}.{name}")
    yield from (
        f"{where}: field {f} is never read" for f in schema if f not in used and where.count(".") == 0
    )


def failure_start(model: type[FailureInput] | type[ReplayInput]) -> str:
    """The state the failure workflow's router sends this input's `action` to."""
    definition = failure_definition()
    router = definition["States"][definition["StartAt"]]
    action = model.model_fields["action"].default
    return next((c["Next"] for c in router["Choices"] if c.get("StringEquals") == action), router["Default"])


WAYS_IN = [
    ("failure-retry", failure_definition, FailureInput),
    ("failure-replay", failure_definition, ReplayInput),
    ("dag", dag_definition, DagInput),
]


@pytest.mark.parametrize(("where", "definition", "model"), WAYS_IN, ids=[w for w, _, _ in WAYS_IN])
def test_every_path_a_workflow_reads_is_a_field_of_its_input_model(
    where: str, definition: Any, model: type[BaseModel]
) -> None:
    # Given a workflow's definition and the model its callers start it with
    asl = definition()
    states = dict(asl["States"])
    if model in (FailureInput, ReplayInput):
        # the router reads `action`, and every branch of it leads where it sends this way in
        router, start = asl["StartAt"], failure_start(model)
        choices = [{**c, "Next": start} for c in states[router]["Choices"]]
        states[router] = {**states[router], "Choices": choices, "Default": start}
    # When every state reachable from its start is read, then each input path it reads is a field of
    # the model (a Map's items those of the listed model), and every field of the model is read
    assert list(problems(states, asl["StartAt"], schema_of(model), where)) == []


def test_the_drift_check_sees_a_missing_field_and_an_unread_one() -> None:
    # Given a definition reading $.a.b and $.c, and written $.out; a model with a, d (a.b missing)
    class Inner(BaseModel):
        x: int

    class Model(BaseModel):
        a: Inner
        c: int
        d: int

    states = {
        "S": {
            "Type": "Task",
            "Parameters": {"v.$": "$.a.b", "w.$": "States.Format('{}', $.c)", "k": "$.not_a_path"},
            "ResultPath": "$.out",
            "ResultSelector": {"r.$": "$.TaskResult"},
            "Next": "T",
        },
        "T": {"Type": "Choice", "Choices": [{"Variable": "$.out.x", "StringEquals": "1", "Next": "U"}]},
        "U": {"Type": "Succeed"},
    }
    # Then the check names the missing path and the unread field, and nothing else
    assert sorted(problems(states, "S", schema_of(Model), "w")) == [
        "w.S reads $.a.b, which the input model has no field for",
        "w: field d is never read",
    ]
