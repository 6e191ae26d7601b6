"""Helpers for the tests that a harness process dying leaves no instrument behind."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def orphans_stop_by_themselves(script: str, *, expected: int, within_s: float) -> None:
    """Run `script`, which starts processes, prints their pids and dies without
    clean-up; then every one of them must be gone within within_s."""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    pids = [int(pid) for pid in out.stdout.split()]
    assert len(pids) == expected, out.stdout
    deadline = time.monotonic() + within_s
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"processes {pids} outlived their parent"
        time.sleep(0.05)
