"""The ledger: a write workload whose every transaction can be audited afterwards.

Each transaction inserts one row with a unique key (trial, worker, seq) and, in the
same statement, learns its transaction id, an LSN and the server it ran on
(``INSERT ... RETURNING pg_current_xact_id(), pg_current_wal_insert_lsn(),
inet_server_port()``: no extra round trip). The row is the marker that later decides
whether a commit whose connection broke happened (pytest_pgha.metrics.durability);
the xid is kept for the cross-check with pg_xact_status, which alone is not enough
across a failover (see that module).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from psycopg import pq

from pytest_pgha.cluster.lsn import int_to_lsn, lsn_to_int
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.workload.records import Outcome, TxRecord

if TYPE_CHECKING:
    from pytest_pgha.cluster.node import Node

LEDGER_TABLE = "pgha_ledger"
LEDGER_DDL = (
    f"CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} ("
    " trial bigint NOT NULL, worker integer NOT NULL, seq bigint NOT NULL,"
    " PRIMARY KEY (trial, worker, seq))"
)
# The statement of every ledger transaction; pgbench's equivalent script is in
# benchmarks/ledger_throughput.py.
INSERT_TEMPLATE = (
    f"INSERT INTO {LEDGER_TABLE} (trial, worker, seq) VALUES (%d, %d, %d)"
    " RETURNING pg_current_xact_id(), pg_current_wal_insert_lsn(), inet_server_port()"
)
# Once per connection: which cluster (system identifier) and which history (the
# timeline, from the name of the current WAL file; NULL on a standby).
SESSION_SQL = (
    b"SELECT system_identifier, CASE WHEN pg_is_in_recovery() THEN NULL"
    b" ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END"
    b" FROM pg_control_system()"
)
_SETTING_NAME = re.compile(r"^[a-z_][a-z0-9_.]*$")

# (txn_no, seq, xid, lsn, server port, session no): one per transaction attempted.
LedgerRow = tuple[int, int, "int | None", "int | None", "int | None", int]
# (system identifier, timeline) of one connection.
SessionInfo = tuple["int | None", "int | None"]


def begin_statement(settings: Sequence[tuple[str, str]]) -> bytes:
    """BEGIN plus the application's SET LOCALs, one simple query (one round trip)."""
    parts = ["BEGIN"]
    for name, value in settings:
        if not _SETTING_NAME.match(name):
            raise PghaConfigError.invalid(
                "session_settings", name, "give PostgreSQL setting names, e.g. synchronous_commit"
            )
        quoted = str(value).replace("'", "''")
        parts.append(f"SET LOCAL {name} = '{quoted}'")
    return "; ".join(parts).encode()


class LedgerTrail:
    """One worker's ledger state: its next key and what each attempt learnt."""

    def __init__(self, trial: int, worker: int, settings: Sequence[tuple[str, str]]) -> None:
        self.trial = trial
        self.worker = worker
        self.begin = begin_statement(settings)
        self.rows: list[LedgerRow] = []
        self.sessions: list[SessionInfo] = []
        self._seq = 0

    def connected(self, pgconn: pq.abc.PGconn) -> None:
        """Record the cluster and timeline of a new connection (never raises: a failed
        look-up leaves them unknown, the transactions still run)."""
        sysid: int | None = None
        timeline: int | None = None
        try:
            result = pgconn.exec_(SESSION_SQL)
            if result.status == pq.ExecStatus.TUPLES_OK and result.ntuples == 1:
                sysid = _int(result.get_value(0, 0))
                raw = result.get_value(0, 1)
                timeline = int(raw, 16) if raw else None
        except Exception:  # a broken connection shows on the next transaction
            pass
        self.sessions.append((sysid, timeline))

    def next_insert(self) -> bytes:
        self._seq += 1
        return (INSERT_TEMPLATE % (self.trial, self.worker, self._seq)).encode()

    def returned(self, txn_no: int, result: pq.abc.PGresult) -> None:
        """The INSERT answered: keep its xid, LSN and server."""
        lsn_text = result.get_value(0, 1)
        self.rows.append(
            (
                txn_no,
                self._seq,
                _int(result.get_value(0, 0)),
                lsn_to_int(lsn_text.decode()) if lsn_text else None,
                _int(result.get_value(0, 2)),
                len(self.sessions) - 1,
            )
        )

    def attempted(self, txn_no: int) -> None:
        """The transaction failed; keep its key even when the INSERT never answered."""
        if not self.rows or self.rows[-1][0] != txn_no:
            self.rows.append((txn_no, self._seq, None, None, None, len(self.sessions) - 1))


def _int(raw: bytes | None) -> int | None:
    return int(raw) if raw else None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One ledger transaction: what the client saw (record) and what it learnt."""

    record: TxRecord
    seq: int
    xid: int | None
    lsn: int | None
    server_port: int | None
    system_id: int | None
    timeline: int | None

    @property
    def key(self) -> tuple[int, int]:
        return (self.record.client_id, self.seq)

    @property
    def outcome(self) -> Outcome:
        return self.record.outcome

    def to_line(self) -> str:
        """The transaction log's line (pytest_pgha.workload.records) with the failure
        columns always present and six more: seq xid lsn port system_id timeline."""
        record = self.record
        base = record.to_pgbench_line()
        if record.outcome is Outcome.OK:
            base += " ok - alive"
        extra = (
            self.seq,
            _or_dash(self.xid),
            int_to_lsn(self.lsn) if self.lsn is not None else "-",
            _or_dash(self.server_port),
            _or_dash(self.system_id),
            _or_dash(self.timeline),
        )
        return f"{base} {' '.join(str(v) for v in extra)}"

    @classmethod
    def from_line(cls, line: str) -> LedgerEntry:
        fields = line.split()
        if len(fields) != 15:
            raise ValueError(f"not a pytest-pgha ledger log line: {line!r}")
        head = fields[:9]
        if head[6] == "ok":
            head = head[:6]
        record = TxRecord.from_pgbench_line(" ".join(head))
        seq, xid, lsn, port, sysid, timeline = fields[9:]
        return cls(
            record,
            int(seq),
            _from_dash(xid),
            lsn_to_int(lsn) if lsn != "-" else None,
            _from_dash(port),
            _from_dash(sysid),
            _from_dash(timeline),
        )


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _from_dash(text: str) -> int | None:
    return None if text == "-" else int(text)


def ledger_entries(
    records: Iterable[TxRecord],
    trails: Iterable[tuple[int, Sequence[LedgerRow], Sequence[SessionInfo]]],
) -> list[LedgerEntry]:
    """Pair each transaction record with what its worker's ledger trail kept."""
    by_attempt: dict[tuple[int, int], tuple[LedgerRow, SessionInfo]] = {}
    for client_id, rows, sessions in trails:
        for row in rows:
            session = sessions[row[5]] if 0 <= row[5] < len(sessions) else (None, None)
            by_attempt[(client_id, row[0])] = (row, session)
    entries = []
    for record in records:
        found = by_attempt.get((record.client_id, record.txn_no))
        if found is None:
            continue  # a failed connect: no transaction, no key
        (_, seq, xid, lsn, port, _), (sysid, timeline) = found
        entries.append(LedgerEntry(record, seq, xid, lsn, port, sysid, timeline))
    return entries


# -- the ledger on the servers --------------------------------------------------------
def create_ledger(node: Node, role: str = "app") -> None:
    """The ledger table on the primary, writable by the application's role."""
    node.sql(LEDGER_DDL)
    node.sql(f"GRANT SELECT, INSERT ON {LEDGER_TABLE} TO {role}")


def ledger_keys(node: Node, trial: int) -> set[tuple[int, int]]:
    """The (worker, seq) keys of one trial this node holds: one query, whatever the
    number of transactions."""
    rows = node.sql(f"SELECT worker, seq FROM {LEDGER_TABLE} WHERE trial = %s", [trial])
    return {(int(worker), int(seq)) for worker, seq in rows}


# pg_xact_status raises "transaction ID ... is in the future" (22023) for an xid at or
# past the next one: compare first, so that one such xid does not void the query.
XACT_STATUS_SQL = (
    "SELECT x::text, CASE WHEN x < pg_snapshot_xmax(pg_current_snapshot())"
    " THEN coalesce(pg_xact_status(x), 'too old') ELSE 'future' END"
    " FROM unnest(%s::xid8[]) AS x"
)


def xact_statuses(node: Node, xids: Iterable[int]) -> dict[int, str]:
    """pg_xact_status of each xid on this node, one query: 'committed', 'aborted',
    'in progress', 'too old' (NULL: the commit log no longer has it) or 'future'."""
    wanted = sorted(set(xids))
    if not wanted:
        return {}
    rows = node.sql(XACT_STATUS_SQL, [[str(x) for x in wanted]])
    return {int(x): str(status) for x, status in rows}
