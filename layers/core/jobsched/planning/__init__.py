"""Capacity planning tools: the model, the simulation that checks it, and their reports.

- `inputs`: the workload, per-run counts, AWS prices and limits, latencies and item sizes;
- `model`: the timing model (a worker slot, a dispatcher page and pass) the plan and simulation share;
- `plan`: `plan()`, from the inputs to a fleet, the limits it is checked against, and a daily bill;
- `simulate`: a discrete-event simulation of one burst that checks a plan;
- `report`: what `jobsched capacity` prints, as tables or JSON.

`jobsched capacity` runs them on a developer's machine; no Lambda imports them, so the layer
leaves this package out (infra/jobsched_infra/layer.py, LAYER_EXCLUDES).
"""
