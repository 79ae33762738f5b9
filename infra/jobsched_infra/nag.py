"""Acknowledging cdk-nag (v3) findings through CDK's Validations, so the report keeps each reason."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, rule: str, reason: str, *, finding: str | None = None) -> None:
    """Accept AwsSolutions-`rule` (one `finding` of it, if given) on `scope` and below, for `reason`.

    The "<plugin>::<rule>" id is what CDK matches against the plugin's report, so the finding is
    listed with its reason under suppressedViolations in cdk.out/validation-report.json.
    """
    rule_id = f"{PACK}-{rule}" + (f"[{finding}]" if finding else "")
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{PACK}::{rule_id}", reason=reason))
