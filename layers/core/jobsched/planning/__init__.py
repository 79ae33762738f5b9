"""Capacity planning tools: the model, the simulation that checks it, and their reports.

`jobsched capacity` runs them on a developer's machine; no Lambda imports them, so the layer
leaves this package out (infra/jobsched_infra/layer.py, LAYER_EXCLUDES).
"""
