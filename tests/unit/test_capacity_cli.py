"""`jobsched capacity`: the plan, the bill and the simulation as tables, or as JSON for machines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jobsched import cli

SMALL = ["capacity", "--jobs", "1000000", "--burst", "20000", "--window", "60"]
SEEDS = ["capacity", "--jobs", "100000000", "--burst", "2000000", "--window", "60"]


def test_it_prints_the_plan_its_limits_the_bill_and_the_simulation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(SMALL)

    out = capsys.readouterr().out
    assert code == 0
    for heading in ("Plan", "Limits", "Rates", "Cost per day", "Simulation", "p99 lateness target"):
        assert heading in out
    assert "shards (JOBSCHED_SHARD_COUNT)" in out
    assert "due-index partition writes to dispatch in time" in out
    assert "burst lateness p50 / p95 / p99 / max" in out
    assert "within the 60 s window" in out
    assert "OVER" not in out


def test_it_answers_json_for_machines(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*SMALL, "--json"]) == 0

    [entry] = json.loads(capsys.readouterr().out)["plans"]
    plan, sim = entry["plan"], entry["simulation"]
    assert plan["ok"] is True
    assert plan["fleet"]["shards"] >= 1
    assert plan["usd_per_day"] == pytest.approx(sum(line["usd_per_day"] for line in plan["costs"]))
    assert {c["status"] for c in plan["checks"]} <= {"ok", "raise"}
    assert plan["per_run"]["kinds"]["recurring"]["runs_wru"] == 1.0
    assert sim["met"] is True
    assert 0 < sim["lateness_p50_s"] <= sim["lateness_p99_s"] <= sim["drain_s"] <= 60


def test_too_few_shards_are_reported_over_the_limit_with_exit_status_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main([*SEEDS, "--shards", "4", "32", "--no-simulate"])

    out = capsys.readouterr().out
    assert code == 1
    first, second = out.splitlines()[1:3]  # the comparison table, one row per shard count
    assert first.split()[0] == "4" and first.rstrip().endswith("OVER")
    assert second.split()[0] == "32" and second.rstrip().endswith("ok")
    assert "Simulation" not in out


def test_it_plans_with_the_counts_the_benchmark_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"kinds": {"recurring": {"sqs_requests": 0.6}}}))

    def sqs_per_day(*extra: str) -> float:
        assert cli.main([*SMALL, "--no-simulate", "--json", *extra]) == 0
        [entry] = json.loads(capsys.readouterr().out)["plans"]
        [line] = [c for c in entry["plan"]["costs"] if c["item"] == "SQS requests"]
        return float(line["usd_per_day"])

    default = sqs_per_day()
    measured = sqs_per_day("--costs", str(costs))
    assert measured > 1.9 * default  # the steady runs' SQS requests doubled (the burst's follow them)


def test_it_refuses_a_costs_file_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*SMALL, "--costs", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kinds": {"recurring": {"sqs_requests": "lots"}}}))
    assert cli.main([*SMALL, "--costs", str(bad)]) == 2
    assert "kinds.recurring.sqs_requests" in capsys.readouterr().err

    bad.write_text("[1, 2]")
    assert cli.main([*SMALL, "--costs", str(bad)]) == 2
    assert "JSON object" in capsys.readouterr().err


def test_it_refuses_numbers_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*SMALL, "--shards", "0"]) == 2
    assert "out of range: shards" in capsys.readouterr().err
    assert cli.main(["capacity", "--jobs", "1", "--burst", "1", "--window", "0"]) == 2
    assert "window" in capsys.readouterr().err


def test_it_prints_the_planning_report_as_jobsched_planning_writes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given two plans of the seeds' burst, as the CLI makes them
    from jobsched.planning import report
    from jobsched.planning.inputs import Workload
    from jobsched.planning.plan import plan

    seeds = Workload(jobs=100_000_000, burst=2_000_000, window_s=60)
    plans: list[report.Evaluated] = [(plan(seeds, shards=shards), None) for shards in (16, 32)]

    # When the CLI plans the same, as text and as JSON
    assert cli.main([*SEEDS, "--shards", "16", "32", "--no-simulate"]) == 0
    text = capsys.readouterr().out
    assert cli.main([*SEEDS, "--shards", "16", "32", "--no-simulate", "--json"]) == 0
    answer = capsys.readouterr().out

    # Then it prints the report module's output, nothing else (the CLI only parses arguments)
    assert text == report.as_text(plans) + "\n"
    assert json.loads(answer) == json.loads(report.as_json(plans))


def test_it_reports_a_lanes_lateness_fair_and_in_arrival_order(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a burst and 20 runs of a quiet tenant due with it, when planned with --lane-runs
    code = cli.main([*SMALL, "--lane-runs", "20", "--lane", "tenant"])
    out = capsys.readouterr().out
    # Then the report has a lanes table: the model's and the simulation's figure per order
    assert code == 0
    assert "Lanes: 20 runs of a quiet tenant due with the burst" in out
    table = out.split("Lanes:")[1].splitlines()[2:]
    split = (re.split(r"\s{2,}", line.strip()) for line in table if line.strip())
    rows = {cells[1]: cells for cells in split}
    # and fair, the lane's simulated p99 is far below its p99 in arrival order
    assert float(rows["fair"][3].split()[0]) < float(rows["arrival order"][3].split()[0]) / 5
