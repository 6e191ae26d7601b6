"""The ledger workload against a real server: every transaction carries its key, xid,
LSN and server, and the ledger holds exactly what was acknowledged."""

import itertools
import time

import pytest

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.ledger import (
    LedgerEntry,
    begin_statement,
    create_ledger,
    ledger_keys,
    xact_statuses,
)
from pytest_pgha.workload.records import Outcome

sync_cluster = pgha_cluster_factory(replicas=1, synchronous="FIRST 1 (node1)")


def run_ledger(dsn, seconds, trial, **options):
    with WorkloadDriver(dsn, WorkloadOptions(mode="ledger", trial=trial, **options)) as driver:
        time.sleep(seconds)
    return driver.ledger_entries()


def test_every_acknowledged_ledger_row_is_in_the_table_with_its_xid(pgha_cluster):
    primary = pgha_cluster.primary
    create_ledger(primary)
    entries = run_ledger(primary.dsn("app"), 1.0, trial=11, workers=3)
    assert len(entries) > 100 and all(e.outcome is Outcome.OK for e in entries)
    assert len({e.key for e in entries}) == len(entries)
    assert ledger_keys(primary, 11) == {e.key for e in entries}
    assert ledger_keys(primary, 12) == set()
    sysid = primary.value("SELECT system_identifier FROM pg_control_system()")
    assert {(e.server_port, e.system_id, e.timeline) for e in entries} == {(primary.port, sysid, 1)}
    # Distinct xids, LSNs that grow with each worker's sequence.
    assert len({e.xid for e in entries}) == len(entries)
    for worker in {e.record.client_id for e in entries}:
        mine = sorted((e for e in entries if e.record.client_id == worker), key=lambda e: e.seq)
        assert [e.seq for e in mine] == list(range(1, len(mine) + 1))
        assert all(a.lsn < b.lsn for a, b in itertools.pairwise(mine))
    statuses = xact_statuses(primary, [e.xid for e in entries[:50]])
    assert set(statuses.values()) == {"committed"}
    # An xid not handed out yet is "future", not an error that voids the query.
    next_xid = int(primary.value("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))
    assert xact_statuses(primary, [next_xid + 1000])[next_xid + 1000] == "future"


def test_a_ledger_log_line_keeps_every_column():
    line = "3 17 - 0 1700000000 123456 indeterminate 08006 broken 18 745 0/3000060 5433 7301 2"
    entry = LedgerEntry.from_line(line)
    assert entry.key == (3, 18) and entry.xid == 745 and entry.lsn == 0x3000060
    assert entry.outcome is Outcome.INDETERMINATE and entry.timeline == 2
    assert LedgerEntry.from_line(entry.to_line()) == entry


def test_settings_the_application_sets_apply_to_each_transaction(sync_cluster):
    """synchronous_commit = local, set by the application: commits return at once even
    while the synchronous standby is down (and would wait without it)."""
    primary = sync_cluster.primary
    create_ledger(primary)
    sync_cluster.replicas[0].stop("fast")
    entries = run_ledger(
        primary.dsn("app"),
        0.5,
        trial=5,
        workers=2,
        session_settings=(("synchronous_commit", "local"),),
    )
    assert len(entries) > 20 and all(e.outcome is Outcome.OK for e in entries)


def test_a_setting_name_that_is_not_one_is_refused():
    with pytest.raises(PghaConfigError, match="session_settings"):
        begin_statement([("synchronous_commit; DROP TABLE x", "on")])
    assert begin_statement([("synchronous_commit", "it's")]) == (
        b"BEGIN; SET LOCAL synchronous_commit = 'it''s'"
    )
