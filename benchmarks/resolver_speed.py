"""How long the outcome resolver takes for a trial of N transactions (default 100k):
the keys the primary holds (one query) and pg_xact_status of the xids in question (one
query), then a verdict for each; against the reference of fetching the same keys with a
plain query, in the same run. Prints one JSON line; the target is under 2 s.

    python benchmarks/resolver_speed.py [--transactions 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from benchlib import scratch_cluster

from pytest_pgha.cluster.node import Node
from pytest_pgha.metrics.durability import Verdict
from pytest_pgha.scenarios.durability import resolve_on_primary
from pytest_pgha.workload.ledger import LEDGER_TABLE, LedgerEntry, create_ledger
from pytest_pgha.workload.records import Outcome, TxRecord

TRIAL = 7
WORKERS = 8
# One in a hundred acknowledged rows missing, one in fifty transactions broken.
LOST_EVERY = 100
BROKEN_EVERY = 50


def fabricate(primary: Node, count: int) -> list[LedgerEntry]:
    """count transactions, their rows inserted (but the lost ones) with real xids."""
    primary.sql(
        f"INSERT INTO {LEDGER_TABLE} (trial, worker, seq)"
        f" SELECT {TRIAL}, i %% {WORKERS}, i FROM generate_series(1, %s) AS i"
        f" WHERE i %% {LOST_EVERY} <> 0",
        [count],
    )
    next_xid = int(primary.value("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))
    entries = []
    for i in range(1, count + 1):
        outcome = Outcome.INDETERMINATE if i % BROKEN_EVERY == 1 else Outcome.OK
        record = TxRecord(i % WORKERS, i, i * 10, i * 10 + 5, outcome)
        entries.append(LedgerEntry(record, i, max(3, next_xid - i), 0, 5432, 1, 1))
    return entries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg-bindir", default=None)
    args = parser.parse_args()
    resolver_s, fetch_s = [], []
    with scratch_cluster("resolver-speed", args.pg_bindir) as cluster:
        primary = cluster.primary
        create_ledger(primary)
        entries = fabricate(primary, args.transactions)
        for _ in range(args.rounds):
            started = time.perf_counter()
            resolved, _, _ = resolve_on_primary(cluster, TRIAL, entries)
            resolver_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            primary.sql(f"SELECT worker, seq FROM {LEDGER_TABLE} WHERE trial = %s", [TRIAL])
            fetch_s.append(time.perf_counter() - started)
    lost = sum(1 for r in resolved if r.verdict is Verdict.LOST)
    resolver, fetch = statistics.median(resolver_s), statistics.median(fetch_s)
    print(
        json.dumps(
            {
                "benchmark": "resolver_speed",
                "transactions": args.transactions,
                "rounds": args.rounds,
                "resolver_s_median": round(resolver, 3),
                "plain_fetch_s_median": round(fetch, 3),
                "ratio": round(resolver / fetch, 2),
                "target_s": 2.0,
                "lost_found": lost,
                "lost_planted": args.transactions // LOST_EVERY,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
