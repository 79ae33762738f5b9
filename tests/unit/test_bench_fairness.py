"""bench/fairness.py (table g) renders the noisy/quiet and the low/high tables, unfair and fair."""

from __future__ import annotations

from bench import fairness
from bench.lateness import Scenario


def test_the_fairness_tables_render_each_group_per_mode() -> None:
    # Given both modes' rows: the quiet tenant and the high runs late only without fairness
    def rows(quiet: float, high: float) -> list[dict[str, object]]:
        return [
            Scenario("noisy", "n", values=[1.0, 2.0]).row(),
            Scenario("quiet", "q", values=[quiet]).row(),
            Scenario("low", "l", values=[1.0, 2.0]).row(),
            Scenario("high", "h", values=[high]).row(),
        ]

    results = {"burst": 2, "modes": {"unfair": rows(2.5, 2.25), "fair": rows(0.125, 0.0625)}}
    # When rendered
    text = fairness.render(results)
    # Then there is a line per mode and group, the tenants' table before the priorities'
    lines = [line.split() for line in text.splitlines()]
    got = {
        (cells[0], cells[1]): cells[3] for cells in lines if len(cells) > 3 and cells[0] in ("fair", "unfair")
    }
    assert got[("unfair", "quiet")] == "2.500" and got[("fair", "quiet")] == "0.125"
    assert got[("unfair", "high")] == "2.250" and got[("fair", "high")] == "0.062"
    assert text.index("quiet") < text.index("Priorities") < text.index("high")
