"""Nothing outlives a run: teardown on failure, on Ctrl-C; and after a SIGKILL, the
next run (or `pgha cleanup`, i.e. reap_orphans) reaps the orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from sandbox_helpers import (
    NOTHING_LEFT,
    inner_bindir,
    leftovers,
    postgres_inside,
    segment_exists,
    segments_under,
    start_holding_run,
    wait_for_file,
)

from pytest_pgha.sandbox.context import reap_orphans

# A library user (like the benchmark) that owns its run directory, starts a cluster
# and waits to be killed.
LIBRARY_USER = """
import sys, time
from pathlib import Path
from pytest_pgha.cluster.binaries import discover
from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.spec import ClusterSpec
from pytest_pgha.cluster.template import ensure_template
from pytest_pgha.sandbox.context import open_sandbox

base, bindir, ready = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
sandbox = open_sandbox(base, "script", own_run_dir=True)
template = ensure_template(sandbox, discover(factory=bindir), 1)
cluster = Cluster(ClusterSpec(replicas=1), template, sandbox, sandbox.test_dir("held"))
cluster.start()
ready.write_text(" ".join(str(node.pid) for node in cluster.nodes))
time.sleep(120)
"""

FAILING_TESTS = """
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory

broken = pgha_cluster_factory(replicas=1, settings={"max_wal_senders": 0})


def test_fails_with_a_cluster(pgha_cluster):
    assert pgha_cluster.primary.pid is None


def test_start_fails_halfway(broken):
    pass
"""


def _orphans(basedir: Path, pids: list[int]) -> None:
    """The killed run's servers survived it (they run in sessions of their own)."""
    alive = {p.pid for p in postgres_inside(basedir)}
    assert set(pids) <= alive
    assert all(psutil.Process(pid).ppid() != os.getpid() for pid in pids)


def test_sigkilled_run_is_reaped_by_the_next_run(
    pytester: pytest.Pytester, inner_basedir: Path
) -> None:
    holder, pids = start_holding_run(pytester.path, inner_basedir)
    assert len(pids) == 3
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    _orphans(inner_basedir, pids)
    assert leftovers(inner_basedir)["runs"] != []
    segments = segments_under(inner_basedir)
    assert len(segments) == 3
    pytester.makepyfile(test_next="def test_nothing(): pass")
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", f"--pgha-basedir={inner_basedir}", "test_next.py"
    )
    result.assert_outcomes(passed=1)
    assert leftovers(inner_basedir) == NOTHING_LEFT
    assert not any(segment_exists(s) for s in segments)  # the killed postmasters SysV


def test_reap_orphans_by_hand_after_a_killed_script(tmp_path: Path, inner_basedir: Path) -> None:
    """What `pgha cleanup` runs; the killed owner here used the library directly."""
    ready = tmp_path / "ready"
    script = subprocess.Popen(
        [sys.executable, "-c", LIBRARY_USER, str(inner_basedir), str(inner_bindir()), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    pids = [int(p) for p in wait_for_file(ready, script).split()]
    script.kill()
    script.wait(10)
    _orphans(inner_basedir, pids)
    segments = segments_under(inner_basedir)
    report = reap_orphans(inner_basedir)
    assert report.processes >= 2 and report.directories == 1
    assert "reaped" in str(report)
    assert leftovers(inner_basedir) == NOTHING_LEFT
    assert segments and not any(segment_exists(s) for s in segments)
    assert reap_orphans(inner_basedir).processes == 0  # idempotent


def test_ctrl_c_stops_everything(pytester: pytest.Pytester, inner_basedir: Path) -> None:
    holder, pids = start_holding_run(pytester.path, inner_basedir)
    holder.send_signal(signal.SIGINT)
    output = holder.communicate(timeout=60)[0].decode()
    assert holder.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output
    assert leftovers(inner_basedir) == NOTHING_LEFT
    assert not any(psutil.pid_exists(pid) and _not_zombie(pid) for pid in pids)


def test_failures_leave_nothing(pytester: pytest.Pytester, inner_basedir: Path) -> None:
    """A failing test, and a cluster whose replica cannot start once its primary runs
    (max_wal_senders lower than the primary's): both are torn down, the run directory
    goes."""
    pytester.makepyfile(test_failing=FAILING_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", f"--pgha-basedir={inner_basedir}", f"--pgha-pg-bindir={inner_bindir()}"
    )
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*/node1 exited with code 1 while starting; its log ends with:", "*max_wal_senders*"]
    )
    assert leftovers(inner_basedir) == NOTHING_LEFT


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
