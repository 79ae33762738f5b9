"""Benchmarks: `make bench` (python -m bench). Tables on stdout, JSON under bench/results/."""
