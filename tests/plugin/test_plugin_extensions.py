"""What plugs in through the hooks: an HA manager of one's own runs a failover trial,
and a metric of one's own is bounded by a marker and --pgha-slo and summarised."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_helpers import TRIAL, assert_usage_error, entries_by_nodeid, output, run, summary

TOY_HA = '''
import threading

from pytest_pgha import timeline as phase


class ToyHA:
    """Promotes the first standby 200 ms after the fault and repoints the other; the
    direct proxy needs no rewire (its clients find the primary themselves)."""

    kind = "toy"

    def __init__(self, cluster, proxy, timeline, options):
        self.cluster, self.timeline = cluster, timeline
        self.thread = None
        self.new = None

    def prepare(self):
        pass

    def start_failover(self, inject, *, planned=False):
        def fail_over():
            threading.Event().wait(0.2)
            self.timeline.record(phase.DETECT, planned=planned)
            self.new = self.cluster.replicas[0]
            self.timeline.record(phase.PROMOTE_START, node=self.new.name)
            self.cluster.promote(self.new)
            self.timeline.record(phase.PROMOTE_DONE, node=self.new.name)
            # The other standby follows, as any HA manager has it do: a trial repeated
            # on a busy runner heals the stack and waits for every standby to stream.
            for node in self.cluster.replicas:
                if node is not self.new and node.running():
                    node.follow(self.new)

        self.thread = threading.Thread(target=fail_over)
        self.thread.start()

    def wait(self, timeout):
        self.thread.join(timeout)
        return self.new

    def close(self):
        if self.thread is not None:
            self.thread.join()


def pytest_pgha_add_ha_managers(registry):
    registry.register("toy", ToyHA)
'''

TOY_METRIC = """
from pytest_pgha import Metric


def pytest_pgha_add_metrics(catalog):
    catalog.register(
        Metric("commits_per_worker", "count", "commits after the fault per worker", "exact", "toy")
    )


def pytest_pgha_trial_metrics(result):
    if result.scenario == "failover":
        return {"commits_per_worker": result.metrics.ok_post_inject // result.metrics.workers}
"""


def test_an_ha_manager_added_through_the_hook_runs_a_failover(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makeconftest(TOY_HA)
    pytester.makepyfile(
        test_toy=f"""
        def test_toy_failover(pgha_scenario, pgha_cluster):
            result = pgha_scenario.failover(ha="toy", {TRIAL})
            assert result.parameters["ha"] == "toy"
            assert result.new_primary == "node1"
            assert pgha_cluster.topology().primary == "node1"
            assert result.metrics.writes_resume_ms is not None
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=direct")
    assert result.ret == pytest.ExitCode.OK, output(result)
    entry = entries_by_nodeid(summary(pytester))["test_toy.py::test_toy_failover[direct]"]
    assert entry["parameters"]["ha"] == "toy"
    assert entry["metrics"]["workers_lost"] == 0


def test_an_unknown_ha_manager_is_named_with_the_known_ones(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_typo=f"""
        def test_typo(pgha_scenario):
            pgha_scenario.failover(ha="scriptd", {TRIAL})
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=direct")
    text = output(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    assert "unknown HA manager 'scriptd'; did you mean scripted?" in text


def test_a_metric_added_through_the_hooks_is_bounded_and_summarised(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makeconftest(TOY_METRIC)
    pytester.makepyfile(
        test_metric=f"""
        import pytest

        @pytest.mark.slo(commits_per_worker=">= 1")
        def test_marker(pgha_scenario):
            result = pgha_scenario.failover({TRIAL})
            assert result.metrics.commits_per_worker >= 1

        def test_cli(pgha_scenario):
            pgha_scenario.failover({TRIAL})
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=direct", "--pgha-slo=commits_per_worker>=1")
    text = output(result)
    assert result.ret == pytest.ExitCode.OK, text
    entries = entries_by_nodeid(summary(pytester))
    for name, source in (("test_marker", "cli"), ("test_cli", "cli")):
        entry = entries[f"test_metric.py::{name}[direct]"]
        (verdict,) = [r for r in entry["slo_results"] if r["metric"] == "commits_per_worker"]
        assert verdict["passed"] and verdict["source"] == source and verdict["unit"] == "count"
        assert entry["metrics"]["commits_per_worker"] >= 1
    assert "PASS test_metric.py::test_cli[direct] commits_per_worker" in text


def test_a_misspelt_plugin_metric_is_a_usage_error_with_a_suggestion(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makeconftest(TOY_METRIC)
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    result = run(pytester, run_basedir, "--pgha-slo=commits_per_workr>=1")
    assert_usage_error(result, "unknown metric 'commits_per_workr'", "did you mean")
