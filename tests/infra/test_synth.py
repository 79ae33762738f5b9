"""Reading a state machine's definition back from a template, whichever way CDK wrote it."""

from __future__ import annotations

import json

import pytest

from tests.infra.synth import state_machine_definition, task_resources

ASL = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}


def _machine(definition: object) -> dict[str, object]:
    return {"Type": "AWS::StepFunctions::StateMachine", "Properties": {"DefinitionString": definition}}


def test_it_reads_a_definition_written_as_a_plain_string() -> None:
    assert state_machine_definition(_machine(json.dumps(ASL))) == ASL


def test_it_reads_a_definition_written_as_an_fn_join_of_literals() -> None:
    text = json.dumps(ASL)
    joined = {"Fn::Join": ["", [text[:10], text[10:25], text[25:]]]}

    assert state_machine_definition(_machine(joined)) == ASL


def test_it_refuses_a_definition_holding_deploy_time_values() -> None:
    joined = {"Fn::Join": ["", ['{"StartAt": "', {"Ref": "AWS::Region"}, '"}']]}

    with pytest.raises(AssertionError, match="deploy-time values"):
        state_machine_definition(_machine(joined))


def _task(resource: str, *, then: str | None = None) -> dict[str, object]:
    return {"Type": "Task", "Resource": resource, **({"Next": then} if then else {"End": True})}


def test_it_finds_task_resources_at_the_top_and_inside_maps_and_parallel_branches() -> None:
    definition = {
        "StartAt": "Top",
        "States": {
            "Top": _task("arn:aws:states:::sns:publish", then="Each"),
            "Each": {
                "Type": "Map",
                "Iterator": {"StartAt": "A", "States": {"A": _task("arn:aws:states:::dynamodb:getItem")}},
                "Next": "Processor",
            },
            "Processor": {
                "Type": "Map",
                "ItemProcessor": {"StartAt": "B", "States": {"B": _task("arn:aws:states:::sqs:sendMessage")}},
                "Next": "Both",
            },
            "Both": {
                "Type": "Parallel",
                "Branches": [
                    {"StartAt": "C", "States": {"C": _task("arn:aws:states:::dynamodb:updateItem")}},
                    {"StartAt": "D", "States": {"D": {"Type": "Succeed"}}},
                ],
                "End": True,
            },
        },
    }

    assert task_resources(definition) == {
        "arn:aws:states:::sns:publish",
        "arn:aws:states:::dynamodb:getItem",
        "arn:aws:states:::sqs:sendMessage",
        "arn:aws:states:::dynamodb:updateItem",
    }
