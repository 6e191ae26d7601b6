"""The failover suite's shared settings and default budgets.

These are the defaults the suite gates on; a CI job tightens or loosens them with
--pgha-slo (which overrides every marker) or by editing this file.
"""

import pytest

from pytest_pgha.cluster.fixtures import pgha_cluster_factory

# The suite's clusters: 1 primary + 2 replicas whose standbys retry a lost primary every
# 100 ms. With PostgreSQL's default (5 s) a promotion that comes soon after the
# primary died sometimes waits that whole interval first: a real property of the
# stack, shown on purpose by test_unplanned_primary_loss[*-detect-0s-default-retry],
# but one that would hide every other effect in the remaining trials.
pgha_cluster = pgha_cluster_factory(settings={"wal_retrieve_retry_interval": "100ms"})

# Transactions per second of each test's workload. Unthrottled, one test saturates
# both cores of a small CI machine, and four of them under `-n 4` would measure the
# scheduler rather than the stack. 1000/s is still 100 transactions per 100 ms bucket.
RATE = 1000.0
WARMUP_S = 1.5
SETTLE_S = 1.5

# How long promote + rewire + reconnect may take beyond the detection, on a 2-core CI
# runner with four trials at once. The failover lab measured ~200 ms on an idle
# machine; here PgBouncer, HAProxy, PgCat and direct took 100-600 ms. Pgpool-II's
# failover (detaching the old primary) searches the new primary once a second and
# restarts every Pgpool child and its PCP listener: its rewire alone took 0.2-1.9 s
# here, and a client that connects while the children restart can wait its whole
# connect_timeout (3 s, the lab's) before it gets a child. Under four concurrent trials
# its whole recovery took up to 6 s here.
RECOVERY_BUDGET_MS = {"pgpool": 7000}
DEFAULT_RECOVERY_BUDGET_MS = 1200
# Pgpool-II forks its 32 children before it serves again: 0.5-1.8 s here.
RESTART_BUDGET_MS = {"pgpool": 3000}
DEFAULT_RESTART_BUDGET_MS = 1500


@pytest.fixture
def trial() -> dict[str, float]:
    """Keyword arguments shared by the suite's failover trials (a trial waits for
    every worker to commit again before it settles, so the tail is never cut off)."""
    return {"rate": RATE, "warmup_s": WARMUP_S, "settle_s": SETTLE_S}


@pytest.fixture
def recovery_budget_ms(pgha_proxy_kind: str) -> int:
    return RECOVERY_BUDGET_MS.get(pgha_proxy_kind, DEFAULT_RECOVERY_BUDGET_MS)


@pytest.fixture
def restart_budget_ms(pgha_proxy_kind: str) -> int:
    return RESTART_BUDGET_MS.get(pgha_proxy_kind, DEFAULT_RESTART_BUDGET_MS)
