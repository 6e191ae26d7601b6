"""Experiments on a stack: a workload runs, a fault acts, the HA manager reacts,
and the logs come back for the metrics to compute."""
