"""Throughput of pytest-pgha's reconnecting workload driver against pgbench running the
same transaction (BEGIN; UPDATE pgbench_accounts ...; COMMIT) with the same number of
clients on the same primary, in alternating rounds of one run. Prints one JSON line.

    python benchmarks/driver_throughput.py [--clients 8] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from benchlib import pgbench_tps, scratch_cluster

from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions


def driver_tps(dsn: str, clients: int, seconds: float) -> tuple[float, float]:
    """Transactions per second, and the workload process's CPU microseconds per
    transaction."""
    with WorkloadDriver(dsn, WorkloadOptions(workers=clients)) as driver:
        time.sleep(seconds)
    done = driver.ok_count()
    return done / seconds, driver.cpu_s / done * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg-bindir", default=None)
    args = parser.parse_args()
    drivers, pgbenches, driver_cpu, pgbench_cpu = [], [], [], []
    with scratch_cluster("driver-throughput", args.pg_bindir) as cluster:
        version = cluster.binaries.version
        for _ in range(args.rounds):  # alternate, so drift hits both alike
            tps, cpu = driver_tps(cluster.primary.dsn("app"), args.clients, args.seconds)
            drivers.append(tps)
            driver_cpu.append(cpu)
            tps, cpu = pgbench_tps(cluster, args.clients, args.seconds)
            pgbenches.append(tps)
            pgbench_cpu.append(cpu)
    driver, pgbench = statistics.median(drivers), statistics.median(pgbenches)
    print(
        json.dumps(
            {
                "benchmark": "driver_throughput",
                "clients": args.clients,
                "seconds": args.seconds,
                "rounds": args.rounds,
                "postgresql": version,
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
