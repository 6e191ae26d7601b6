"""Throughput of the ledger workload (BEGIN; INSERT ... RETURNING xid, LSN, port;
COMMIT, reconnecting, every transaction logged) against pgbench running the same
statements from a custom script (-f) with the same clients on the same primary, in
alternating rounds of one run. Prints one JSON line; the target ratio is 0.85.

    python benchmarks/ledger_throughput.py [--clients 8] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from benchlib import pgbench_tps, scratch_cluster

from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.ledger import LEDGER_TABLE, create_ledger

# The same statements; pgbench has no per-client counter, so its key is a random
# bigint (a collision among a few hundred thousand rows is a 1e-8 event).
PGBENCH_LEDGER_SCRIPT = f"""\\set seq random(1, 9000000000000000000)
BEGIN;
INSERT INTO {LEDGER_TABLE} (trial, worker, seq) VALUES (-1, :client_id, :seq) \
RETURNING pg_current_xact_id(), pg_current_wal_insert_lsn(), inet_server_port();
COMMIT;
"""


def ledger_tps(dsn: str, clients: int, seconds: float, trial: int) -> tuple[float, float]:
    options = WorkloadOptions(workers=clients, mode="ledger", trial=trial)
    with WorkloadDriver(dsn, options) as driver:
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
    ledgers, pgbenches, ledger_cpu, pgbench_cpu = [], [], [], []
    with scratch_cluster("ledger-throughput", args.pg_bindir) as cluster:
        version = cluster.binaries.version
        create_ledger(cluster.primary)
        for round_no in range(args.rounds):  # alternate, so drift hits both alike
            tps, cpu = ledger_tps(
                cluster.primary.dsn("app"), args.clients, args.seconds, round_no + 1
            )
            ledgers.append(tps)
            ledger_cpu.append(cpu)
            tps, cpu = pgbench_tps(cluster, args.clients, args.seconds, PGBENCH_LEDGER_SCRIPT)
            pgbenches.append(tps)
            pgbench_cpu.append(cpu)
    ledger, pgbench = statistics.median(ledgers), statistics.median(pgbenches)
    print(
        json.dumps(
            {
                "benchmark": "ledger_throughput",
                "clients": args.clients,
                "seconds": args.seconds,
                "rounds": args.rounds,
                "postgresql": version,
                "ledger_tps_median": round(ledger, 1),
                "pgbench_tps_median": round(pgbench, 1),
                "ratio": round(ledger / pgbench, 3),
                "target_ratio": 0.85,
                "ledger_cpu_us_per_txn": round(statistics.median(ledger_cpu), 1),
                "pgbench_cpu_us_per_txn": round(statistics.median(pgbench_cpu), 1),
                "ledger_tps": [round(x, 1) for x in ledgers],
                "pgbench_tps": [round(x, 1) for x in pgbenches],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
