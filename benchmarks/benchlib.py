"""What the benchmarks share: a throw-away single-node cluster and pgbench's figure on it
(the reference every benchmark reports its own numbers against)."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pytest_pgha.cluster.binaries import discover, reachable_by_service_user
from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.spec import ClusterSpec
from pytest_pgha.cluster.template import ensure_template
from pytest_pgha.sandbox.context import default_base_dir, open_sandbox

UPDATE_SCRIPT = """\\set aid random(1, 100000 * {scale})
\\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
COMMIT;
"""


def cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def scratch_cluster(name: str, pg_bindir: str | None = None) -> Iterator[Cluster]:
    """A primary with the pgbench schema, removed on exit."""
    sandbox = open_sandbox(default_base_dir(), f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    binaries = reachable_by_service_user(discover(factory=pg_bindir), sandbox.cache_dir)
    cluster = Cluster(
        ClusterSpec(replicas=0),
        ensure_template(sandbox, binaries, 1),
        sandbox,
        sandbox.test_dir(name),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.remove()
        shutil.rmtree(sandbox.run_dir, ignore_errors=True)


def pgbench_tps(
    cluster: Cluster, clients: int, seconds: float, script_text: str | None = None
) -> tuple[float, float]:
    """pgbench running UPDATE_SCRIPT (or script_text): transactions per second, and
    pgbench's CPU microseconds per transaction."""
    before = cpu_s(resource.RUSAGE_CHILDREN)
    script = cluster.workdir / "bench.sql"
    script.write_text(script_text or UPDATE_SCRIPT.format(scale=cluster.spec.scale))
    threads = min(clients, os.cpu_count() or 1)
    primary = cluster.primary
    argv = [
        cluster.binaries.program("pgbench"),
        *("-n", "-M", "simple", "-c", str(clients), "-j", str(threads)),
        *("-T", str(int(seconds)), "-f", str(script)),
        *("-h", primary.host, "-p", str(primary.port), "-U", "app", "app"),
    ]
    env = {**os.environ, "PGPASSWORD": cluster.credentials.app}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if not match:
        raise RuntimeError(f"no tps in pgbench's output:\n{out}")
    tps = float(match.group(1))
    return tps, (cpu_s(resource.RUSAGE_CHILDREN) - before) / (tps * seconds) * 1e6
