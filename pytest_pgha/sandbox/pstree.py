"""Reaching every process of a server, not just its process group.

PostgreSQL's children call setsid(): each backend, walsender or checkpointer leads its
own session, so killpg(postmaster) reaches the postmaster alone. While the postmaster
lives, its descendants are found through parent links; once it is dead they are
orphans, found by their working directory (a postmaster and all its children run in
the data directory).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psutil


def process_tree(pid: int) -> list[psutil.Process]:
    """pid and its living descendants, pid first; [] when pid is gone."""
    try:
        leader = psutil.Process(pid)
        members = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    return [p for p in members if _alive(p)]


def signal_tree(pid: int, signum: int) -> None:
    """Signal pid, then its descendants. For SIGSTOP, the descendants are listed only
    once pid really is stopped: a postmaster that still runs may fork one more."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)
    if signum == signal.SIGSTOP:
        _wait_stopped(pid)
    for proc in process_tree(pid)[1:]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.send_signal(signum)


def _wait_stopped(pid: int, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.001)


def kill_all(victims: list[psutil.Process], timeout: float = 10.0) -> int:
    """SIGKILL victims and wait until they are dead; returns how many there were."""
    for proc in victims:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.kill()
    wait_dead(victims, timeout)
    return len(victims)


def wait_dead(procs: list[psutil.Process], timeout: float = 10.0) -> bool:
    """Wait until every process is gone or a zombie. A zombie holds no file, socket or
    shared memory, and only its parent (often init, for orphans) can make it go:
    waiting for that would wait for init's schedule."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in procs):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def kill_tree(pid: int, timeout: float = 10.0) -> int:
    killed = kill_all(process_tree(pid), timeout)
    # Programs that keep children in their group (unlike PostgreSQL) are covered too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return killed


def processes_inside(directory: Path) -> list[psutil.Process]:
    """Living processes whose working directory or command line lies under directory."""
    root = str(directory.resolve())
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            paths = [proc.cwd(), *(proc.info["cmdline"] or [])]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if any(p == root or p.startswith(root + os.sep) for p in paths):
            found.append(proc)
    return found


def signal_inside(directory: Path, signum: int) -> None:
    for proc in processes_inside(directory):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.send_signal(signum)


def kill_inside(directory: Path, timeout: float = 10.0) -> int:
    return kill_all(processes_inside(directory), timeout)


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
