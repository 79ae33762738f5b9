"""`python -m jobsched.local.ecsworker`: the ECS worker as the local stack runs it, in a child process.

jobsched.ecsworker's own main (the Fargate task's command), plus what the task's log driver does on
AWS, played: the lines logged in a run's scope (a Python handler's, a container target's output:
jobsched.adapters.targets.local_process) go to the worker's log group in the embedded AWS, so
GET /api/runs/{id}/logs answers them for ECS-placed runs too. The stack's environment names the group
and the endpoint (AWS_ENDPOINT_URL, which boto3 reads).
"""

from __future__ import annotations

import os
import sys

import boto3

from jobsched import constants as c
from jobsched import ecsworker
from jobsched.local.runlogs import ship_run_logs


def main() -> int:
    """Ship the runs' lines, then serve as the ECS worker does."""
    group = os.environ.get(c.WORKER_LOG_GROUP_ENV)
    if group:
        ship_run_logs(
            ecsworker.logger, client=boto3.client("logs"), log_group=group, stream=f"local-ecs/{os.getpid()}"
        )
    return ecsworker.main()


if __name__ == "__main__":
    sys.exit(main())
