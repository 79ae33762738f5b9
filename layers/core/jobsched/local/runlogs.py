"""Lambda's and Fargate's log delivery, played by the local stack: a run's lines go to the worker's log
group in the embedded AWS, where GET /api/runs/{id}/logs reads them, as on AWS."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from jobsched.adapters.logs import ShipRunLines

if TYPE_CHECKING:
    from mypy_boto3_logs import CloudWatchLogsClient


def ship_run_logs(
    logger: Logger, *, client: CloudWatchLogsClient, log_group: str, stream: str
) -> ShipRunLines:
    """Ship the lines logged inside a run's scope in this process, formatted as `logger` formats them.

    At INFO whatever the console's level: the console (POWERTOOLS_LOG_LEVEL, WARNING locally) stays
    quiet, the run's lines are kept. On the root only: `logger` propagates to it (its console
    handler prints it, and the root's console handler filters it out: see
    jobsched.logcontext.route_stdlib_logs), and so do a handler's own `logging` lines and a
    container's (jobsched.adapters.targets.local_process).
    """
    shipper = ShipRunLines(client, log_group, stream=stream)
    shipper.setFormatter(logger.registered_formatter)
    console_level = logger.log_level
    logging.getLogger().addHandler(shipper)
    for name in ("", logger.service):
        target = logging.getLogger(name)
        for handler in target.handlers:
            if handler is not shipper and handler.level == logging.NOTSET:
                handler.setLevel(console_level)
        target.setLevel(min(logging.INFO, console_level))
    return shipper
