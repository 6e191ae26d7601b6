"""Read a postmaster's state from its postmaster.pid, without connecting to it.

Polling the file every few milliseconds tells "ready"/"standby" much sooner than
pg_ctl -w (which polls every 100 ms) and costs the server nothing.
"""

from __future__ import annotations

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
