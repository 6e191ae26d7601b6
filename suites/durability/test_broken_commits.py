"""Broken commits, hundreds of them, each resolved: for every generator the resolver's
verdict must match the data in every case. pg_xact_status is the independent witness:
it must agree with the ledger row for every broken commit, unless its xid now belongs
to another transaction, which another ledger row proves. (That happens without any
failover too: after a crash, an xid whose WAL never reached the disk is handed out
again.) And the standby must hold exactly what the primary holds."""

import pytest

direct = pytest.mark.parametrize("pgha_proxy_kind", ["direct"], indirect=True)
sync_pair = pytest.mark.parametrize("pgha_cluster", ["sync_pair"], indirect=True)
async_pair = pytest.mark.parametrize("pgha_cluster", ["async_pair"], indirect=True)
AT_LEAST = 200
WORKERS = 16


def assert_verdicts_match_the_data(result):
    broken = [r for r in result.resolved if r.entry.outcome.value == "indeterminate"]
    present_xids = {r.entry.xid: r for r in result.resolved if r.present}
    for item in broken:
        expected = "committed" if item.present else "aborted"
        assert item.verdict.value == expected
        if item.xact_status != expected:
            reuser = present_xids.get(item.entry.xid)
            assert reuser is not None and reuser.entry.timeline == item.entry.timeline, (
                f"pg_xact_status says {item.xact_status} and no other transaction holds "
                f"its xid: {item.to_json()}"
            )
            assert reuser.entry.record.start_us > item.entry.record.end_us
            assert item.trap
    assert result.metrics.unknown_outcomes == 0
    assert result.metrics.lost_acked_writes == 0 and result.metrics.phantom_writes == 0
    primary_rows = sum(1 for r in result.resolved if r.present)
    for view in result.standby_views:
        assert view.caught_up and view.present == primary_rows and view.acked_missing == 0
    return broken


@direct
@sync_pair
def test_backends_terminated_while_their_commit_waits_for_the_standby(pgha_scenario):
    """Committed locally before the wait: every one of them is committed."""
    result = pgha_scenario.durability(
        fault="terminate_sync_waits", rounds=24, workers=WORKERS, rate=2000.0
    )
    broken = assert_verdicts_match_the_data(result)
    assert len(broken) >= AT_LEAST
    assert all(r.verdict.value == "committed" for r in broken)


@direct
@sync_pair
def test_queries_cancelled_while_their_commit_waits_are_acknowledged(pgha_scenario):
    """A cancelled wait is not a broken commit: COMMIT returns success (with a
    WARNING), and the row is there."""
    result = pgha_scenario.durability(
        fault="cancel_sync_waits", rounds=24, workers=WORKERS, rate=2000.0
    )
    cancelled = sum(e.detail["sessions"] for e in result.events if e.name == "inject")
    assert cancelled >= AT_LEAST
    assert_verdicts_match_the_data(result)
    assert result.metrics.indeterminate_commits == 0


@direct
@sync_pair
def test_clients_that_give_up_while_the_standby_is_unreachable(pgha_scenario):
    """The synchronous standby unreachable for 0.5 s, clients with a 0.2 s timeout:
    they close their connection in the middle of COMMIT; each of those commits
    happened (locally first, on the standby once it is back)."""
    result = pgha_scenario.durability(
        fault="hold_sync_standbys",
        rounds=24,
        hold_s=0.5,
        statement_timeout_s=0.2,
        workers=WORKERS,
        rate=2000.0,
    )
    broken = assert_verdicts_match_the_data(result)
    assert len(broken) >= AT_LEAST
    assert all(r.verdict.value == "committed" for r in broken)


@direct
@async_pair
def test_the_primary_killed_mid_commit_then_recovered_in_place(pgha_scenario):
    """Crash recovery decides each one: committed if its commit record reached the
    disk, aborted otherwise."""
    result = pgha_scenario.durability(
        fault="crash_restart", rounds=32, hold_s=0.3, workers=WORKERS, rate=None
    )
    broken = assert_verdicts_match_the_data(result)
    assert len(broken) >= AT_LEAST


@direct
@sync_pair
@pytest.mark.parametrize("fault", ["reset_client_connections", "blackhole_client_connections"])
def test_client_connections_reset_or_blackholed_inside_the_commit_window(
    pgha_scenario, lagging_links, pgha_client_link, fault
):
    """The synchronous standby 20 ms away keeps each COMMIT open for a round trip, so
    a TCP reset (or a blackhole) of every client connection lands inside it."""
    # A blackhole lasts hold_s, longer than the clients' statement timeout.
    result = pgha_scenario.durability(
        fault=fault, rounds=40, hold_s=0.5, statement_timeout_s=0.3, workers=WORKERS
    )
    broken = assert_verdicts_match_the_data(result)
    assert len(broken) >= AT_LEAST
