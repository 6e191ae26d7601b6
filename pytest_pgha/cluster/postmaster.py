"""Read a postmaster's state from its postmaster.pid, without connecting to it.

Polling the file every few milliseconds tells "ready"/"standby" much sooner than
pg_ctl -w (which polls every 100 ms) and costs the server nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

_STATUS_LINE = 7  # 0-based; PostgreSQL 10+ writes "starting", "ready", "standby", "stopping"


def pid_file_status(datadir: Path) -> tuple[int, str] | None:
    try:
        lines = (datadir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return None
    if len(lines) <= _STATUS_LINE:
        return None
    try:
        return int(lines[0]), lines[_STATUS_LINE].strip()
    except ValueError:
        return None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group_and_wait(pgid: int, timeout: float = 10.0) -> None:
    """SIGKILL every process of the group and wait until none is left, so that no
    orphan backend still holds the old shared memory when the node starts again."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.005)
