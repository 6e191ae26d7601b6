"""A cluster shared by the tests of a module takes one failover after another: what an
earlier trial left down rejoins before the next starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_helpers import TRIAL, output, run


def test_two_failovers_on_a_module_scoped_cluster(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_twice=f"""
        from pytest_pgha import pgha_cluster_factory

        pgha_cluster = pgha_cluster_factory(replicas=2, scope="module")

        def test_first(pgha_scenario, pgha_cluster):
            result = pgha_scenario.failover({TRIAL})
            assert pgha_cluster.topology().primary == result.new_primary

        def test_second(pgha_scenario, pgha_cluster):
            first_primary = pgha_cluster.primary.name
            result = pgha_scenario.failover({TRIAL})
            assert result.new_primary != first_primary
            assert result.metrics.workers_lost == 0
            assert any(e.name == "healed" for e in result.events)
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=direct", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.OK, output(result)
    result.assert_outcomes(passed=2)
