"""SysV shared memory a crashed postmaster or proxy leaves behind.

A postmaster keeps a small SysV segment as an interlock and names it in
postmaster.pid. It removes it when it exits, but not when it is SIGKILLed; PostgreSQL
only cleans it up when a server starts again in the same data directory, and the
harness throws data directories away. Each leak is tiny, but the kernel allows
kernel.shmmni (4096) segments in all: past that no postmaster starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from pathlib import Path

IPC_RMID = 0
_KEY_LINE = 6  # 0-based line of postmaster.pid: "<key> <shmid>"
_SYSVIPC = Path("/proc/sysvipc/shm")


def segment_of(datadir: Path) -> tuple[int, int] | None:
    """(key, shmid) that datadir's postmaster.pid names, if any."""
    try:
        line = (datadir / "postmaster.pid").read_text().splitlines()[_KEY_LINE]
        key, shmid = (int(field) for field in line.split())
    except (OSError, IndexError, ValueError):
        return None
    return key, shmid


def _attached(key: int, shmid: int) -> int | None:
    """How many processes have the segment attached; None if it does not exist."""
    with contextlib.suppress(OSError):
        for row in _SYSVIPC.read_text().splitlines()[1:]:
            fields = row.split()
            # key shmid perms size cpid lpid nattch ...
            if int(fields[0]) == key and int(fields[1]) == shmid:
                return int(fields[6])
    return None


def release_segment(datadir: Path, *, settle_s: float = 0.0) -> bool:
    """Remove the segment datadir's postmaster left, once nothing is attached to it
    (a live server always is). settle_s: how long to wait for processes that were just
    SIGKILLed to detach (the kernel does it as they exit, not as they are signalled).
    Returns whether one was removed."""
    segment = segment_of(datadir)
    if segment is None:
        return False
    deadline = time.monotonic() + settle_s
    while _attached(*segment) not in (0, None) and time.monotonic() < deadline:
        time.sleep(0.01)
    if _attached(*segment) != 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.shmctl(ctypes.c_int(segment[1]), IPC_RMID, None)) == 0


def release_segments_under(directory: Path, *, settle_s: float = 0.0) -> int:
    """release_segment() for every data directory below directory."""
    return sum(
        release_segment(pid_file.parent, settle_s=settle_s)
        for pid_file in directory.rglob("postmaster.pid")
    )


def release_orphaned_segments(uid: int) -> int:
    """Remove the segments of user uid that nothing is attached to and whose creator
    has exited: what a SIGKILLed server left. Pgpool-II allocates one of about 130 MB
    per start (its shared memory and query cache) and frees it only on a clean exit;
    leaked after each crash, 170 of them once took 22 GB of RAM. A live server keeps
    its segments attached, so it never loses one here. Call it once the server's
    processes are gone (they detach as they exit). Returns how many went."""
    libc = ctypes.CDLL(None, use_errno=True)
    return sum(
        int(libc.shmctl(ctypes.c_int(shmid), IPC_RMID, None)) == 0 for shmid in _orphans(uid)
    )


def _orphans(uid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for row in _SYSVIPC.read_text().splitlines()[1:]:
            fields = row.split()
            # key shmid perms size cpid lpid nattch uid ...
            shmid, cpid, nattch, owner = (int(fields[i]) for i in (1, 4, 6, 7))
            if owner == uid and nattch == 0 and not Path(f"/proc/{cpid}").exists():
                found.append(shmid)
    return found
