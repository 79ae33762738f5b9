"""Compute placement: where a job's runs execute (the Lambda worker or an ECS Fargate task), and at what size.

A job may declare `resources` (CPU units, 1024 = 1 vCPU, and memory in MiB) and `runs_on`. Placement
is a pure function of those and the job's timeout, so the API answers it, the dispatcher routes by
it and the worker checks it the same way, and it is never stored (only what the caller asked is):

    runs_on given ──> "lambda": the Lambda worker must fit (timeout, memory, CPU), else 400 `runs_on`
         │            "ecs":    the smallest Fargate size that fits (best fit)
         └ absent ──> the Lambda worker when it fits, else the smallest Fargate size that fits

The Lambda worker is one function (resources.WORKER_TIMEOUT_SECONDS, resources.WORKER_MEMORY_MIB,
the same constants CDK deploys it with). Its CPU is Lambda's share of one vCPU per 1,769 MB, so a
job asking for more CPU than that goes to Fargate too: Lambda would give it less than it asked.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from jobsched import resources
from jobsched.domain.placement import MAX_GPUS

RunsOn = Literal["lambda", "ecs"]

GIB = 1024


def _steps(low_gib: int, high_gib: int, step_gib: int) -> tuple[int, ...]:
    return tuple(range(low_gib * GIB, high_gib * GIB + 1, step_gib * GIB))


# The one table of valid Fargate sizes (Linux): CPU units -> the memory sizes (MiB) each takes.
FARGATE_SIZES: dict[int, tuple[int, ...]] = {
    256: (512, 1 * GIB, 2 * GIB),
    512: _steps(1, 4, 1),
    1024: _steps(2, 8, 1),
    2048: _steps(4, 16, 1),
    4096: _steps(8, 30, 1),
    8192: _steps(16, 60, 4),
    16384: _steps(32, 120, 8),
}
MAX_FARGATE_CPU = max(FARGATE_SIZES)
MAX_FARGATE_MEMORY_MIB = max(max(m) for m in FARGATE_SIZES.values())
# Lambda allocates CPU in proportion to memory: one full vCPU (1024 units) at 1,769 MB.
LAMBDA_MIB_PER_VCPU = 1769
LAMBDA_WORKER_CPU = resources.WORKER_MEMORY_MIB * 1024 // LAMBDA_MIB_PER_VCPU


class Resources(BaseModel):
    """What one run needs: CPU units (1024 = 1 vCPU) and memory in MiB; each bounded by Fargate's largest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu: int = Field(default=256, ge=1, le=MAX_FARGATE_CPU)
    """CPU units (ECS's unit: 1024 is one vCPU)."""
    memory_mib: int = Field(default=512, ge=1, le=MAX_FARGATE_MEMORY_MIB)
    """Memory in MiB."""
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS)
    """Whole GPUs: only a worker pool's machines have them (domain.placement)."""


class Placement(BaseModel):
    """Where a job's runs execute and the size they get there (what the API answers as resolved)."""

    model_config = ConfigDict(frozen=True)

    runs_on: RunsOn
    resources: Resources


class DoesNotFit(ValueError):
    """The request cannot be placed; `field` names the request field at fault (for the 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


LAMBDA_WORKER = Resources(cpu=LAMBDA_WORKER_CPU, memory_mib=resources.WORKER_MEMORY_MIB)
ECS_WORKER = Resources(cpu=resources.ECS_WORKER_CPU, memory_mib=resources.ECS_WORKER_MEMORY_MIB)
"""The ECS worker's own task size (its task definition): the most a Python run gets inside it."""


def lambda_fits(timeout_seconds: int | None, wanted: Resources | None) -> bool:
    """Whether the Lambda worker gives a run this timeout (None: no timeout of its own), memory and CPU."""
    if timeout_seconds is not None and timeout_seconds > resources.WORKER_TIMEOUT_SECONDS:
        return False
    if wanted is None:
        return True
    return wanted.memory_mib <= LAMBDA_WORKER.memory_mib and wanted.cpu <= LAMBDA_WORKER.cpu


def needs_own_task(placed: Resources) -> bool:
    """Whether an ECS-placed Python run is bigger than the ECS worker's task (more CPU or more memory),
    so the worker runs it in a Fargate task of its own at its placed size instead of in-process.

    The rule is the task's size, not a run's share of it (the worker runs several at once): a share
    would send most runs to a task of their own, each paying a task's start (about a minute), while a
    run within the task's size gets at least what it asked whenever the task's other runs are idle.
    """
    return placed.cpu > ECS_WORKER.cpu or placed.memory_mib > ECS_WORKER.memory_mib


def fargate_size(wanted: Resources | None) -> Resources:
    """The smallest valid Fargate size with at least the CPU and memory asked (CPU first, then memory)."""
    want = wanted or Resources()
    for cpu in sorted(FARGATE_SIZES):
        if cpu < want.cpu:
            continue
        for memory in FARGATE_SIZES[cpu]:
            if memory >= want.memory_mib:
                return Resources(cpu=cpu, memory_mib=memory)
    raise DoesNotFit("resources", f"no Fargate size has {want.cpu} CPU units and {want.memory_mib} MiB")


def place(timeout_seconds: int | None, wanted: Resources | None, runs_on: RunsOn | None) -> Placement:
    """Where the job's runs go (see the module docstring); DoesNotFit names the field a 400 blames."""
    if wanted is not None and wanted.gpus:
        raise DoesNotFit("resources.gpus", "only worker pools have GPUs: use a target of type worker")
    if runs_on == "lambda" or (runs_on is None and lambda_fits(timeout_seconds, wanted)):
        if not lambda_fits(timeout_seconds, wanted):
            raise DoesNotFit(
                "runs_on",
                f"the Lambda worker gives at most {resources.WORKER_TIMEOUT_SECONDS} s, "
                f"{LAMBDA_WORKER.memory_mib} MiB and {LAMBDA_WORKER.cpu} CPU units; "
                "leave runs_on out (or use ecs) for a longer or bigger run",
            )
        return Placement(runs_on="lambda", resources=LAMBDA_WORKER)
    return Placement(runs_on="ecs", resources=fargate_size(wanted))
