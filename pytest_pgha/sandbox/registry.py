"""A registry on disk of every process and directory a run started.

Fixtures stop what they start, even on failure or Ctrl-C. But a run killed with
SIGKILL runs no finalizer: the next run (or `pgha cleanup`) reads this registry and
reaps what belonged to owners that are no longer alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import psutil

from pytest_pgha.sandbox.pstree import kill_inside, kill_tree
from pytest_pgha.sandbox.sysv import release_segments_under


def _start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


@dataclass(frozen=True)
class Entry:
    owner_pid: int
    owner_started: float
    kind: str  # "process" or "directory"
    pid: int = 0
    pid_started: float = 0.0
    path: str = ""
    label: str = ""
    # Kept on purpose (--pgha-keep): only an explicit `pgha cleanup` removes it.
    kept: bool = False

    def owner_alive(self) -> bool:
        started = _start_time(self.owner_pid)
        return started is not None and abs(started - self.owner_started) < 1.0

    def process_alive(self) -> bool:
        started = _start_time(self.pid)
        return started is not None and abs(started - self.pid_started) < 1.0


@dataclass
class ReapReport:
    processes: int = 0
    directories: int = 0

    def __str__(self) -> str:
        return f"reaped {self.processes} orphan process group(s), {self.directories} director(ies)"


class Registry:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._owner_pid = os.getpid()
        self._owner_started = _start_time(self._owner_pid) or 0.0

    def _write(self, entry: Entry) -> Path:
        path = self.directory / f"{entry.kind}-{uuid.uuid4().hex}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(entry)))
        tmp.rename(path)
        return path

    def add_process(self, pid: int, label: str) -> Path:
        entry = Entry(
            self._owner_pid,
            self._owner_started,
            "process",
            pid=pid,
            pid_started=_start_time(pid) or 0.0,
            label=label,
        )
        return self._write(entry)

    def add_directory(self, path: Path) -> Path:
        # Absolute: `pgha cleanup` may run from another working directory.
        absolute = str(path.resolve())
        return self._write(Entry(self._owner_pid, self._owner_started, "directory", path=absolute))

    @staticmethod
    def _rewrite(path: Path, entry: Entry) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(entry)))
        tmp.rename(path)

    def kept_directories(self) -> list[Path]:
        return [Path(e.path) for _, e in self.entries() if e.kind == "directory" and e.kept]

    @staticmethod
    def remove(token: Path) -> None:
        token.unlink(missing_ok=True)

    def entries(self) -> list[tuple[Path, Entry]]:
        found = []
        for path in sorted(self.directory.glob("*.json")):
            with contextlib.suppress(OSError, ValueError, TypeError):
                found.append((path, Entry(**json.loads(path.read_text()))))
        return found

    def reap(self, *, everything: bool = False, kept: bool = False) -> ReapReport:
        """Kill and delete what dead owners left (with everything=True: all of it);
        directories a run kept on purpose only with kept=True."""
        report = ReapReport()
        entries = self.entries()
        # Processes first: a data directory cannot go while its postmaster runs.
        for path, entry in sorted(entries, key=lambda pe: pe[1].kind != "process"):
            if entry.kept and not kept:
                continue
            if not everything and not entry.kept and entry.owner_alive():
                continue
            _reap_entry(entry, report)
            path.unlink(missing_ok=True)
        return report

    def reap_owned_by_me(self, *, keep_directories: bool = False) -> ReapReport:
        """At the end of a run: whatever this process registered and did not remove;
        with keep_directories its directories are marked kept instead."""
        report = ReapReport()
        for path, entry in self.entries():
            if entry.owner_pid != self._owner_pid:
                continue
            if entry.kind == "directory" and keep_directories:
                self._rewrite(path, replace(entry, kept=True))
                continue
            _reap_entry(entry, report)
            path.unlink(missing_ok=True)
        return report


def _reap_entry(entry: Entry, report: ReapReport) -> None:
    if entry.kind == "process" and entry.process_alive():
        # The tree while the leader lives: a dead postmaster's children are orphans.
        kill_tree(entry.pid)
        report.processes += 1
    elif entry.kind == "directory" and os.path.exists(entry.path):
        # Orphaned children, and a process started just before its owner was killed
        # (not registered yet), still work inside the directory. Files they create
        # while rmtree runs would leave the directory behind, so they die first.
        report.processes += kill_inside(Path(entry.path))
        release_segments_under(Path(entry.path), settle_s=2.0)
        shutil.rmtree(entry.path, ignore_errors=True)
        report.directories += 1


def kill_process_group(pid: int) -> None:
    """SIGKILL a process and every process of the group it leads."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
