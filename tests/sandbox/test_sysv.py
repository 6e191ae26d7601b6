"""A crashed postmaster's SysV segment is released, a live one's never."""

from __future__ import annotations

import ctypes
import secrets
from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_pgha.sandbox.sysv import (
    IPC_RMID,
    release_segment,
    release_segments_under,
    segment_of,
)
from pytest_pgha.sandbox.sysv import _attached as attached

IPC_CREAT_EXCL_600 = 0o1000 | 0o2000 | 0o600
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.shmat.restype = ctypes.c_void_p


@pytest.fixture
def segment() -> Generator[tuple[int, int], None, None]:
    """A real 56-byte segment, as a postmaster makes."""
    key = secrets.randbelow(2**30) + 1
    shmid = LIBC.shmget(ctypes.c_int(key), ctypes.c_size_t(56), IPC_CREAT_EXCL_600)
    assert shmid >= 0, ctypes.get_errno()
    yield key, shmid
    LIBC.shmctl(ctypes.c_int(shmid), IPC_RMID, None)


def _pid_file(datadir: Path, key: int, shmid: int) -> None:
    datadir.mkdir(parents=True)
    lines = ["4242", str(datadir), "1700000000", "5432", "", "127.0.0.1", f"  {key}  {shmid}"]
    (datadir / "postmaster.pid").write_text("\n".join([*lines, "ready", ""]))


def test_reads_the_segment_from_postmaster_pid(tmp_path: Path) -> None:
    _pid_file(tmp_path / "node0", 123, 456)
    assert segment_of(tmp_path / "node0") == (123, 456)
    assert segment_of(tmp_path / "nowhere") is None


def test_an_unattached_segment_is_released(tmp_path: Path, segment: tuple[int, int]) -> None:
    _pid_file(tmp_path / "node0", *segment)
    assert attached(*segment) == 0
    assert release_segment(tmp_path / "node0")
    assert attached(*segment) is None
    assert not release_segment(tmp_path / "node0")  # gone already


def test_an_attached_segment_is_kept(tmp_path: Path, segment: tuple[int, int]) -> None:
    """Attached means a server still uses it."""
    _pid_file(tmp_path / "node0", *segment)
    address = LIBC.shmat(ctypes.c_int(segment[1]), None, 0)
    try:
        assert attached(*segment) == 1
        assert not release_segment(tmp_path / "node0")
    finally:
        LIBC.shmdt(ctypes.c_void_p(address))


def test_a_reused_id_with_another_key_is_kept(tmp_path: Path, segment: tuple[int, int]) -> None:
    key, shmid = segment
    _pid_file(tmp_path / "node0", key + 1, shmid)
    assert not release_segment(tmp_path / "node0")
    assert attached(key, shmid) == 0


def test_every_data_directory_under_a_run(tmp_path: Path, segment: tuple[int, int]) -> None:
    _pid_file(tmp_path / "run" / "gw0" / "test_a" / "node1", *segment)
    assert release_segments_under(tmp_path / "run") == 1
    assert attached(*segment) is None


MAKE_SEGMENT = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, ctypes.c_size_t(4096), 0o1000 | 0o600)  # IPC_PRIVATE, as Pgpool-II
if sys.argv[1] == "attached":
    libc.shmat(shmid, None, 0)
print(shmid, flush=True)
if sys.argv[1] == "attached":
    sys.stdin.read()  # stays attached until told to go
"""


def test_orphaned_segments_of_a_dead_creator_go_live_ones_stay() -> None:
    import os
    import subprocess
    import sys

    from pytest_pgha.sandbox.sysv import release_orphaned_segments

    uid = os.geteuid()
    orphan = subprocess.run(
        [sys.executable, "-c", MAKE_SEGMENT, "orphan"], capture_output=True, text=True, check=True
    )
    orphan_id = int(orphan.stdout)
    live = subprocess.Popen(
        [sys.executable, "-c", MAKE_SEGMENT, "attached"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert live.stdout is not None
    live_id = int(live.stdout.readline())
    try:
        assert release_orphaned_segments(uid) >= 1
        ids = {
            int(row.split()[1]) for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        }
        assert orphan_id not in ids and live_id in ids
    finally:
        live.communicate("")
        LIBC.shmctl(ctypes.c_int(live_id), IPC_RMID, None)
        LIBC.shmctl(ctypes.c_int(orphan_id), IPC_RMID, None)
