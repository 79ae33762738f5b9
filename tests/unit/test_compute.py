"""Placement (jobsched.domain.compute): the Lambda worker when a job fits it, else the best Fargate fit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobsched import resources
from jobsched.domain.compute import (
    FARGATE_SIZES,
    LAMBDA_WORKER,
    MAX_FARGATE_CPU,
    MAX_FARGATE_MEMORY_MIB,
    DoesNotFit,
    Resources,
    fargate_size,
    needs_own_task,
    place,
)

VALID_SIZES = [(cpu, memory) for cpu, memories in FARGATE_SIZES.items() for memory in memories]


def test_it_holds_the_fargate_table_of_valid_sizes() -> None:
    # Given the table, Then it is AWS's (the design's facts): a few spot checks of every row's ends
    assert FARGATE_SIZES[256] == (512, 1024, 2048)
    assert (FARGATE_SIZES[512][0], FARGATE_SIZES[512][-1]) == (1024, 4096)
    assert (FARGATE_SIZES[1024][0], FARGATE_SIZES[1024][-1]) == (2048, 8192)
    assert (FARGATE_SIZES[4096][0], FARGATE_SIZES[4096][-1], len(FARGATE_SIZES[4096])) == (8192, 30720, 23)
    assert FARGATE_SIZES[8192][1] - FARGATE_SIZES[8192][0] == 4096
    assert (FARGATE_SIZES[16384][0], FARGATE_SIZES[16384][-1]) == (32768, 122880)


def test_a_job_that_fits_the_lambda_worker_runs_on_lambda() -> None:
    # Given no resources and no timeout, or a timeout of exactly the worker's
    for timeout in (None, resources.WORKER_TIMEOUT_SECONDS):
        # Then the Lambda worker takes it, with its own size
        assert place(timeout, None, None).runs_on == "lambda"
        assert place(timeout, None, None).resources == LAMBDA_WORKER
    assert LAMBDA_WORKER.memory_mib == resources.WORKER_MEMORY_MIB


def test_a_timeout_past_the_lambda_worker_runs_on_the_smallest_fargate_size() -> None:
    # Given a 75 s run with a 600 s timeout and nothing else asked
    placement = place(600, None, None)
    # Then it goes to ECS, at Fargate's smallest size
    assert placement.runs_on == "ecs"
    assert placement.resources == Resources(cpu=256, memory_mib=512)


def test_memory_or_cpu_beyond_the_lambda_worker_runs_on_ecs() -> None:
    big_memory, big_cpu = Resources(cpu=128, memory_mib=3000), Resources(cpu=1024, memory_mib=128)
    assert place(30, big_memory, None).resources == Resources(cpu=512, memory_mib=3072)
    assert place(30, big_cpu, None).resources == Resources(cpu=1024, memory_mib=2048)


def test_explicit_lambda_that_lambda_cannot_give_names_runs_on() -> None:
    # Given runs_on lambda with a timeout, or a memory, the Lambda worker does not have
    for timeout, wanted in ((600, None), (30, Resources(cpu=128, memory_mib=1024))):
        # Then placement refuses it, naming runs_on
        with pytest.raises(DoesNotFit) as refused:
            place(timeout, wanted, "lambda")
        assert refused.value.field == "runs_on"


def test_explicit_ecs_for_a_short_job_gets_a_fargate_size() -> None:
    assert place(None, None, "ecs").resources == Resources(cpu=256, memory_mib=512)


def test_resources_beyond_fargates_largest_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="cpu"):
        Resources(cpu=MAX_FARGATE_CPU + 1, memory_mib=1024)
    with pytest.raises(ValueError, match="memory_mib"):
        Resources(cpu=1024, memory_mib=MAX_FARGATE_MEMORY_MIB + 1)


@given(
    cpu=st.integers(min_value=1, max_value=MAX_FARGATE_CPU),
    memory=st.integers(min_value=1, max_value=MAX_FARGATE_MEMORY_MIB),
)
def test_it_picks_a_valid_size_that_fits_and_no_smaller_valid_size_fits(cpu: int, memory: int) -> None:
    # Given any request within Fargate's largest size
    chosen = fargate_size(Resources(cpu=cpu, memory_mib=memory))
    # Then the chosen size is valid and fits the request
    assert (chosen.cpu, chosen.memory_mib) in VALID_SIZES
    assert chosen.cpu >= cpu and chosen.memory_mib >= memory
    # And no valid size that fits is smaller: none has less CPU, and none with its CPU has less memory
    fitting = [(c, m) for c, m in VALID_SIZES if c >= cpu and m >= memory]
    assert min(fitting) == (chosen.cpu, chosen.memory_mib)


def test_the_cost_table_prices_a_1_minute_fargate_run_beside_a_lambda_run() -> None:
    from bench.costs import one_minute_compute

    rows = one_minute_compute()
    # Fargate ARM, 0.25 vCPU and 0.5 GB for a minute; Lambda arm64, 256 MB for 60 s plus its request
    fargate_minute = (0.25 * 0.03238 + 0.5 * 0.00356) / 60
    assert rows["fargate_1min"]["usd_per_million"] == pytest.approx(fargate_minute * 1e6)
    assert rows["lambda_1min"]["usd_per_million"] == pytest.approx(0.20 + 15 * 0.0000133334 * 1e6)


@pytest.mark.parametrize(
    ("cpu", "memory", "own_task"),
    [
        (256, 512, False),  # the smallest Fargate size: in the worker's task
        (resources.ECS_WORKER_CPU, resources.ECS_WORKER_MEMORY_MIB, False),  # the worker's own size
        (1024, 3 * 1024, True),  # more memory than the worker's task
        (2048, 4 * 1024, True),  # more CPU
        (4096, 8 * 1024, True),
    ],
)
def test_a_python_run_bigger_than_the_ecs_worker_task_needs_a_task_of_its_own(
    cpu: int, memory: int, own_task: bool
) -> None:
    assert needs_own_task(Resources(cpu=cpu, memory_mib=memory)) is own_task
