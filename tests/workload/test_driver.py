"""The workload driver against real servers: each error class comes from a real
failure, not a mock."""

import os
import threading
import time

import pytest
from workload_helpers import gone, orphans_stop_by_themselves

from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.errors import classify
from pytest_pgha.workload.records import Outcome

sync_cluster = pgha_cluster_factory(replicas=1, synchronous="FIRST 1 (node1)")


def run_for(dsn, seconds, **options):
    with WorkloadDriver(dsn, WorkloadOptions(**options)) as driver:
        time.sleep(seconds)
    return driver.records()


def test_writes_commit_and_are_logged_in_pgbench_format(pgha_cluster):
    records = run_for(pgha_cluster.primary.dsn("app"), 1.0, workers=4)
    ok = [r for r in records if r.outcome is Outcome.OK]
    assert len(ok) > 100 and len(ok) == len(records)
    assert {r.client_id for r in ok} == {0, 1, 2, 3}
    # The updates really reached the table.
    changed = pgha_cluster.primary.value(
        "SELECT count(*) FROM pgbench_accounts WHERE abalance <> 0"
    )
    assert changed > 0
    line = ok[0].to_pgbench_line().split()
    assert len(line) == 6 and int(line[2]) == ok[0].latency_us


def test_a_standby_refuses_writes_definitely_with_25006(pgha_cluster):
    records = run_for(pgha_cluster.replicas[0].dsn("app"), 0.3, workers=1)
    assert records and all(r.outcome is Outcome.FAILED for r in records)
    assert {r.sqlstate for r in records} == {"25006"}


def test_a_closed_port_is_a_connect_failure(pgha_cluster):
    node = pgha_cluster.replicas[0]
    node.stop("fast")
    records = run_for(node.dsn("app"), 0.3, workers=1, retry_backoff_s=0.05)
    assert records and all(r.outcome is Outcome.CONNECT_FAILED for r in records)


def test_a_connection_lost_during_commit_is_indeterminate(sync_cluster):
    """The synchronous standby is stopped, so COMMIT waits; terminating the backend
    while it waits breaks the connection during COMMIT: outcome unknown (and in fact
    committed locally, the talk's myth 2)."""
    sync_cluster.replicas[0].stop("fast")
    driver = WorkloadDriver(sync_cluster.primary.dsn("app"), WorkloadOptions(workers=1))
    driver.start()
    try:
        waiting = []
        deadline = time.monotonic() + 10
        while not waiting and time.monotonic() < deadline:
            waiting = sync_cluster.primary.sql(
                "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            )
            time.sleep(0.05)
        assert waiting, "COMMIT never waited for the stopped synchronous standby"
        sync_cluster.primary.sql("SELECT pg_terminate_backend(%s)", [waiting[0][0]])
        time.sleep(0.3)
    finally:
        # Let the next commits through so the driver can stop.
        sync_cluster.primary.sql("ALTER SYSTEM SET synchronous_standby_names = ''")
        sync_cluster.primary.sql("SELECT pg_reload_conf()")
        driver.stop()
    first = driver.records()[0]
    assert first.outcome is Outcome.INDETERMINATE
    # libpq reports the FATAL 57P01 or just the lost connection, depending on timing.
    assert first.sqlstate in (None, "57P01") and first.connection_broken


def test_a_frozen_server_is_cut_off_by_the_client_side_statement_timeout(pgha_cluster):
    primary = pgha_cluster.primary
    driver = WorkloadDriver(primary.dsn("app"), WorkloadOptions(workers=2, statement_timeout_s=0.5))
    driver.start()
    time.sleep(0.3)
    primary.freeze()
    frozen_at = time.time_ns() // 1000
    try:
        time.sleep(1.5)
    finally:
        primary.thaw()
        driver.stop()
    errors = [r for r in driver.records() if r.end_us > frozen_at and r.outcome.is_error]
    assert errors, "no transaction was cut off"
    first = min(errors, key=lambda r: r.end_us)
    assert 0.4e6 <= first.end_us - frozen_at <= 1.2e6


def test_rate_limits_the_workload(pgha_cluster):
    records = run_for(pgha_cluster.primary.dsn("app"), 2.0, workers=4, rate=200)
    assert 300 <= len(records) <= 450


def test_read_mode_reads_from_a_standby(pgha_cluster):
    records = run_for(pgha_cluster.replicas[0].dsn("app"), 0.5, workers=2, mode="read")
    assert records and all(r.outcome is Outcome.OK for r in records)


@pytest.mark.parametrize(
    ("stage", "sqlstate", "broken", "expected"),
    [
        ("begin", None, True, Outcome.FAILED),
        ("update", "25006", False, Outcome.FAILED),
        ("commit", "40001", False, Outcome.FAILED),
        ("commit", None, True, Outcome.INDETERMINATE),
        ("commit", "57P01", True, Outcome.INDETERMINATE),
        ("commit", "08006", False, Outcome.INDETERMINATE),
    ],
)
def test_classification_follows_jepsens_error_model(stage, sqlstate, broken, expected):
    assert classify(stage, sqlstate, broken) is expected


def test_stop_returns_while_workers_are_blocked():
    # Nothing listens there: every attempt is a fast connect failure.
    driver = WorkloadDriver(
        "host=127.0.0.1 port=9 connect_timeout=2 user=x dbname=x",
        WorkloadOptions(workers=2, retry_backoff_s=0.01),
    )
    driver.start()
    time.sleep(0.2)
    stopper = threading.Thread(target=driver.stop)
    stopper.start()
    stopper.join(5)
    assert not stopper.is_alive()
    assert all(r.outcome is Outcome.CONNECT_FAILED for r in driver.records())


def test_the_workers_run_in_a_process_of_their_own(pgha_cluster):
    """The harness's interpreter keeps no worker thread: its instruments never wait
    for the interpreter lock behind a reconnect storm."""
    started_us = time.time_ns() // 1000
    with WorkloadDriver(pgha_cluster.primary.dsn("app"), WorkloadOptions(workers=3)) as driver:
        pids = driver.pids
        assert len(set(pids)) == 3 and os.getpid() not in pids
        assert not [t for t in threading.enumerate() if t.name.startswith("pgha-worker")]
        deadline = time.monotonic() + 10
        while driver.workers_recovered(started_us) < 3:
            assert time.monotonic() < deadline, "the shared last-commit times never moved"
            time.sleep(0.02)
    assert all(gone(pid) for pid in pids)
    assert {r.client_id for r in driver.records()} == {0, 1, 2}
    assert driver.ok_count() == len(driver.records()) and driver.cpu_s > 0
    lag = driver.lag()
    assert lag.samples > 0 and lag.by_source_max_ms.keys() == {"heartbeat"}


def test_a_worker_whose_last_transaction_failed_is_not_recovered(pgha_cluster):
    standby = pgha_cluster.replicas[0]
    with WorkloadDriver(standby.dsn("app"), WorkloadOptions(workers=2)) as driver:
        time.sleep(0.3)
        assert driver.workers_recovered(0) == 0
    assert driver.records() and all(r.outcome is Outcome.FAILED for r in driver.records())


ORPHANING = """
import os
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
driver = WorkloadDriver("host=127.0.0.1 port=1 connect_timeout=1", WorkloadOptions(workers=2))
driver.start()
print(*driver.pids, flush=True)
os._exit(0)  # dies like a SIGKILLed run: no clean-up code runs
"""


def test_an_orphaned_workload_process_stops_by_itself():
    orphans_stop_by_themselves(ORPHANING, expected=2, within_s=10)
