"""Throughput of pytest-pgha's reconnecting workload driver against pgbench running the
same transaction (BEGIN; UPDATE pgbench_accounts ...; COMMIT) with the same number of
clients on the same primary, in alternating rounds of one run. Prints one JSON line.

    python benchmarks/driver_throughput.py [--clients 8] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid

from pytest_pgha.cluster.binaries import discover, reachable_by_service_user
from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.spec import ClusterSpec
from pytest_pgha.cluster.template import ensure_template
from pytest_pgha.sandbox.context import default_base_dir, open_sandbox
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions

SCRIPT = """\\set aid random(1, 100000 * {scale})
\\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
COMMIT;
"""


def cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def driver_tps(dsn: str, clients: int, seconds: float) -> tuple[float, float]:
    """Transactions per second, and the driver's CPU microseconds per transaction."""
    before = cpu_s(resource.RUSAGE_SELF)
    driver = WorkloadDriver(dsn, WorkloadOptions(workers=clients))
    driver.start()
    time.sleep(seconds)
    driver.stop()
    done = driver.ok_count()
    return done / seconds, (cpu_s(resource.RUSAGE_SELF) - before) / done * 1e6


def pgbench_tps(cluster: Cluster, clients: int, seconds: float) -> tuple[float, float]:
    """Transactions per second, and pgbench's CPU microseconds per transaction."""
    before = cpu_s(resource.RUSAGE_CHILDREN)
    script = cluster.workdir / "update.sql"
    script.write_text(SCRIPT.format(scale=cluster.spec.scale))
    threads = min(clients, os.cpu_count() or 1)
    argv = [
        cluster.binaries.program("pgbench"),
        "-n",
        "-M",
        "simple",
        "-c",
        str(clients),
        "-j",
        str(threads),
        "-T",
        str(int(seconds)),
        "-f",
        str(script),
        "-h",
        "127.0.0.1",
        "-p",
        str(cluster.primary.port),
        "-U",
        "app",
        "app",
    ]
    env = {**os.environ, "PGPASSWORD": cluster.credentials.app}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if not match:
        raise RuntimeError(f"no tps in pgbench's output:\n{out}")
    tps = float(match.group(1))
    return tps, (cpu_s(resource.RUSAGE_CHILDREN) - before) / (tps * seconds) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg-bindir", default=None)
    args = parser.parse_args()
    sandbox = open_sandbox(default_base_dir(), f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    binaries = reachable_by_service_user(discover(factory=args.pg_bindir), sandbox.cache_dir)
    cluster = Cluster(
        ClusterSpec(replicas=0),
        ensure_template(sandbox, binaries, 1),
        sandbox,
        sandbox.test_dir("driver-throughput"),
    )
    cluster.start()
    drivers, pgbenches, driver_cpu, pgbench_cpu = [], [], [], []
    try:
        for _ in range(args.rounds):  # alternate, so drift hits both alike
            tps, cpu = driver_tps(cluster.primary.dsn(), args.clients, args.seconds)
            drivers.append(tps)
            driver_cpu.append(cpu)
            tps, cpu = pgbench_tps(cluster, args.clients, args.seconds)
            pgbenches.append(tps)
            pgbench_cpu.append(cpu)
    finally:
        cluster.stop()
        cluster.remove()
        shutil.rmtree(sandbox.run_dir, ignore_errors=True)
    driver, pgbench = statistics.median(drivers), statistics.median(pgbenches)
    print(
        json.dumps(
            {
                "benchmark": "driver_throughput",
                "clients": args.clients,
                "seconds": args.seconds,
                "rounds": args.rounds,
                "postgresql": binaries.version,
                "driver_tps_median": round(driver, 1),
                "pgbench_tps_median": round(pgbench, 1),
                "ratio": round(driver / pgbench, 3),
                "target_ratio": 0.9,
                "driver_cpu_us_per_txn": round(statistics.median(driver_cpu), 1),
                "pgbench_cpu_us_per_txn": round(statistics.median(pgbench_cpu), 1),
                "driver_tps": [round(x, 1) for x in drivers],
                "pgbench_tps": [round(x, 1) for x in pgbenches],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
