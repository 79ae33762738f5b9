"""The CDK app: instantiates the stack (cdk-nag on) and synthesizes it into cdk.out/; nothing else.

Runs offline: `make synth` builds the Lambda layer into build/layer (infra/build_layer.py), then runs
this (`cdk synth` runs the same). The layer is an input: `-c layer_dir=DIR` takes another directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from jobsched_infra.project import LAYER_DIR, REPO_ROOT
from jobsched_infra.stack import JobschedStack, new_app

app = new_app(outdir=os.environ.get("CDK_OUTDIR") or str(REPO_ROOT / "cdk.out"))
layer_dir = Path(app.node.try_get_context("layer_dir") or LAYER_DIR)
# Fleet sizing (see `jobsched capacity`):
# `cdk deploy -c shards=24 -c dispatcher_invocations=6 -c dispatch_pace=750`.
options = {
    key: int(app.node.try_get_context(name))
    for key, name in (
        ("shard_count", "shards"),
        ("dispatcher_invocations", "dispatcher_invocations"),
        ("dispatch_pace", "dispatch_pace"),
        ("worker_invocations", "worker_invocations"),
        # The account's Fargate On-Demand vCPU quota (Service Quotas L-3032A538), if raised from 6.
        ("fargate_vcpu_quota", "fargate_vcpu_quota"),
    )
    if app.node.try_get_context(name) is not None
}
# The user's handlers: `cdk deploy -c handler_dir=./myjobs -c handler_modules=myjobs.tasks[,myjobs.more]`
# (the directory relative to where cdk runs); the demo handlers only with `-c demo_handlers=true`.
handler_dir = app.node.try_get_context("handler_dir")
handler_modules = [m.strip() for m in str(app.node.try_get_context("handler_modules") or "").split(",")]
# Hardening switches: `-c kms=aws-owned` (AWS-owned/managed keys, no customer-managed key), `-c waf=true`.
kms_keys = app.node.try_get_context("kms") or "customer"
if kms_keys not in ("customer", "aws-owned"):
    raise SystemExit(f"-c kms must be customer or aws-owned, got {kms_keys!r}")
waf = str(app.node.try_get_context("waf") or "false").lower() == "true"
# The roles callers' own container task definitions name, which RunTask must pass:
# `-c container_task_roles=arn:aws:iam::123456789012:role/report-task[,...]` (none by default).
container_task_roles = [
    r.strip() for r in str(app.node.try_get_context("container_task_roles") or "").split(",") if r.strip()
]
JobschedStack(
    app,
    "Jobsched",
    layer_dir=layer_dir,
    handler_dir=Path(handler_dir) if handler_dir else None,
    handler_modules=[m for m in handler_modules if m],
    demo_handlers=str(app.node.try_get_context("demo_handlers")).lower() == "true",
    description="jobsched: a serverless distributed job scheduler",
    kms_keys=kms_keys,
    waf=waf,
    container_task_roles=container_task_roles,
    **options,
)
app.synth()
