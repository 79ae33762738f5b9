"""The stack synthesized as infra/app.py does it (cdk-nag on), and ways to read the template back."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from aws_cdk import CfnElement
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template

from jobsched_infra.layer import build_layer
from jobsched_infra.stack import JobschedStack, new_app


@dataclass(frozen=True)
class Synth:
    stack: JobschedStack
    template: Template
    assembly_dir: Path

    def logical_id(self, element: Any) -> str:
        """The CloudFormation logical id of a construct's (or an L1's) resource."""
        cfn = element if isinstance(element, CfnElement) else element.node.default_child
        return cast(str, self.stack.resolve(self.stack.get_logical_id(cfn)))

    def resource(self, logical_id: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.template.to_json()["Resources"][logical_id])

    def function(self, name: str) -> lambda_.Function:
        if name == "task_events":  # a function of its own, on no queue nor API
            return self.stack.task_events.function
        owner = {
            "api": self.stack.api,
            "dispatcher": self.stack.dispatch,
            "worker": self.stack.workers,
            "reconciler": self.stack.reconciler,
        }[name]
        return owner.entry_point.function

    def role_statements(self, role: iam.IRole) -> list[dict[str, Any]]:
        """Every statement of the identity policies attached to `role`."""
        role_id = self.logical_id(role)
        policies = self.template.find_resources(
            "AWS::IAM::Policy", {"Properties": {"Roles": Match.array_with([{"Ref": role_id}])}}
        )
        assert policies, f"no policy attached to {role_id}"
        return [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]

    def policy_statements(self, name: str) -> list[dict[str, Any]]:
        """Every statement of the identity policies attached to function `name`'s role."""
        role = self.function(name).role
        assert role is not None
        return self.role_statements(role)

    def actions_on(self, name: str, logical_id: str) -> set[str]:
        """The actions function `name` is allowed on resource `logical_id` (its ARN or anything under it)."""
        actions: set[str] = set()
        for statement in self.policy_statements(name):
            if statement["Effect"] == "Allow" and logical_id in json.dumps(statement["Resource"]):
                actions |= listed_actions(statement)
        return actions


def synthesize(tmp: Path, **options: Any) -> Synth:
    """Synthesize the stack into `tmp` with a no-deps layer; raises on an unacknowledged nag error."""
    app = new_app(outdir=str(tmp / "cdk.out"))
    stack = JobschedStack(
        app, "Jobsched", layer_dir=build_layer(tmp / "layer", with_dependencies=False), **options
    )
    assembly = app.synth()
    return Synth(stack=stack, template=Template.from_stack(stack), assembly_dir=Path(assembly.directory))


@functools.cache
def shared_synth() -> Synth:
    """The default stack, synthesized once per test session (each synth takes seconds of CPU).

    Every module's `synth` fixture returns this one: tests read the template and never change it.
    """
    out = Path(tempfile.mkdtemp(prefix="jobsched-synth-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    return synthesize(out)


def listed_actions(statement: dict[str, Any]) -> set[str]:
    """A statement's Action as a set (IAM allows a single string or a list)."""
    listed = statement["Action"]
    return {listed} if isinstance(listed, str) else set(listed)


def state_machine_definition(resource: dict[str, Any], *, partition: str = "aws") -> dict[str, Any]:
    """The ASL of an AWS::StepFunctions::StateMachine resource, parsed, as deployed in `partition`.

    CDK writes DefinitionString as a plain string, or as an Fn::Join when the definition holds
    deploy-time values. Only literal parts can be compared with a local definition, so any other
    part fails here, naming it. The one DefinitionSubstitution allowed is the stack's partition
    (AWS::Partition), replaced by `partition`.
    """
    props = resource["Properties"]
    raw = props["DefinitionString"]
    if isinstance(raw, dict):
        ((intrinsic, args),) = raw.items()
        assert intrinsic == "Fn::Join", f"DefinitionString is {intrinsic}, not a string or Fn::Join"
        separator, parts = args
        tokens = [p for p in parts if not isinstance(p, str)]
        assert not tokens, f"the definition holds deploy-time values: {tokens}"
        raw = separator.join(parts)
    for name, value in props.get("DefinitionSubstitutions", {}).items():
        assert value == {"Ref": "AWS::Partition"}, f"substitution {name} is {value}, not the partition"
        raw = raw.replace("${" + name + "}", partition)
    return cast(dict[str, Any], json.loads(raw))


def task_resources(definition: dict[str, Any]) -> set[str]:
    """The Resource of every Task state of an ASL definition, in Map iterators and Parallel branches too."""
    found: set[str] = set()
    for state in definition["States"].values():
        if state["Type"] == "Task":
            found.add(state["Resource"])
        nested = [state.get("Iterator"), state.get("ItemProcessor"), *state.get("Branches", [])]
        for machine in filter(None, nested):
            found |= task_resources(machine)
    return found
