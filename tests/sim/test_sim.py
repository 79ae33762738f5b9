"""The simulator in CI: determinism, the regression seeds, and a subset of seeds (make sim runs 10,000)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobsched.domain.commands import CreateJobRequest
from jobsched.domain.status import RunStatus
from jobsched.errors import Conflict
from jobsched.services.jobs import JobService
from tests.sim.regressions import KEY_SEEDS, PACK_SEEDS, REGRESSION_SEEDS, RUN_CANCEL_SEEDS, TARGET_SEEDS
from tests.sim.targets import KINDS
from tests.sim.workload import Workload, simulate
from tests.sim.world import HANDLER, build_world, deterministic

CI_SEEDS = range(1, 41)


def test_a_seed_replays_exactly_and_another_seed_plays_another_schedule() -> None:
    # Given one seed run twice, and the next seed
    first, again, other = (
        simulate(3, minutes=5, scale=10),
        simulate(3, minutes=5, scale=10),
        simulate(4, minutes=5, scale=10),
    )
    # Then the two runs of the seed leave the same trace (every process event, in order), and the
    # other seed another one
    assert (
        first.digest == again.digest and first.faults == again.faults and first.violations == again.violations
    )
    assert other.digest != first.digest
    assert first.handler_calls > 0 and sum(first.faults.values()) > 0


# Each set of regression seeds replays on the workload it was found on: what the workload drew then.
WORKLOADS = {
    "before run cancels": (
        REGRESSION_SEEDS,
        {"run_cancels": False, "keys": False, "targets": False, "packs": False},
    ),
    "with run cancels": (
        RUN_CANCEL_SEEDS,
        {"run_cancels": True, "keys": False, "targets": False, "packs": False},
    ),
    "with keys": (KEY_SEEDS, {"run_cancels": True, "keys": True, "targets": False, "packs": False}),
    "with targets": (TARGET_SEEDS, {"run_cancels": True, "keys": True, "targets": True, "packs": False}),
    "with packs": (PACK_SEEDS, {"run_cancels": True, "keys": True, "targets": True, "packs": True}),
}


@pytest.mark.parametrize(
    ("workload", "seed", "minutes", "jobs", "violation", "bug"),
    [(name, *entry) for name, (seeds, _) in WORKLOADS.items() for entry in seeds],
)
def test_a_regression_seed_no_longer_shows_the_bug_it_found(
    workload: str, seed: int, minutes: float, jobs: int, violation: str, bug: str
) -> None:
    result = simulate(seed, minutes=minutes, scale=jobs, **WORKLOADS[workload][1])
    assert not [v for v in result.violations if violation in v], bug


def test_the_workload_calls_every_target_kind_and_runs_on_ecs_in_process_and_in_tasks_of_their_own() -> None:
    # Given the first CI seeds, with targets and ECS runs (the default)
    results = [simulate(s, minutes=5, scale=10) for s in CI_SEEDS[:8]]
    accepted = [x for r in results for lines in r.traces.values() for x in lines if " accepted " in x]
    # Then the jobs call every target kind, and some run on ECS, in the ECS worker's task and in
    # tasks of their own (a 2048+ CPU run), each task started for an attempt of such a run
    assert {k for k in KINDS if any(f"target={k}" in x for x in accepted)} == set(KINDS)
    sizes = {x.split(" ecs=")[1].split()[0] for x in accepted if " ecs=" in x}
    assert {"512/1024", "1024/2048"} & sizes and {"2048/4096", "4096/8192"} & sizes
    assert sum(r.tasks for r in results) > 0
    # And the peers refused attempts, with retryable errors (a Retry-After among them) and final ones,
    # and every invariant still held
    refused = {
        x.rsplit(" ", 1)[1] for r in results for lines in r.traces.values() for x in lines if "refuses" in x
    }
    assert {"HTTP429", "HTTP503"} & refused and {"HTTP404", "HTTP400"} & refused
    assert not [v for r in results for v in r.violations]


def test_every_invariant_holds_on_the_ci_subset_of_seeds() -> None:
    failing = {s: r.violations for s in CI_SEEDS if (r := simulate(s, minutes=5, scale=10)).violations}
    assert not failing, {s: v[:3] for s, v in failing.items()}


def test_a_long_handler_takes_its_own_seconds_while_the_fleet_goes_on_and_the_phase_ends_on_time() -> None:
    # Given a fault-free world with a recurring job (every 10 s, overlap allowed) whose handler holds
    # 25 s, so that several of its runs are in their handlers at once on different worker instances
    w = build_world(7, fault_scale=0.0)
    with deterministic(w.rng, w.loop):
        load = Workload(w, minutes=4, scale=0, failures=False)
        job_id = load.create(
            CreateJobRequest(
                type="recurring", handler=HANDLER, payload={"hold": 25}, cron_expr="*/10 * * * * *",
                overlap_policy="allow",
            )
        )  # fmt: skip
        w.start_dispatchers(2)
        w.start_workers(3)
        # When the loop plays four minutes
        w.loop.run_until(240)
        now = w.loop.now
        w.loop.close()
    # Then the clock stopped at the phase's end (no handler held the loop past it) ...
    assert now == 240
    # ... handlers of different ticks ran side by side ...
    calls = sorted((c.start, c.end or float("inf")) for c in w.ledger.calls if c.job_id == job_id)
    assert len(calls) >= 15 and any(b[0] < a[1] for a, b in itertools.pairwise(calls))
    # ... and each run that finished took its handler's 25 s, not the seconds of another process's
    # handler that happened to end later
    assert job_id is not None
    done = [r for r in w.runs.since(job_id, after=w.loop.start) if r.status == RunStatus.SUCCEEDED]
    assert len(done) >= 15
    assert {r.finished_at - r.started_at for r in done if r.started_at and r.finished_at} == {
        timedelta(seconds=25)
    }


def test_a_job_whose_cancel_is_refused_for_the_whole_drain_is_named_with_the_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a scheduler whose cancel always answers 409 (as one whose job count leaked would)
    def refuse(self: JobService, job_id: str, *, tenant: str) -> None:
        raise Conflict(f"job {job_id} has a run in progress; it cannot be cancelled mid-flight")

    monkeypatch.setattr(JobService, "cancel", refuse)
    # When a schedule with recurring jobs drains
    result = simulate(2, minutes=3, scale=4)
    recurring = [j for j, lines in result.traces.items() if any("accepted recurring" in x for x in lines)]
    # Then each recurring job is named by a violation of its own (its trace printed), not only the
    # schedule's "did not settle"
    assert recurring
    for job_id in recurring:
        assert f"{job_id}: cancel still refused after 1800 s of drain" in result.violations


def _record_of(tmp_path: Path, *args: str) -> dict[str, Any]:
    from tests.sim.__main__ import main

    out = tmp_path / f"sim-{len(list(tmp_path.iterdir()))}.json"
    main(["--quiet", "--record", "--out", str(out), *args])
    return dict(json.loads(out.read_text()))


def test_the_runner_merges_the_results_of_its_processes_into_the_record_one_process_writes(
    tmp_path: Path,
) -> None:
    # Given six seeds, run on two processes and on one
    two = _record_of(tmp_path, "--seeds", "6", "--first-seed", "20", "--workers", "2")
    one = _record_of(tmp_path, "--seeds", "6", "--first-seed", "20", "--workers", "1")
    # Then the merged record is the same: schedules, faults by kind, violations by kind with seeds
    for key in ("schedules", "faults", "violations", "violating_seeds", "simulated_hours", "runs"):
        assert two[key] == one[key], key
    assert two["schedules"] == 6 and two["workers"] == 2 and not two["interrupted"]
    # and the faults are those applied (each kind that the schedules drew, counted where applied)
    assert two["faults"]["skewed_process"] > 0 and two["faults"]["throttle"] > 0
    assert two["schedules_per_minute"] > 0 and two["wall_seconds"] > 0
    for kind, found in two["violations"].items():
        assert found["seeds"] == sorted(found["seeds"]) and set(found["seeds"]) <= set(range(20, 26)), kind


def _ctrl_c_default() -> None:
    """In the child before it runs: Ctrl-C's default action. A pytest started in the background of a
    non-interactive shell has SIGINT ignored, which its children inherit, and a process that starts
    with SIGINT ignored rightly keeps it so (a shell's background job is not Ctrl-C'd)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_stops_the_runner_with_the_schedules_done_so_far_and_no_traceback(tmp_path: Path) -> None:
    # Given the runner on two processes over more seeds than it will finish
    out = tmp_path / "sim.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.sim", "--seeds", "100000", "--quiet", "--record", "--out", str(out),
         "--progress-every", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_ctrl_c_default,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        done = 0
        for line in proc.stdout:  # "N schedules, T s, V violating": one line per schedule merged
            done += "schedules," in line
            if done == 3:
                break
        # When Ctrl-C reaches its process group (the runner and its pool's processes alike)
        os.killpg(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Then it exits 130 without a traceback from any process, and prints and records the partial run
    assert proc.returncode == 130
    assert "Traceback" not in err + rest and "KeyboardInterrupt" not in err + rest
    assert "(interrupted)" in rest
    record = json.loads(out.read_text())
    assert record["interrupted"] and record["schedules"] >= 3


@pytest.mark.slow
def test_the_record_names_each_planted_bug_with_the_first_seed_that_found_it(tmp_path: Path) -> None:
    from tests.sim.mutants import MUTANTS

    # Given no schedules of the plain code, and the search for each planted bug over seeds 1..12
    # (measured: early_hold_lapse and stamp_before_send are found by seed 7, every other bug by seed 1)
    record = _record_of(tmp_path, "--seeds", "0", "--mutants", "--mutant-seeds", "12", "--workers", "2")
    bugs = record["mutants"]["bugs"]
    # Then every bug of tests/sim/mutants.py is in the record, found, with its seed and its violation
    assert set(bugs) == set(MUTANTS)
    for name, found in bugs.items():
        assert found["found"] and 1 <= found["first_seed"] <= 12, name
        assert found["seeds_taken"] == found["first_seed"] and found["violation"].startswith("job_"), name
