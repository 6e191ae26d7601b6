def test_smoke(pgha_cluster):
    topo = pgha_cluster.topology()
    assert topo.primary == "node0"
    assert topo.streaming() == ["node1", "node2"]
