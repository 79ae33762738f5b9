"""Deterministic simulation of the whole scheduler: `python -m tests.sim` (make sim).

The real services on the in-memory stores, one seeded event loop and a simulated clock, faults and
workloads drawn from the seed, the invariants checked after every schedule. See world.py.
"""
