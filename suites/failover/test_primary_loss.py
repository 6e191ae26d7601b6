"""Unplanned loss of the primary under load, for every proxy kind: the failover lab's
experiment (SIGKILL of the postmaster, scripted detect / promote / rewire) as a test.

Default SLOs: writes resume within the proxy's recovery budget after the HA manager
declared the primary dead (recovery_ms; the budgets and the data behind them are in
suites/failover/conftest.py); no worker is lost; at most one in-flight error per
worker (retries of a fail-fast proxy during the outage are counted apart, as
retry_errors).
"""

import pytest

# Promoting soon after the kill sometimes waits out the standby's
# wal_retrieve_retry_interval: PostgreSQL's default 5 s here (the suite's clusters use
# 100 ms, see conftest.py). Seen in about one trial in eight.
DEFAULT_RETRY_INTERVAL_MS = 5000

# (how the HA manager detects, what the stack may take on top of its recovery budget)
DETECTION = [
    pytest.param(({"detect_delay_s": 1.0}, 0), id="detect-1s"),
    pytest.param(({"detect_delay_s": 0.0}, 0), id="detect-0s"),
    pytest.param(
        ({"detect_delay_s": 0.0}, DEFAULT_RETRY_INTERVAL_MS),
        id="detect-0s-default-retry",
        marks=pytest.mark.pgha_cluster(settings={"wal_retrieve_retry_interval": "5s"}),
    ),
    # A probe every 200 ms notices the dead postmaster at the next probe.
    pytest.param(({"probe_interval_s": 0.2}, 0), id="probe-200ms"),
]


@pytest.mark.slo(in_flight_errors="<= workers", workers_lost="== 0")
@pytest.mark.parametrize("detection", DETECTION)
def test_unplanned_primary_loss(
    pgha_scenario, pgha_cluster, pgha_slo, trial, detection, recovery_budget_ms
):
    how, extra_ms = detection
    result = pgha_scenario.failover(fault="kill_primary", **how, **trial)
    pgha_slo.check(result.metrics, recovery_ms=f"<= {extra_ms + recovery_budget_ms}")

    topology = pgha_cluster.topology()
    assert topology.primary == result.new_primary
    # One promotion, one new timeline (a trial repeated on a runner too busy to
    # measure starts from the healed stack of the first).
    assert topology.timeline == result.old_timeline + 1
    # The remaining standby follows the new primary on its timeline.
    assert len(topology.streaming()) == 1, "\n".join(
        f"{n.name} (running: {n.running()}) does not stream; its log:\n{n.logs(lines=60)}"
        for n in pgha_cluster.replicas
    )
    metrics = result.metrics
    assert metrics.total_ok_pre_inject > 0 and metrics.ok_post_inject > 0
    # The server's view of the stall is reported beside the client's (server_resume_ms,
    # server_write_gap_ms) but not compared with it: pgbench_accounts keeps only each
    # row's last commit, so a later update can hide the first commits on the new
    # primary and the server's figure is only an upper bound (seen 6 ms past the
    # client's resume bucket once in 400 trials). The exact cross-check needs a table
    # that keeps every commit: the ledger workload's.
    assert metrics.server_resume_ms is not None


@pytest.mark.slo(workers_lost="== 0")
def test_planned_switchover(pgha_scenario, pgha_cluster, pgha_slo, trial, recovery_budget_ms):
    result = pgha_scenario.failover(fault="stop_primary", **trial)
    # The node the measured attempt stopped (a trial repeated on a busy runner starts
    # from the healed stack of the first, whose primary is another node).
    old_primary = pgha_cluster.node(result.faulted_node)
    # The HA manager starts once the fast shutdown finished (the walsenders shipped the
    # last WAL first, ~300 ms): recovery counts from there.
    pgha_slo.check(result.metrics, recovery_ms=f"<= {recovery_budget_ms}")

    # The old primary comes back as a standby of the new one (pg_rewind if needed).
    new_primary = pgha_cluster.node(result.new_primary)
    old_primary.rejoin(new_primary)
    pgha_cluster.wait_streaming([old_primary])
    assert pgha_cluster.topology().primary == new_primary.name


@pytest.mark.slo(workers_lost="== 0")
def test_frozen_primary(pgha_scenario, pgha_cluster, pgha_slo, trial, recovery_budget_ms):
    """SIGSTOP of every process of the primary: a hung host. Its kernel still accepts
    and ACKs, so only timeouts notice: the HA manager's probe (an SSLRequest that gets
    no answer within the 200 ms interval) and the application's 1 s statement timeout.
    The HA manager fences (SIGKILLs) the frozen node before it promotes, so it cannot
    wake up as a second primary, and the fencing frees the workers stuck on it."""
    result = pgha_scenario.failover(
        fault="freeze_primary", probe_interval_s=0.2, statement_timeout_s=1.0, **trial
    )
    frozen = pgha_cluster.node(result.faulted_node)
    pgha_slo.check(result.metrics, recovery_ms=f"<= {recovery_budget_ms}")
    assert result.new_primary != frozen.name
    assert not frozen.running() or frozen.pid is None
    assert pgha_cluster.topology().in_recovery[result.new_primary] is False
