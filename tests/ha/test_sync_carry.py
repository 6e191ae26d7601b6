"""What the scripted HA manager carries to the node it promotes."""

from pytest_pgha.cluster.spec import SyncMode
from pytest_pgha.ha.scripted import carried_sync_mode, quote_literal


def test_the_promoted_node_gets_the_same_method_over_the_standbys_it_can_have():
    wanted = SyncMode("ANY", 2, ("node1", "node2", "node3"))
    assert carried_sync_mode(wanted, ["node2", "node3"]).to_guc() == "ANY 2 (node2, node3)"
    assert carried_sync_mode(wanted, ["node3"]).to_guc() == "ANY 1 (node3)"


def test_with_no_standby_left_it_replicates_asynchronously_until_one_rejoins():
    assert not carried_sync_mode(SyncMode("FIRST", 1, ("node1",)), []).enabled


def test_an_asynchronous_cluster_stays_asynchronous():
    assert not carried_sync_mode(SyncMode("off"), ["node2"]).enabled


def test_a_quote_in_a_literal_is_doubled():
    assert quote_literal("it's") == "'it''s'"
