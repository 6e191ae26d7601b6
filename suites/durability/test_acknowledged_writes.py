"""Is every acknowledged commit still there after the fault? The gate's verdict on
safe configurations (no loss, over repeated kills) and on unsafe ones (the loss is
found, every time)."""

import pytest
from durability_checks import (
    assert_every_standby_has_every_acknowledged_commit,
    assert_loss_found,
)

NO_VIOLATION = {"lost_acked_writes": "== 0", "phantom_writes": "== 0", "unknown_outcomes": "== 0"}
sync_trio = pytest.mark.parametrize("pgha_cluster", ["sync_trio"], indirect=True)
sync_pair = pytest.mark.parametrize("pgha_cluster", ["sync_pair"], indirect=True)
async_pair = pytest.mark.parametrize("pgha_cluster", ["async_pair"], indirect=True)
direct_only = pytest.mark.parametrize("pgha_proxy_kind", ["direct"], indirect=True)
KILLS = 3


@pytest.mark.slo(**NO_VIOLATION)
@sync_trio
def test_synchronous_failover_keeps_every_acknowledged_commit(pgha_scenario, lagging_links, load):
    """FIRST 1 of 2 standbys, failover to the most advanced one, repeated: the scripted
    HA carries synchronous replication to each new primary."""
    for _ in range(KILLS):
        result = pgha_scenario.durability(fault="kill_primary", **load)
        assert_every_standby_has_every_acknowledged_commit(result)


@pytest.mark.slo(**NO_VIOLATION)
@direct_only
@async_pair
def test_crash_recovery_in_place_keeps_every_acknowledged_commit(
    pgha_scenario, lagging_links, load
):
    """Even asynchronous replication loses nothing when the primary recovers in place:
    an acknowledged commit was flushed to its own WAL."""
    result = pgha_scenario.durability(fault="crash_restart", rounds=3, **load)
    assert_every_standby_has_every_acknowledged_commit(result)


@direct_only
@async_pair
def test_asynchronous_failover_loses_acknowledged_commits(pgha_scenario, lagging_links, load):
    """And pg_xact_status would not have noticed: on the new timeline the lost xids
    belong to other transactions (txid_status_traps)."""
    result = pgha_scenario.durability(fault="kill_primary", **load)
    assert_loss_found(result)
    # Each lost xid is either still "in the future" on the new primary or handed to a
    # later transaction there, which mostly commit: pg_xact_status then says
    # "committed" for a write that is gone.
    traps = [r for r in result.resolved if r.trap]
    assert traps and result.metrics.txid_status_traps == len(traps)
    assert any(r.verdict.value == "lost" and r.xact_status == "committed" for r in traps)


@direct_only
@sync_pair
def test_synchronous_commit_local_in_the_application_loses_acknowledged_commits(
    pgha_scenario, lagging_links, load
):
    result = pgha_scenario.durability(
        fault="kill_primary", session_settings={"synchronous_commit": "local"}, **load
    )
    assert_loss_found(result)


@direct_only
@sync_pair
def test_a_cancelled_synchronous_wait_is_acknowledged_and_then_lost(
    pgha_scenario, lagging_links, load
):
    """COMMIT returned success (with the server's WARNING) though no standby had it;
    the standby is promoted without those commits."""
    result = pgha_scenario.durability(fault="cancel_sync_waits_then_fail_over", **load)
    assert_loss_found(result)
    cancelled = next(e for e in result.events if e.name == "waits_cancelled")
    lost_xids = {str(r.entry.xid) for r in result.violations if r.verdict.value == "lost"}
    assert lost_xids <= set(cancelled.detail["xids"]), "only the cancelled commits are lost"


# The standby's link narrower than the WAL the load writes (about 250 KB/s at 1000
# ledger commits/s): it falls further behind every second, so the switch can never
# catch up by luck before the kill, however long the reload takes on a busy runner
# (a 100 ms latency did not suffice once under CI's load).
NARROW_KBPS = 50


def narrow(links):
    for link in links.values():
        link.add_toxic("bandwidth", stream="downstream", rate=NARROW_KBPS)


@direct_only
@async_pair
def test_making_a_standby_synchronous_naively_then_failing_over_loses_commits(
    pgha_scenario, pgha_replication_links, load
):
    narrow(pgha_replication_links)
    result = pgha_scenario.durability(fault="make_synchronous_naive_then_kill", **load)
    assert_loss_found(result)


@pytest.mark.slo(**NO_VIOLATION)
@direct_only
@async_pair
def test_making_a_standby_synchronous_safely_then_failing_over_loses_nothing(
    pgha_scenario, pgha_replication_links, load
):
    narrow(pgha_replication_links)
    result = pgha_scenario.durability(fault="make_synchronous_safe_then_kill", **load)
    assert_every_standby_has_every_acknowledged_commit(result)
