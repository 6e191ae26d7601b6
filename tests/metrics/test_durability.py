"""The outcome resolver's rules, one transaction at a time, and the figures."""

from pytest_pgha.metrics.catalog import CATALOG
from pytest_pgha.metrics.durability import Verdict, figures, needs_status, resolve
from pytest_pgha.workload.ledger import LedgerEntry
from pytest_pgha.workload.records import Outcome, TxRecord

INJECT_US = 10_000_000


def entry(seq, outcome, *, xid=None, end_us=INJECT_US - 1000, worker=0):
    record = TxRecord(worker, seq, end_us - 500, end_us, outcome)
    return LedgerEntry(record, seq, xid, None, 5432, 1, 1)


def verdict_of(item, present, statuses=None):
    [resolved] = resolve([item], {item.key} if present else set(), statuses or {})
    return resolved


def test_acknowledged_rows_are_ok_when_present_and_lost_when_absent():
    assert verdict_of(entry(1, Outcome.OK), True).verdict is Verdict.OK
    assert verdict_of(entry(1, Outcome.OK), False).verdict is Verdict.LOST


def test_a_refused_transaction_whose_row_exists_is_a_phantom():
    assert verdict_of(entry(1, Outcome.FAILED), True).verdict is Verdict.PHANTOM
    assert verdict_of(entry(1, Outcome.FAILED), False).verdict is Verdict.FAILED


def test_the_marker_row_decides_a_broken_commit_whatever_txid_status_says():
    broken = entry(1, Outcome.INDETERMINATE, xid=700)
    committed = verdict_of(broken, True, {700: "aborted"})
    assert committed.verdict is Verdict.COMMITTED and committed.trap
    # The xid was reused on the new timeline: txid_status says committed, the row is gone.
    reused = verdict_of(broken, False, {700: "committed"})
    assert reused.verdict is Verdict.ABORTED and reused.trap
    # Never shipped, not reused yet: "in the future", an error where an answer was needed.
    assert verdict_of(broken, False, {700: "future"}).trap
    agreeing = verdict_of(broken, False, {700: "aborted"})
    assert agreeing.verdict is Verdict.ABORTED and not agreeing.trap


def test_a_commit_still_waiting_for_a_standby_is_unknown_with_the_reason():
    waiting = verdict_of(entry(1, Outcome.INDETERMINATE, xid=9), False, {9: "in progress"})
    assert waiting.verdict is Verdict.UNKNOWN and "synchronous standby" in waiting.reason
    assert not waiting.trap


def test_a_lost_write_that_txid_status_calls_committed_is_a_trap():
    lost = verdict_of(entry(1, Outcome.OK, xid=42), False, {42: "committed"})
    assert lost.verdict is Verdict.LOST and lost.trap


def test_only_broken_commits_and_lost_writes_are_asked_about():
    assert needs_status(entry(1, Outcome.INDETERMINATE, xid=1), present=True)
    assert needs_status(entry(1, Outcome.OK, xid=1), present=False)
    assert not needs_status(entry(1, Outcome.OK, xid=1), present=True)
    assert not needs_status(entry(1, Outcome.FAILED, xid=1), present=False)
    assert not needs_status(entry(1, Outcome.INDETERMINATE), present=False)


def test_the_figures_count_each_verdict_and_the_lost_window():
    entries = [
        entry(1, Outcome.OK, end_us=INJECT_US - 30_000),  # lost, 30 ms before the fault
        entry(2, Outcome.OK, end_us=INJECT_US - 10_000),  # lost
        entry(3, Outcome.OK),  # ok
        entry(4, Outcome.FAILED),  # phantom
        entry(5, Outcome.INDETERMINATE, xid=5),  # committed
        entry(6, Outcome.INDETERMINATE, xid=6),  # aborted, trap
        entry(7, Outcome.INDETERMINATE, xid=7),  # unknown
    ]
    present = {(0, 3), (0, 4), (0, 5)}
    statuses = {5: "committed", 6: "committed", 7: "in progress"}
    result = figures(resolve(entries, present, statuses), inject_us=INJECT_US)
    assert result.to_json() == {
        "acked_writes": 3,
        "lost_acked_writes": 2,
        "phantom_writes": 1,
        "indeterminate_commits": 3,
        "indeterminate_committed": 1,
        "indeterminate_aborted": 1,
        "unknown_outcomes": 1,
        "txid_status_traps": 1,
        "lost_window_ms": 30.0,
    }


def test_commits_lost_after_the_faults_timestamp_widen_the_window():
    late = [
        entry(1, Outcome.OK, end_us=INJECT_US + 2_000),
        entry(2, Outcome.OK, end_us=INJECT_US + 5_000),
    ]
    assert figures(resolve(late, set(), {}), inject_us=INJECT_US).lost_window_ms == 3.0
    assert figures(resolve(late, {(0, 1), (0, 2)}, {}), inject_us=INJECT_US).lost_window_ms == 0


def test_every_durability_figure_is_in_the_catalog():
    names = set(figures([], inject_us=None).to_json())
    assert names <= CATALOG.names()
    assert CATALOG.get("lost_acked_writes").group == "durability"
