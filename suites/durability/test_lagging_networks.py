"""Loss on asynchronous replication does not need latency: a replication link short of
bandwidth makes the standby trail just as surely (toxiproxy's bandwidth toxic)."""

import pytest
from durability_checks import assert_loss_found

# KB/s on the primary-to-standby direction: well under what the load writes.
NARROW_KBPS = 200


@pytest.mark.parametrize("pgha_proxy_kind", ["direct"], indirect=True)
@pytest.mark.parametrize("pgha_cluster", ["async_pair"], indirect=True)
def test_a_narrow_replication_link_loses_acknowledged_commits_at_failover(
    pgha_scenario, pgha_replication_links, load
):
    for link in pgha_replication_links.values():
        link.add_toxic("bandwidth", stream="downstream", rate=NARROW_KBPS)
    result = pgha_scenario.durability(fault="kill_primary", **load)
    assert_loss_found(result)
