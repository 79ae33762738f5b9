"""The CDK app: builds the Lambda layer, instantiates the stack (cdk-nag on), synthesizes into cdk.out/.

Runs offline: `python infra/app.py` (`cdk synth` runs the same). JOBSCHED_LAYER_NO_DEPS=1 builds
the layer without its pip dependencies: fast and offline, but not deployable.
"""

from __future__ import annotations

import os

from jobsched_infra.layer import build_layer
from jobsched_infra.project import REPO_ROOT
from jobsched_infra.stack import JobschedStack, new_app

app = new_app(outdir=os.environ.get("CDK_OUTDIR") or str(REPO_ROOT / "cdk.out"))
with_dependencies = os.environ.get("JOBSCHED_LAYER_NO_DEPS") != "1"
layer_dir = build_layer(REPO_ROOT / "build" / "layer", with_dependencies=with_dependencies)
# Fleet sizing (see `jobsched capacity`):
# `cdk deploy -c shards=24 -c dispatcher_invocations=6 -c dispatch_pace=750`.
options = {
    key: int(app.node.try_get_context(name))
    for key, name in (
        ("shard_count", "shards"),
        ("dispatcher_invocations", "dispatcher_invocations"),
        ("dispatch_pace", "dispatch_pace"),
    )
    if app.node.try_get_context(name) is not None
}
JobschedStack(
    app,
    "Jobsched",
    layer_dir=layer_dir,
    description="jobsched: a serverless distributed job scheduler",
    **options,
)
app.synth()
