"""bench/hol.py (table e) reports its lateness rows as bench/lateness.py (table a) does."""

from __future__ import annotations

from bench import hol, lateness


def test_the_hol_rows_carry_every_statistic_of_a_lateness_row() -> None:
    # Given the start lateness of 100 runs of one job kind, in seconds
    values = [0.01 * i for i in range(1, 101)]

    # When each bench makes its table row of them
    hol_row = hol.Scenario("echo", "beside slow jobs", values=list(values), not_run=1).row()
    lateness_row = lateness.Scenario("echo", "beside slow jobs", values=list(values), not_run=1).row()

    # Then both rows hold the same statistics with the same values, p95 and min among them
    assert hol_row == lateness_row
    assert {"p50_s", "p95_s", "p99_s", "max_s", "min_s", "mean_s"} <= set(hol_row)


def test_the_hol_table_renders_the_rows_it_collects() -> None:
    # Given hol's results with an echo row and a slow row
    echo = hol.Scenario("echo", "demo.echo every 10 s", values=[0.2, 0.4])
    slow = hol.Scenario("slow", "demo.sleep 20 s", values=[0.3], not_run=2)
    stack = {"invocations": 16, "batch_size": 10, "worker_concurrency": 10}

    # When it is rendered
    text = hol.render({"stack": stack, "rows": [echo.row(), slow.row()]})

    # Then each row is a line of the table, with its runs, p50 and runs not run
    lines = text.splitlines()
    assert any(line.split()[:3] == ["echo", "2", "0.200"] and line.split()[-1] == "0" for line in lines)
    assert any(line.split()[:3] == ["slow", "1", "0.300"] and line.split()[-1] == "2" for line in lines)
