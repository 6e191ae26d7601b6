"""Ports reserved safely across processes (xdist workers, concurrent runs)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_pgha.errors import PghaError
from pytest_pgha.sandbox.ports import PORT_RANGE, PortPool

RESERVE_MANY = """
import json, sys
from pathlib import Path
from pytest_pgha.sandbox.ports import PortPool
pool = PortPool(Path(sys.argv[1]))
print(json.dumps([pool.reserve("worker") for _ in range(int(sys.argv[2]))]))
"""


def test_concurrent_processes_never_share_a_port(tmp_path: Path) -> None:
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", RESERVE_MANY, str(tmp_path), "60"], stdout=subprocess.PIPE
        )
        for _ in range(4)
    ]
    reserved = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
    every = [port for ports_of_one in reserved for port in ports_of_one]
    assert len(every) == len(set(every)) == 240
    assert sorted(int(p.name) for p in tmp_path.iterdir()) == sorted(every)


def test_range_is_below_the_ephemeral_ports() -> None:
    """Outgoing connections take ephemeral ports: they must never take ours."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert PORT_RANGE.stop <= low


def test_a_busy_port_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = PortPool(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        free = pool.reserve()
        pool.release(free)
        monkeypatch.setattr("pytest_pgha.sandbox.ports.random.sample", lambda *_: [taken, free])
        assert pool.reserve() == free
    assert not (tmp_path / str(taken)).exists()  # no reservation kept for the busy one


def test_sentinel_records_the_owner(tmp_path: Path) -> None:
    pool = PortPool(tmp_path)
    port = pool.reserve("node0")
    assert (tmp_path / str(port)).read_text() == f"{os.getpid()} node0\n"
    pool.release(port)
    assert not (tmp_path / str(port)).exists()
    pool.release(port)  # twice is harmless


def test_reap_drops_reservations_of_dead_owners_only(tmp_path: Path) -> None:
    pool = PortPool(tmp_path)
    mine = pool.reserve()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "20001").write_text(f"{gone.pid} stale\n")
    (tmp_path / "20002").write_text("garbage")
    assert pool.reap() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [str(mine)]


def test_exhaustion_says_how_to_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = PortPool(tmp_path)
    (tmp_path / "20000").write_text(f"{os.getpid()} held\n")
    monkeypatch.setattr("pytest_pgha.sandbox.ports.random.sample", lambda *_: [20000])
    with pytest.raises(PghaError, match=r"no free loopback port .* run `pgha cleanup`"):
        pool.reserve()
