"""A user's own CDK app with jobsched inside it: the scheduler construct, their handlers, their stack.

    cd examples/my_app && npx aws-cdk@2 deploy          # cdk.json runs this file

Outside this repository, put jobsched's CDK package on the path (PYTHONPATH=<jobsched>/infra, or
vendor infra/jobsched_infra) and install jobsched itself (`pip install <jobsched>`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aws_cdk import App, CfnOutput, Stack

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "infra"))  # this repository's infra/, for the example

from jobsched_infra.stack import JobschedScheduler  # noqa: E402

app = App(outdir=os.environ.get("CDK_OUTDIR") or None)
stack = Stack(app, "MyApp", description="my app, with jobsched running myjobs.tasks")
scheduler = JobschedScheduler(
    stack,
    "Scheduler",
    handler_dir=HERE / "myjobs",  # a package: shipped as myjobs/ on every function's path
    handler_modules=["myjobs.tasks"],
    demo_handlers=False,
    shard_count=4,
)
CfnOutput(stack, "SchedulerApiUrl", value=scheduler.api.rest_api.url)
app.synth()
