"""bench/pools.py (table h) renders placement latency and the cost of a worker-pool run."""

from __future__ import annotations

from bench import pools


def test_the_pools_table_renders_latency_in_seconds_and_the_cost_per_million_runs() -> None:
    # Given a burst's results
    results = {
        "runs": 30,
        "workers": {"w1": {}, "w2": {}, "w3": {}},
        "oversubscribed_samples": 0,
        "latency_ms": {"p50": 1500.0, "p99": 4250.0, "max": 5000.0},
        "per_run": {"dynamodb_wru": 17.05, "dynamodb_rru": 31.92},
        "usd_per_million_runs": {"dynamodb": 14.65, "api_gateway_and_lambda_requests": 14.8, "total": 29.45},
        "usd_per_worker_month_of_heartbeats": 1.54,
    }
    # When rendered
    text = pools.render(results)
    # Then its row holds the burst, the latency in seconds and the total per million runs
    [row] = [line.split() for line in text.splitlines() if line.split()[:1] == ["30"]]
    assert row == ["30", "3", "1.50", "4.25", "0", "17.050", "31.920", "29.45"]
    assert "$1.54 a worker-month" in text
