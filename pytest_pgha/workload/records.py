"""The transaction log: one record per attempted transaction.

Written in pgbench's ``-l`` format (``client_id txn_no latency_us|- script_no epoch_s
epoch_us``) with two extra columns for failures: the error class and the SQLSTATE.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


class Outcome(str, enum.Enum):
    """What the application knows about a transaction it attempted."""

    OK = "ok"
    # The server definitely did not commit it: it refused (25006 read-only, 40001,
    # 40P01, ...) or the connection broke before COMMIT was sent.
    FAILED = "failed"
    # The connection broke while COMMIT was in flight: it may or may not have
    # committed. Never counted as failed; resolve it with txid_status.
    INDETERMINATE = "indeterminate"
    # The worker could not (re)connect, so no transaction started.
    CONNECT_FAILED = "connect_failed"

    @property
    def is_error(self) -> bool:
        return self is not Outcome.OK


@dataclass(frozen=True, slots=True)
class TxRecord:
    client_id: int
    txn_no: int
    start_us: int  # wall clock, microseconds since the epoch
    end_us: int
    outcome: Outcome
    sqlstate: str | None = None
    # True when the error left the client's connection unusable (the peer closed it),
    # False when the peer answered with an error on a live connection.
    connection_broken: bool = False

    @property
    def latency_us(self) -> int:
        return self.end_us - self.start_us

    def to_pgbench_line(self) -> str:
        latency = str(self.latency_us) if self.outcome is Outcome.OK else "-"
        seconds, micros = divmod(self.end_us, 1_000_000)
        line = f"{self.client_id} {self.txn_no} {latency} 0 {seconds} {micros}"
        if self.outcome is Outcome.OK:
            return line
        broken = "broken" if self.connection_broken else "alive"
        return f"{line} {self.outcome.value} {self.sqlstate or '-'} {broken}"

    @classmethod
    def from_pgbench_line(cls, line: str) -> TxRecord:
        fields = line.split()
        if len(fields) not in (6, 9):
            raise ValueError(f"not a pytest-pgha transaction log line: {line!r}")
        client_id, txn_no, latency, _script, seconds, micros = fields[:6]
        end_us = int(seconds) * 1_000_000 + int(micros)
        if latency != "-":
            return cls(int(client_id), int(txn_no), end_us - int(latency), end_us, Outcome.OK)
        outcome = Outcome(fields[6]) if len(fields) == 9 else Outcome.FAILED
        sqlstate = fields[7] if len(fields) == 9 and fields[7] != "-" else None
        broken = len(fields) == 9 and fields[8] == "broken"
        return cls(int(client_id), int(txn_no), end_us, end_us, outcome, sqlstate, broken)


def write_log(records: Iterable[TxRecord], out: TextIO) -> None:
    for record in records:
        out.write(record.to_pgbench_line())
        out.write("\n")


def read_log(path: Path) -> Iterator[TxRecord]:
    with path.open() as lines:
        for line in lines:
            if line.strip():
                yield TxRecord.from_pgbench_line(line)
