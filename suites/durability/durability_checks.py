"""Assertions the durability suite's tests share."""

from __future__ import annotations


def assert_loss_found(result) -> None:
    """The loss is reported, and it is real: no node has the lost rows."""
    metrics = result.metrics
    assert metrics.lost_acked_writes > 0, "the harness missed a loss this configuration allows"
    assert metrics.lost_window_ms > 0
    for view in result.standby_views:
        assert view.caught_up and view.acked_missing == metrics.lost_acked_writes
    lost = [r for r in result.violations if r.verdict.value == "lost"]
    assert len(lost) == metrics.lost_acked_writes
    assert all(r.entry.timeline == 1 for r in lost)  # acknowledged by the old primary


def assert_every_standby_has_every_acknowledged_commit(result) -> None:
    """Beyond the primary (the SLO markers judge it): once caught up, no standby lacks
    an acknowledged commit either."""
    assert result.metrics.acked_writes > 0
    for view in result.standby_views:
        assert view.caught_up and view.acked_missing == 0, view


def assert_verdicts_match_the_data(result) -> list:
    """Every broken commit's verdict is its row's presence, and pg_xact_status agrees
    unless its xid was never handed out on this history ('future') or now belongs to a
    later transaction, which another ledger row proves. Returns the broken commits."""
    broken = [r for r in result.resolved if r.entry.outcome.value == "indeterminate"]
    present_xids = {r.entry.xid: r for r in result.resolved if r.present}
    for item in broken:
        expected = "committed" if item.present else "aborted"
        assert item.verdict.value == expected
        if item.xact_status == expected:
            continue
        assert item.trap, item.to_json()
        if item.xact_status == "future":
            continue
        reuser = present_xids.get(item.entry.xid)
        assert reuser is not None, (
            f"pg_xact_status says {item.xact_status} and no other transaction holds its "
            f"xid: {item.to_json()}"
        )
        assert reuser.entry.record.start_us > item.entry.record.end_us
    assert result.metrics.unknown_outcomes == 0
    assert result.metrics.lost_acked_writes == 0 and result.metrics.phantom_writes == 0
    primary_rows = sum(1 for r in result.resolved if r.present)
    for view in result.standby_views:
        assert view.caught_up and view.present == primary_rows and view.acked_missing == 0
    return broken
