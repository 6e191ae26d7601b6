"""Every scenario's result has the same shape: metrics by catalog name, parameters as
data, a repr of one short line however many transactions it holds."""

from __future__ import annotations

from pytest_pgha.lag import LagSummary
from pytest_pgha.metrics import CATALOG, compute_failover_metrics
from pytest_pgha.metrics.restart import ProbeReport
from pytest_pgha.metrics.values import MetricValues
from pytest_pgha.scenarios.failover import TrialPlan, TrialResult
from pytest_pgha.scenarios.replica_loss import ReplicaLossPlan, ReplicaLossResult
from pytest_pgha.scenarios.restart import RestartPlan, RestartResult
from pytest_pgha.timeline import Event

INJECT = Event("inject", 1_000_000, 0)
FIGURES = compute_failover_metrics([], [INJECT], inject_us=INJECT.epoch_us, workers=8)
LAG = LagSummary(5.0, 4.0, 100, {"heartbeat": 5.0})


def results() -> list[TrialResult | RestartResult | ReplicaLossResult]:
    many = [object()] * 200_000  # a long trial's transactions
    trial = TrialResult(
        TrialPlan(rewire="explicit"),
        "pgbouncer",
        many,
        [],
        [INJECT],
        INJECT,
        FIGURES,  # type: ignore[arg-type]
        "node1",
        LAG,
        LAG,
    )
    restart = RestartResult(
        RestartPlan(), "haproxy", [], [INJECT], INJECT, ProbeReport(10, 2, 4.0, 1.0), 3.5
    )
    replica = ReplicaLossResult(
        ReplicaLossPlan(), "pgpool", FIGURES, FIGURES, [], [], [INJECT], INJECT
    )
    return [trial, restart, replica]


def test_every_result_has_the_same_shape() -> None:
    for result in results():
        assert isinstance(result.metrics, MetricValues)
        assert set(result.metrics) <= CATALOG.names(), result.scenario
        assert isinstance(result.parameters, dict) and result.parameters["proxy"]
        assert isinstance(result.details(), dict)
        text = repr(result)
        assert "\n" not in text and len(text) < 400, text
        assert text.startswith(f"<{result.scenario} proxy=")


def test_each_scenario_names_its_headline_figure() -> None:
    trial, restart, replica = results()
    assert trial.metrics.writes_resume_ms is None and trial.parameters["ha"] == "scripted"
    assert trial.faulted_node is None  # this fault named no node
    trial.inject = Event("inject", 1_000_000, 0, {"node": "node2"})
    assert trial.faulted_node == "node2"
    assert restart.metrics.unavailable_ms == 4.0 and restart.metrics.restart_ms == 3.5
    assert "reads_resume_ms" in replica.metrics and "server_write_gap_ms" in trial.metrics
