"""Fixtures for perf/peer_openevolve.py: the fixed-latency model, OpenEvolve's evaluator and seed."""
