"""Read-your-writes on asynchronous standbys, kept by the client.

After each commit the client notes where the primary's WAL stands (past the commit
record); before it reads on a standby it waits until that standby has replayed that
far. It costs a query after each commit and, on a standby behind, the wait: the
price of reading one's own writes without `synchronous_commit = remote_apply` on
every standby. (PostgreSQL 19 has `WAIT FOR LSN` for the wait; no build of it is at
hand here, so every version polls `pg_last_wal_replay_lsn()`.)
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from pytest_pgha.errors import PghaError

WRITTEN_SQL = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"
# NULL on a primary: there is nothing to wait for.
REPLAYED_SQL = "SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn"


class StaleStandby(PghaError):
    """A standby did not replay the client's last commit within the timeout."""


def _lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


class ReadYourWrites:
    """The client's last commit position, and the wait for it on a standby.

    >>> ryw = ReadYourWrites(timeout_s=2.0)
    >>> primary.execute("INSERT ..."); ryw.note_commit(primary)
    >>> ryw.wait_on(standby, name="node1")   # then read on standby
    """

    def __init__(self, timeout_s: float = 5.0, poll_interval_s: float = 0.002) -> None:
        if timeout_s <= 0 or poll_interval_s <= 0:
            raise ValueError("timeout_s and poll_interval_s must be positive")
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self.last_commit_lsn = 0

    def note_commit(self, conn: psycopg.Connection[Any]) -> int:
        """Call on the writing session right after COMMIT (or an autocommit write):
        the WAL insert position then is past the commit record."""
        row = conn.execute(WRITTEN_SQL).fetchone()
        assert row is not None
        self.last_commit_lsn = max(self.last_commit_lsn, int(row[0]))
        return self.last_commit_lsn

    def wait_on(self, conn: psycopg.Connection[Any], name: str = "the standby") -> float:
        """Block until the node behind conn has replayed the last noted commit;
        returns the milliseconds waited. A primary returns at once. Raises
        StaleStandby naming the node, the LSN and how far behind it still is."""
        started = time.monotonic()
        deadline = started + self.timeout_s
        while True:
            row = conn.execute(REPLAYED_SQL).fetchone()
            replayed = None if row is None or row[0] is None else int(row[0])
            if replayed is None or replayed >= self.last_commit_lsn:
                return (time.monotonic() - started) * 1000.0
            if time.monotonic() >= deadline:
                raise StaleStandby(
                    f"{name} has not replayed the last commit at "
                    f"{_lsn_text(self.last_commit_lsn)} after {self.timeout_s:g} s: it "
                    f"stands at {_lsn_text(replayed)}, "
                    f"{self.last_commit_lsn - replayed} bytes behind; read on the primary, "
                    "or give the standby longer (timeout_s)"
                )
            time.sleep(self.poll_interval_s)
