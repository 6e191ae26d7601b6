"""What synchronous replication costs (claim 6): throughput and commit latency of the
ledger workload for each synchronous_commit level, with the standby's replication link
delayed by 0, 1, 5 and 10 ms (toxiproxy latency on the primary-to-standby direction:
one round trip of that much, the standby's reply undelayed). The table and a plot are
attached to the report and printed."""

import json
import statistics
import time

import pytest

from pytest_pgha.report.allure_report import attach_file, attach_text
from pytest_pgha.report.chart import render_cost_chart
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.ledger import create_ledger
from pytest_pgha.workload.records import Outcome

RTTS_MS = (0, 1, 5, 10)
LEVELS = ("off", "local", "remote_write", "on", "remote_apply")
SECONDS = 1.5
WORKERS = 8


def measure(dsn, level, trial):
    options = WorkloadOptions(
        workers=WORKERS,
        mode="ledger",
        trial=trial,
        rate=None,
        session_settings=(("synchronous_commit", level),),
    )
    with WorkloadDriver(dsn, options) as driver:
        time.sleep(SECONDS)
    latencies = [r.latency_us for r in driver.records() if r.outcome is Outcome.OK]
    return {
        "tps": round(len(latencies) / SECONDS, 1),
        "latency_ms_p50": round(statistics.median(latencies) / 1000, 2),
    }


@pytest.mark.parametrize("pgha_cluster", ["sync_pair"], indirect=True)
def test_what_each_synchronous_commit_level_costs_per_round_trip(
    pgha_cluster, pgha_replication_links, capsys
):
    primary, standby = pgha_cluster.primary, pgha_cluster.replicas[0]
    create_ledger(primary)
    pgha_cluster.wait_for_replay()
    link = pgha_replication_links[standby.name]
    rows = []
    trial = 0
    for rtt in RTTS_MS:
        link.clear()
        if rtt:
            link.add_toxic("latency", stream="downstream", latency=rtt)
        for level in LEVELS:
            trial += 1
            rows.append(
                {
                    "rtt_ms": rtt,
                    "synchronous_commit": level,
                    **measure(primary.dsn("app"), level, trial),
                }
            )
    link.clear()
    table = "\n".join(
        [
            "| RTT ms | synchronous_commit | TPS | commit latency p50 ms |",
            "|---|---|---|---|",
            *(
                "| {rtt_ms} | {synchronous_commit} | {tps} | {latency_ms_p50} |".format(**r)
                for r in rows
            ),
        ]
    )
    with capsys.disabled():
        print(f"\n{table}")
    attach_text("cost per round trip.md", table)
    attach_text("cost per round trip.json", json.dumps(rows, indent=2))
    for y in ("tps", "latency_ms_p50"):
        chart = render_cost_chart(
            rows,
            x="rtt_ms",
            y=y,
            series="synchronous_commit",
            title=f"{y} by replication round trip",
            path=pgha_cluster.workdir / f"cost-{y}.png",
        )
        attach_file(chart, f"{y} by RTT")

    cell = {(r["rtt_ms"], r["synchronous_commit"]): r for r in rows}
    for level in ("remote_write", "on", "remote_apply"):
        # Every commit waits for one round trip at least: a lower bound, which no
        # machine is too slow for.
        assert cell[(10, level)]["latency_ms_p50"] >= 10
        assert cell[(10, level)]["tps"] < cell[(10, "local")]["tps"]
    for level in ("off", "local"):
        assert cell[(10, level)]["latency_ms_p50"] < cell[(10, "on")]["latency_ms_p50"]
