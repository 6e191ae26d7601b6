"""Our failover promises, gated in CI."""

import pytest

TRIAL = {"detect_delay_s": 0.5, "rate": 500, "warmup_s": 1.0, "settle_s": 1.0}


@pytest.mark.slo(in_flight_errors="<= workers")
@pytest.mark.pgha_proxy(options={"pgbouncer": {"server_connect_timeout": "2"}})
def test_primary_loss_with_our_pgbouncer_settings(pgha_scenario, pgha_proxy):
    result = pgha_scenario.failover(fault="kill_primary", **TRIAL)
    if pgha_proxy.kind == "pgbouncer":
        assert pgha_proxy.settings.options["server_connect_timeout"] == "2"
        assert pgha_proxy.settings.options["pool_mode"] == "transaction"  # proxies/
    assert result.parameters["rewire"] == "explicit"


def test_recovery_budget_checked_from_code(pgha_scenario, pgha_cluster, pgha_slo):
    result = pgha_scenario.failover(fault="kill_primary", **TRIAL)
    pgha_slo.check(result, recovery_ms="<= 5000")
    assert pgha_cluster.topology().primary == result.new_primary != result.faulted_node
