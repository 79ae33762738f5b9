"""Acknowledging cdk-nag (v3) findings through CDK's Validations, so the report keeps each reason.

Four packs run (jobsched_infra.stack.new_app): AwsSolutions, HIPAA.Security, NIST.800.53.R5 and
Serverless. Each acknowledgement names its pack and rule and says why, next to the resource.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

PACK = "AwsSolutions"
HIPAA = "HIPAA.Security"
NIST = "NIST.800.53.R5"
SERVERLESS = "Serverless"
PACKS = (PACK, HIPAA, NIST, SERVERLESS)


def acknowledge(
    scope: IConstruct, rule: str, reason: str, *, finding: str | None = None, pack: str = PACK
) -> None:
    """Accept `pack`-`rule` (one `finding` of it, if given) on `scope` and below, for `reason`.

    The "<plugin>::<rule>" id is what CDK matches against the plugin's report, so the finding is
    listed with its reason under suppressedViolations in cdk.out/validation-report.json.
    """
    rule_id = f"{pack}-{rule}" + (f"[{finding}]" if finding else "")
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{pack}::{rule_id}", reason=reason))


def acknowledge_in(scope: IConstruct, rule: str, reason: str, *, packs: tuple[str, ...]) -> None:
    """The same rule of several packs (HIPAA and NIST share many), for one reason."""
    for pack in packs:
        acknowledge(scope, rule, reason, pack=pack)
