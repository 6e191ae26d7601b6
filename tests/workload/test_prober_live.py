"""The restart-window prober against a real server that goes away and comes back."""

import time

from workload_helpers import orphans_stop_by_themselves

from pytest_pgha.metrics.restart import summarise
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory
from pytest_pgha.workload.prober import ConnectProber

lone_primary = pgha_cluster_factory(replicas=0)


def test_the_prober_sees_an_outage_and_its_end(lone_primary):
    node = lone_primary.primary
    with ConnectProber(node.dsn("app", connect_timeout=2), interval_s=0.002) as prober:
        time.sleep(0.2)
        stopped_at_us = time.time_ns() // 1000
        node.stop("immediate")
        time.sleep(0.1)
        node.start()
        time.sleep(0.2)
    report = summarise(prober.probes, stopped_at_us)
    assert report.ok > 0 and report.failed > 0
    # Down for the 100 ms sleep at least, and the probes resumed after it.
    assert report.unavailable_ms is not None and report.unavailable_ms >= 100
    assert report.first_failure_after_inject_ms is not None
    starts = [p.start_us for p in prober.probes]
    assert starts == sorted(starts)


def test_the_prober_process_is_gone_after_the_block(lone_primary):
    prober = ConnectProber(lone_primary.primary.dsn("app"), interval_s=0.01)
    with prober:
        pid = prober.pid
        time.sleep(0.05)
    assert pid is not None and not prober.running()
    assert prober.probes and all(p.ok for p in prober.probes)


ORPHANING = """
import os, sys
from pytest_pgha.workload.prober import ConnectProber
prober = ConnectProber("host=127.0.0.1 port=1 connect_timeout=1", interval_s=0.01)
prober.__enter__()
print(prober.pid, flush=True)
os._exit(0)  # dies like a SIGKILLed run: no clean-up code runs
"""


def test_an_orphaned_prober_stops_by_itself():
    orphans_stop_by_themselves(ORPHANING, expected=1, within_s=5)
