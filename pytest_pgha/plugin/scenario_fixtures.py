"""The scenario fixtures users write failover tests with:

    @pytest.mark.slo(writes_resume_ms="<= 1500")
    def test_primary_loss(pgha_failover):
        pgha_failover.failover(fault="kill_primary", detect_delay_s=1.0)

Each run computes its metrics, judges the SLOs (marker < ini < --pgha-slo), adds them
to the run summary and, with --alluredir, attaches the chart, logs and JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.plugin import options as pgha_config
from pytest_pgha.plugin import session
from pytest_pgha.plugin.slo_fixtures import bounds_for, result_dicts
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.report.allure_report import (
    allure_enabled,
    attach_failover_report,
    attach_text,
)
from pytest_pgha.report.summary import SummaryEntry
from pytest_pgha.scenarios.failover import (
    RunnerTooBusyError,
    TrialPlan,
    TrialResult,
    run_failover,
)
from pytest_pgha.scenarios.replica_loss import ReplicaLossResult, run_replica_loss
from pytest_pgha.scenarios.restart import RestartResult, run_restart_window
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.slo.judge import SloResult, SloViolation, judge
from pytest_pgha.timeline import Event
from pytest_pgha.workload.records import TxRecord


@pytest.fixture
def pgha_stack(pgha_cluster: Cluster, pgha_proxy: Proxy) -> Stack:
    """The cluster with its proxy in front, and the test's event timeline."""
    return Stack(pgha_cluster, pgha_proxy)


class ScenarioRunner:
    def __init__(self, request: pytest.FixtureRequest, stack: Stack) -> None:
        self.request = request
        self.stack = stack

    # -- scenarios ---------------------------------------------------------------------
    def failover(self, **plan: Any) -> TrialResult:
        """Fault the primary under load and let the scripted HA fail over.
        Options: see TrialPlan (fault, detect_delay_s, probe_interval_s, rewire, workers,
        rate, warmup_s, settle_s)."""
        opts = pgha_config.options(self.request.config)
        try:
            trial_plan = TrialPlan(**{"bucket_ms": opts.bucket_ms, **plan})
        except TypeError as error:
            raise PghaConfigError(
                f"pgha_failover.failover(): {error}; options are "
                f"{', '.join(TrialPlan.__dataclass_fields__)}"
            ) from None
        try:
            result = run_failover(self.stack, trial_plan)
        except RunnerTooBusyError as too_busy:
            # Shown and summarised like any trial, but judged by no SLO: the figures
            # say how busy the runner was, not how good the stack is.
            self._report(too_busy.result, trial_plan, judge=False)
            raise
        self._report(result, trial_plan)
        return result

    def restart_window(self, **options: Any) -> RestartResult:
        """SIGKILL the proxy and start it again while a prober connects every 2 ms."""
        result = run_restart_window(self.stack, **options)
        parameters = {
            "proxy": self.stack.proxy.kind,
            "fault": "crash_proxy",
            "probe_interval_ms": options.get("interval_s", 0.002) * 1000,
        }
        self._attach_basic(result.metrics_json(), parameters, result.events)
        self._judge(result.metrics_json(), parameters)
        return result

    def replica_loss(self, **options: Any) -> ReplicaLossResult:
        """Kill a replica while writes and reads (through the read path) run."""
        opts = pgha_config.options(self.request.config)
        result = run_replica_loss(self.stack, **{"bucket_ms": opts.bucket_ms, **options})
        parameters = {"proxy": self.stack.proxy.kind, "fault": "kill_replica"}
        self._attach_and_judge(
            result.metrics_json(),
            parameters,
            result.read_records,
            [],
            result.events,
            result.inject,
            opts.bucket_ms,
        )
        return result

    # -- what every scenario does with its result --------------------------------------------
    def _report(self, result: TrialResult, plan: TrialPlan, *, judge: bool = True) -> None:
        self._attach_and_judge(
            result.metrics_json(),
            result.parameters(),
            result.records,
            result.samples,
            result.events,
            result.inject,
            plan.bucket_ms,
            judge=judge,
        )

    def _attach_and_judge(
        self,
        metrics: dict[str, Any],
        parameters: Mapping[str, object],
        records: Sequence[TxRecord],
        samples: Sequence[Any],
        events: list[Event],
        inject: Event,
        bucket_ms: int,
        *,
        judge: bool = True,
    ) -> None:
        if allure_enabled():
            from pytest_pgha.report.chart import render_failover_chart

            chart = render_failover_chart(
                records,
                samples,
                events,
                inject_us=inject.epoch_us,
                bucket_ms=bucket_ms,
                title=self.request.node.nodeid,
                path=self.stack.cluster.workdir / "chart.png",
            )
            attach_failover_report(
                metrics_json=metrics,
                records=records,
                samples=samples,
                events=events,
                chart_path=chart,
                parameters=parameters,
            )
            self._attach_logs()
        if judge:
            self._judge(metrics, parameters)
        else:
            self._record(metrics, parameters, [])

    def _attach_basic(
        self, metrics: dict[str, Any], parameters: Mapping[str, object], events: list[Event]
    ) -> None:
        if allure_enabled():
            attach_failover_report(
                metrics_json=metrics,
                records=[],
                samples=[],
                events=events,
                chart_path=None,
                parameters=parameters,
            )
            self._attach_logs()

    def _attach_logs(self) -> None:
        for node in self.stack.cluster.nodes:
            attach_text(f"{node.name}.log", node.logs())
        log = self.stack.proxy.log_path
        if log.exists():
            attach_text(log.name, log.read_text(errors="replace"))

    def _judge(self, metrics: dict[str, Any], parameters: Mapping[str, object]) -> None:
        item = self.request.node
        bounds = bounds_for(item, applies_to=frozenset(metrics))
        results = judge(metrics, bounds)
        self._record(metrics, parameters, results)
        if not all(r.passed for r in results):
            raise SloViolation(results)

    def _record(
        self, metrics: dict[str, Any], parameters: Mapping[str, object], results: list[SloResult]
    ) -> None:
        item = self.request.node
        session.add_entry(
            item.config, SummaryEntry(item.nodeid, metrics, result_dicts(results), dict(parameters))
        )


@pytest.fixture
def pgha_failover(request: pytest.FixtureRequest, pgha_stack: Stack) -> ScenarioRunner:
    """Runs failover, restart-window and replica-loss scenarios on the test's stack."""
    return ScenarioRunner(request, pgha_stack)
