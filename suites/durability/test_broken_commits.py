"""Broken commits, hundreds of them, each resolved: for every generator the resolver's
verdict must match the data in every case. pg_xact_status is the independent witness:
it must agree with the ledger row for every broken commit, unless its xid now belongs
to another transaction, which another ledger row proves. (That happens without any
failover too: after a crash, an xid whose WAL never reached the disk is handed out
again.) And the standby must hold exactly what the primary holds."""

import pytest
from durability_checks import assert_verdicts_match_the_data

direct = pytest.mark.parametrize("pgha_proxy_kind", ["direct"], indirect=True)
sync_pair = pytest.mark.parametrize("pgha_cluster", ["sync_pair"], indirect=True)
async_pair = pytest.mark.parametrize("pgha_cluster", ["async_pair"], indirect=True)
AT_LEAST = 200
WORKERS = 16
# Trials repeat until enough commits broke: a slower runner breaks fewer per round.
TRIALS_AT_MOST = 10


def break_at_least(pgha_scenario, **options):
    """Durability trials with these options until AT_LEAST commits broke, each trial's
    verdicts checked against the data; returns every broken commit."""
    broken = []
    for _ in range(TRIALS_AT_MOST):
        result = pgha_scenario.durability(**options)
        broken += assert_verdicts_match_the_data(result)
        if len(broken) >= AT_LEAST:
            break
    assert len(broken) >= AT_LEAST
    return broken


@direct
@sync_pair
def test_backends_terminated_while_their_commit_waits_for_the_standby(pgha_scenario):
    """Committed locally before the wait: every one of them is committed."""
    broken = break_at_least(
        pgha_scenario, fault="terminate_sync_waits", rounds=24, workers=WORKERS, rate=2000.0
    )
    assert all(r.verdict.value == "committed" for r in broken)


@direct
@sync_pair
def test_queries_cancelled_while_their_commit_waits_are_acknowledged(pgha_scenario):
    """A cancelled wait is not a broken commit: COMMIT returns success (with a
    WARNING), and the row is there."""
    cancelled = 0
    for _ in range(TRIALS_AT_MOST):
        result = pgha_scenario.durability(
            fault="cancel_sync_waits", rounds=24, workers=WORKERS, rate=2000.0
        )
        cancelled += sum(e.detail["sessions"] for e in result.events if e.name == "inject")
        assert_verdicts_match_the_data(result)
        assert result.metrics.indeterminate_commits == 0
        if cancelled >= AT_LEAST:
            break
    assert cancelled >= AT_LEAST


@direct
@sync_pair
def test_clients_that_give_up_while_the_standby_is_unreachable(pgha_scenario):
    """The synchronous standby unreachable for 0.5 s, clients with a 0.2 s timeout:
    they close their connection in the middle of COMMIT; each of those commits
    happened (locally first, on the standby once it is back)."""
    broken = break_at_least(
        pgha_scenario,
        fault="hold_sync_standbys",
        rounds=24,
        hold_s=0.5,
        statement_timeout_s=0.2,
        workers=WORKERS,
        rate=2000.0,
    )
    assert all(r.verdict.value == "committed" for r in broken)


@direct
@async_pair
def test_the_primary_killed_mid_commit_then_recovered_in_place(pgha_scenario):
    """Crash recovery decides each one: committed if its commit record reached the
    disk, aborted otherwise."""
    break_at_least(
        pgha_scenario, fault="crash_restart", rounds=16, hold_s=0.3, workers=WORKERS, rate=None
    )


@direct
@sync_pair
@pytest.mark.parametrize("fault", ["reset_client_connections", "blackhole_client_connections"])
def test_client_connections_reset_or_blackholed_inside_the_commit_window(
    pgha_scenario, lagging_links, pgha_client_link, fault
):
    """The synchronous standby 20 ms away keeps each COMMIT open for a round trip, so
    a TCP reset (or a blackhole) of every client connection lands inside it."""
    # A blackhole lasts hold_s, longer than the clients' statement timeout.
    break_at_least(
        pgha_scenario,
        fault=fault,
        rounds=20,
        hold_s=0.5,
        statement_timeout_s=0.3,
        workers=WORKERS,
    )


# Each failover breaks the commits in flight at the kill; trials repeat until enough.
FAILOVER_TRIALS_AT_MOST = 40


@direct
@sync_pair
def test_the_primary_killed_mid_commit_then_failed_over(pgha_scenario, lagging_links):
    """The synchronous standby promoted: a broken commit it has is committed, one it
    never received is aborted; pg_xact_status on the new timeline is only a witness
    where no xid was reused."""
    broken = 0
    for _ in range(FAILOVER_TRIALS_AT_MOST):
        result = pgha_scenario.durability(
            fault="kill_primary", workers=WORKERS, rate=None, warmup_s=0.5, settle_s=0.5
        )
        broken += len(assert_verdicts_match_the_data(result))
        if broken >= AT_LEAST:
            break
    assert broken >= AT_LEAST
