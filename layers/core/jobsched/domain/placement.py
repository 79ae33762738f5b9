"""Placement of worker-pool runs on workers: best fit per run, first-fit-decreasing for a batch.

Pure: no I/O, no clock. The workers store (ports.WorkerStore) applies a placement with a
conditional write on the worker it names, so a placement computed from a stale view is refused,
never oversubscribes (services/workers.py retries it on a fresh read).

"Fits most tightly" (the seed's smallest free slot that fits) is the worker that is left with the
least slack after the run is placed, compared scarcest resource first: GPUs, then memory, then
CPU, then the worker id (a stable order, so two placers given one view choose alike). GPUs lead
because a GPU run placed on a GPU-less worker is impossible, and a CPU run placed on a GPU worker
strands GPUs: a GPU-less worker that fits always wins over a GPU worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

MAX_CPU_UNITS = 1_048_576
MAX_MEMORY_MIB = 16_777_216
MAX_GPUS = 1024


class Resources(BaseModel):
    """An amount of worker capacity: CPU units (1024 = one vCPU, as ECS counts), memory, GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu: int = Field(default=0, ge=0, le=MAX_CPU_UNITS)
    """CPU units: 1024 is one vCPU."""
    memory_mib: int = Field(default=0, ge=0, le=MAX_MEMORY_MIB)
    """Memory in MiB."""
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS)
    """Whole GPUs."""

    def fits_in(self, free: Resources) -> bool:
        """Whether this request fits in `free`, every resource at once."""
        return self.cpu <= free.cpu and self.memory_mib <= free.memory_mib and self.gpus <= free.gpus

    def minus(self, other: Resources) -> Resources:
        """What is left of this amount once `other` is taken (ValueError if it does not fit)."""
        if not other.fits_in(self):
            raise ValueError("does not fit")
        return Resources(
            cpu=self.cpu - other.cpu,
            memory_mib=self.memory_mib - other.memory_mib,
            gpus=self.gpus - other.gpus,
        )

    def plus(self, other: Resources) -> Resources:
        """The sum of two amounts."""
        return Resources(
            cpu=self.cpu + other.cpu,
            memory_mib=self.memory_mib + other.memory_mib,
            gpus=self.gpus + other.gpus,
        )


@dataclass(frozen=True, slots=True)
class Slot:
    """A live worker as placement sees it: its id, what it has free now, its labels."""

    worker_id: str
    free: Resources
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request:
    """A run waiting for a worker: what it needs, and the labels a worker must carry."""

    run_id: str
    resources: Resources
    labels: Mapping[str, str] = field(default_factory=dict)


def labels_match(wanted: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a worker's `labels` carry every wanted key with the wanted value."""
    return all(labels.get(key) == value for key, value in wanted.items())


def _slack(slot: Slot, request: Request) -> tuple[int, int, int, str]:
    left = slot.free.minus(request.resources)
    return (left.gpus, left.memory_mib, left.cpu, slot.worker_id)


def best_fit(request: Request, slots: Iterable[Slot]) -> str | None:
    """The worker the request fits most tightly (see the module docstring), or None if none fits."""
    fitting = [
        slot
        for slot in slots
        if request.resources.fits_in(slot.free) and labels_match(request.labels, slot.labels)
    ]
    if not fitting:
        return None
    return min(fitting, key=lambda slot: _slack(slot, request)).worker_id


def _size(request: Request) -> tuple[int, int, int, str]:
    res = request.resources
    return (-res.gpus, -res.memory_mib, -res.cpu, request.run_id)


def first_fit_decreasing(
    requests: Sequence[Request], slots: Sequence[Slot]
) -> tuple[dict[str, str], list[Request]]:
    """Place a batch: largest request first (scarcest resource first), each on the first worker
    (in the given order) that still fits it; answers run_id -> worker_id and the requests that fit
    nowhere, in their given order (oldest first when the caller gave them oldest first)."""
    free = {slot.worker_id: slot.free for slot in slots}
    placed: dict[str, str] = {}
    for request in sorted(requests, key=_size):
        for slot in slots:
            if request.resources.fits_in(free[slot.worker_id]) and labels_match(request.labels, slot.labels):
                free[slot.worker_id] = free[slot.worker_id].minus(request.resources)
                placed[request.run_id] = slot.worker_id
                break
    unplaced = [request for request in requests if request.run_id not in placed]
    return placed, unplaced


def place_each_best_fit(
    requests: Sequence[Request], slots: Sequence[Slot]
) -> tuple[dict[str, str], list[Request]]:
    """Place requests one at a time in the given order (oldest first), each by best fit on what the
    earlier ones left free: the pool queue's order. Answers run_id -> worker_id and the rest."""
    current = {slot.worker_id: slot for slot in slots}
    placed: dict[str, str] = {}
    unplaced: list[Request] = []
    for request in requests:
        chosen = best_fit(request, current.values())
        if chosen is None:
            unplaced.append(request)
            continue
        slot = current[chosen]
        current[chosen] = Slot(slot.worker_id, slot.free.minus(request.resources), slot.labels)
        placed[request.run_id] = chosen
    return placed, unplaced
