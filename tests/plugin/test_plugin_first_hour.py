"""What a new user hit in the first hour, each fixed: the documented monitor marker
takes effect, plan options are checked before anything starts, combinations that do
not apply skip with the reason, pgha_slo.check reads a result and refuses what carries
no figures, the factory and kinds answer typos."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from plugin_helpers import TRIAL, output, run

from pytest_pgha import pgha_cluster_factory
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics.values import MetricValues
from pytest_pgha.plugin.slo_fixtures import figures_of
from pytest_pgha.scenarios.failover import TrialPlan


def test_the_monitor_marker_makes_the_trial_use_the_proxys_monitor(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_monitor=f"""
        import pytest

        @pytest.mark.pgha_proxy(monitor=True)
        def test_monitor(pgha_scenario):
            result = pgha_scenario.failover({TRIAL})
            assert result.parameters["rewire"] == "monitor"
            rewires = [e for e in result.events if e.name == "rewire_start"]
            assert [e.detail["path"] for e in rewires] == ["monitor"]
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=haproxy")
    assert result.ret == pytest.ExitCode.OK, output(result)


def test_what_does_not_apply_to_the_proxy_is_skipped_with_the_reason(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_skips="""
        import pytest

        @pytest.mark.pgha_cluster(replicas=1)
        def test_replica_loss(pgha_scenario):
            pgha_scenario.replica_loss()

        @pytest.mark.pgha_cluster(replicas=1)
        @pytest.mark.pgha_proxy(monitor=True)
        def test_monitor(pgha_scenario):
            pass

        @pytest.mark.pgha_cluster(replicas=1)
        def test_restart(pgha_scenario):
            pgha_scenario.restart_window()
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=pgbouncer,direct", "-rs")
    text = output(result)
    result.assert_outcomes(skipped=3, passed=3)
    assert "pgbouncer has no read path in this configuration" in text, text
    assert "pgbouncer has no primary detection of its own: monitor=True does not apply" in text
    assert "direct has no proxy process to crash" in text


def test_plan_options_are_checked_before_anything_starts() -> None:
    with pytest.raises(PghaConfigError, match="invalid rewire='bogus'"):
        TrialPlan(rewire="bogus")  # type: ignore[arg-type]
    with pytest.raises(PghaConfigError, match="workers"):
        TrialPlan(workers=0)
    with pytest.raises(PghaConfigError, match="unknown HA manager 'patroni'"):
        TrialPlan(ha="patroni")


def test_slo_check_reads_a_result_and_refuses_what_has_no_figures() -> None:
    result = SimpleNamespace(metrics=MetricValues({"writes_resume_ms": 300}))
    assert figures_of(result)["writes_resume_ms"] == 300
    assert figures_of({"workers_lost": 0}) == {"workers_lost": 0}
    with pytest.raises(PghaConfigError, match=r"takes a scenario's result, its \.metrics"):
        figures_of(SimpleNamespace(writes=1))


def test_a_factory_typo_gets_a_suggestion() -> None:
    with pytest.raises(
        PghaConfigError, match=r"unknown option 'replica' \(did you mean 'replicas'"
    ):
        pgha_cluster_factory(replica=2)
    with pytest.raises(PghaConfigError, match="scope"):
        pgha_cluster_factory(scope="forever")


def test_metric_values_read_as_attributes_and_name_what_is_missing() -> None:
    values = MetricValues({"writes_resume_ms": 300, "workers_lost": 0})
    assert values.writes_resume_ms == 300 and values["workers_lost"] == 0
    with pytest.raises(AttributeError, match="did you mean writes_resume_ms"):
        _ = values.writes_resum_ms
    assert repr(values) == "MetricValues(writes_resume_ms=300, ... 1 more)"
