"""Placement of worker-pool runs (jobsched.domain.placement): best fit and first-fit-decreasing.

Property tests draw pools of workers and bursts of runs; whatever they draw, no worker is ever
given more than it has free, every placed run fits the worker it is placed on (labels too), and
best fit picks the worker left with the least slack.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from jobsched.domain.placement import (
    Request,
    Resources,
    Slot,
    best_fit,
    first_fit_decreasing,
    labels_match,
    place_each_best_fit,
)

resources = st.builds(
    Resources,
    cpu=st.integers(0, 16_384),
    memory_mib=st.integers(0, 65_536),
    gpus=st.integers(0, 4),
)
label_sets = st.dictionaries(st.sampled_from(["zone", "arch"]), st.sampled_from(["a", "b"]), max_size=2)
slots = st.lists(
    st.builds(Slot, worker_id=st.uuids().map(str), free=resources, labels=label_sets),
    max_size=6,
    unique_by=lambda slot: slot.worker_id,
)
requests = st.lists(
    st.builds(Request, run_id=st.uuids().map(str), resources=resources, labels=label_sets),
    max_size=20,
    unique_by=lambda request: request.run_id,
)


def _assert_never_oversubscribed(placed: dict[str, str], batch: list[Request], pool: list[Slot]) -> None:
    by_id = {request.run_id: request for request in batch}
    taken: dict[str, Resources] = defaultdict(Resources)
    for run_id, worker_id in placed.items():
        taken[worker_id] = taken[worker_id].plus(by_id[run_id].resources)
    for slot in pool:
        assert taken[slot.worker_id].fits_in(slot.free), (slot, taken[slot.worker_id])


def _assert_every_placed_run_fits(placed: dict[str, str], batch: list[Request], pool: list[Slot]) -> None:
    by_worker = {slot.worker_id: slot for slot in pool}
    for request in batch:
        if request.run_id in placed:
            slot = by_worker[placed[request.run_id]]
            assert request.resources.fits_in(slot.free)
            assert labels_match(request.labels, slot.labels)


@settings(max_examples=300, deadline=None)
@given(batch=requests, pool=slots)
def test_first_fit_decreasing_never_oversubscribes_a_worker_and_places_only_what_fits(
    batch: list[Request], pool: list[Slot]
) -> None:
    # Given any pool and any burst; When first-fit-decreasing places the burst
    placed, unplaced = first_fit_decreasing(batch, pool)
    # Then no worker holds more than it had free, and every placed run fits its worker
    _assert_never_oversubscribed(placed, batch, pool)
    _assert_every_placed_run_fits(placed, batch, pool)
    # And every run is either placed or left waiting, never both, never dropped
    assert {r.run_id for r in unplaced} | set(placed) == {r.run_id for r in batch}
    assert not {r.run_id for r in unplaced} & set(placed)


@settings(max_examples=300, deadline=None)
@given(batch=requests, pool=slots)
def test_best_fit_in_queue_order_never_oversubscribes_and_keeps_the_waiting_oldest_first(
    batch: list[Request], pool: list[Slot]
) -> None:
    # Given any pool and any queue (oldest first); When each run is placed by best fit in order
    placed, unplaced = place_each_best_fit(batch, pool)
    # Then nothing is oversubscribed and every placed run fits
    _assert_never_oversubscribed(placed, batch, pool)
    _assert_every_placed_run_fits(placed, batch, pool)
    # And the waiting keep the queue's order
    order = [r.run_id for r in batch]
    assert [r.run_id for r in unplaced] == [rid for rid in order if rid not in placed]


@settings(max_examples=300, deadline=None)
@given(request=requests.filter(bool).map(lambda batch: batch[0]), pool=slots)
def test_best_fit_picks_the_fitting_worker_left_with_the_least_slack(
    request: Request, pool: list[Slot]
) -> None:
    # Given any pool; When best fit places one run
    chosen = best_fit(request, pool)
    fitting = [
        slot
        for slot in pool
        if request.resources.fits_in(slot.free) and labels_match(request.labels, slot.labels)
    ]
    # Then it answers None exactly when nothing fits
    assert (chosen is None) == (not fitting)
    if chosen is None:
        return

    # And no fitting worker would be left tighter (GPUs, then memory, then CPU)
    def slack(slot: Slot) -> tuple[int, int, int]:
        left = slot.free.minus(request.resources)
        return (left.gpus, left.memory_mib, left.cpu)

    best = next(slot for slot in fitting if slot.worker_id == chosen)
    assert all(slack(best) <= slack(slot) for slot in fitting)


def test_it_places_a_run_on_the_smallest_free_slot_that_fits() -> None:
    # Given three workers with 8, 2 and 4 vCPUs free
    pool = [
        Slot("big", Resources(cpu=8192, memory_mib=32_768)),
        Slot("small", Resources(cpu=2048, memory_mib=4096)),
        Slot("mid", Resources(cpu=4096, memory_mib=16_384)),
    ]

    # When runs of 1, 3 and 6 vCPUs are placed
    def need(cpu: int) -> Request:
        return Request(f"r{cpu}", Resources(cpu=cpu * 1024, memory_mib=1024))

    # Then each goes to the tightest worker it fits
    assert best_fit(need(1), pool) == "small"
    assert best_fit(need(3), pool) == "mid"
    assert best_fit(need(6), pool) == "big"
    assert best_fit(need(9), pool) is None


def test_it_keeps_gpu_workers_for_gpu_runs_and_honours_labels() -> None:
    # Given a GPU worker and a larger CPU-only worker, in different zones
    pool = [
        Slot("gpu", Resources(cpu=4096, memory_mib=8192, gpus=1), {"zone": "a"}),
        Slot("cpu", Resources(cpu=8192, memory_mib=16_384), {"zone": "b"}),
    ]
    # Then a CPU run goes to the CPU worker though the GPU worker is tighter in memory
    assert best_fit(Request("r1", Resources(cpu=1024, memory_mib=1024)), pool) == "cpu"
    # And a GPU run goes to the GPU worker, a zone-b run never to zone a
    assert best_fit(Request("r2", Resources(gpus=1)), pool) == "gpu"
    assert best_fit(Request("r3", Resources(gpus=1), {"zone": "b"}), pool) is None


def test_first_fit_decreasing_places_the_largest_first() -> None:
    # Given one worker of 4 vCPUs and a batch of 1, 1 and 4 vCPUs (the 4 last)
    pool = [Slot("w", Resources(cpu=4096, memory_mib=4096))]
    batch = [
        Request("a", Resources(cpu=1024)),
        Request("b", Resources(cpu=1024)),
        Request("c", Resources(cpu=4096)),
    ]
    # When the batch is placed by first-fit-decreasing
    placed, unplaced = first_fit_decreasing(batch, pool)
    # Then the large run is placed and the small ones wait, oldest first
    assert placed == {"c": "w"}
    assert [r.run_id for r in unplaced] == ["a", "b"]
