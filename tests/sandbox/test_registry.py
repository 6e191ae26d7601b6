"""The registry reaps what dead owners left: process trees, directories, stragglers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import psutil
import pytest

from pytest_pgha.sandbox.pstree import process_tree
from pytest_pgha.sandbox.registry import Entry, Registry

# Like a postmaster: children that make sessions of their own (setsid), so that
# killing the leader's process group would miss them.
POSTMASTER_LIKE = """
import os, time
for _ in range(2):
    if os.fork() == 0:
        os.setsid()
        time.sleep(60)
        os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def spawned() -> Generator[list[subprocess.Popen[bytes]], None, None]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        for member in process_tree(proc.pid):
            member.kill()
        proc.wait()


def _postmaster_like(spawned: list[subprocess.Popen[bytes]], cwd: Path) -> list[psutil.Process]:
    proc = subprocess.Popen(
        [sys.executable, "-c", POSTMASTER_LIKE],
        cwd=cwd,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    spawned.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    tree = process_tree(proc.pid)
    assert len(tree) == 3
    return tree


def _registry_of_a_dead_owner(directory: Path) -> Registry:
    registry = Registry(directory)
    gone = subprocess.Popen(["true"])
    gone.wait()
    registry._owner_pid, registry._owner_started = gone.pid, 1.0
    return registry


def _gone(procs: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)


def test_dead_owners_process_tree_is_killed(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    tree = _postmaster_like(spawned, tmp_path)
    registry = _registry_of_a_dead_owner(tmp_path / "registry")
    registry.add_process(tree[0].pid, "node0")
    report = registry.reap()
    assert report.processes == 1
    spawned[0].wait(5)
    psutil.wait_procs(tree[1:], timeout=5)
    assert _gone(tree)
    assert registry.entries() == []


def test_live_owners_processes_are_left_alone(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    tree = _postmaster_like(spawned, tmp_path)
    registry = Registry(tmp_path / "registry")  # owned by this very process
    registry.add_process(tree[0].pid, "node0")
    assert registry.reap().processes == 0
    assert all(p.is_running() for p in tree)
    assert registry.reap(everything=True).processes == 1  # `pgha cleanup --all`
    psutil.wait_procs(tree[1:], timeout=5)
    assert _gone(tree[1:])


def test_a_reused_pid_is_not_killed(tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    """The entry's pid now belongs to another process (started at another time)."""
    tree = _postmaster_like(spawned, tmp_path)
    registry = _registry_of_a_dead_owner(tmp_path / "registry")
    token = registry.add_process(tree[0].pid, "node0")
    entry = json.loads(token.read_text())
    token.write_text(json.dumps({**entry, "pid_started": entry["pid_started"] - 1000}))
    assert registry.reap().processes == 0
    assert all(p.is_running() for p in tree)
    assert registry.entries() == []


def test_dead_owners_directory_goes_with_unregistered_processes_inside(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    """Killed between starting a server and registering it: the process still works
    in the run directory, and dies with it."""
    run_dir = tmp_path / "runs" / "killed-run"
    (run_dir / "node0").mkdir(parents=True)
    tree = _postmaster_like(spawned, run_dir / "node0")
    registry = _registry_of_a_dead_owner(tmp_path / "registry")
    registry.add_directory(run_dir)
    report = registry.reap()
    assert (report.processes, report.directories) == (3, 1)
    assert _gone(tree)
    assert not run_dir.exists()


def test_reap_owned_by_me_can_keep_directories(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    tree = _postmaster_like(spawned, tmp_path)
    registry = Registry(tmp_path / "registry")
    registry.add_process(tree[0].pid, "node0")
    kept = tmp_path / "kept"
    kept.mkdir()
    registry.add_directory(kept)
    report = registry.reap_owned_by_me(keep_directories=True)
    assert (report.processes, report.directories) == (1, 0)
    assert kept.exists()


def test_unreadable_entries_are_skipped(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    (tmp_path / "process-broken.json").write_text("{not json")
    (tmp_path / "process-wrong.json").write_text('{"unexpected": 1}')
    assert registry.entries() == []
    assert registry.reap().processes == 0


def test_directories_are_registered_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    registry = Registry(tmp_path / "registry")
    registry.add_directory(Path("relative"))
    [(_, entry)] = registry.entries()
    assert entry == Entry(
        entry.owner_pid, entry.owner_started, "directory", path=str(tmp_path / "relative")
    )
