"""The scenario fixtures users write failover tests with:

    @pytest.mark.slo(writes_resume_ms="<= 1500")
    def test_primary_loss(pgha_scenario):
        pgha_scenario.failover(fault="kill_primary", detect_delay_s=1.0)

Each scenario validates its options before anything starts, runs on the test's stack,
and records its result (pytest_pgha.plugin.recording). A combination that does not
apply to the test's proxy (a replica loss without a read path, a monitor rewire on a
proxy without a monitor, a restart of no proxy) is skipped with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.plugin import options as pgha_config
from pytest_pgha.plugin.recording import record_trial
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.scenarios.durability import DurabilityPlan, DurabilityResult, run_durability
from pytest_pgha.scenarios.failover import RunnerTooBusyError, TrialPlan, TrialResult, run_failover
from pytest_pgha.scenarios.protocol import plan_from
from pytest_pgha.scenarios.replica_loss import ReplicaLossPlan, ReplicaLossResult, run_replica_loss
from pytest_pgha.scenarios.restart import RestartPlan, RestartResult, run_restart_window
from pytest_pgha.scenarios.stack import Stack


@pytest.fixture
def pgha_stack(pgha_cluster: Cluster, pgha_proxy: Proxy) -> Stack:
    """The cluster with its proxy in front, and the test's event timeline."""
    return Stack(pgha_cluster, pgha_proxy)


class ScenarioRunner:
    """Runs failover, restart-window, replica-loss and durability scenarios on the
    test's stack."""

    def __init__(self, request: pytest.FixtureRequest, stack: Stack) -> None:
        self.request = request
        self.stack = stack

    def failover(self, **options: Any) -> TrialResult:
        """Fault the primary under load and let the HA manager fail over. Options: the
        fields of pytest_pgha.scenarios.failover.TrialPlan (README: "Scenarios")."""
        bucket_ms = pgha_config.options(self.request.config).bucket_ms
        plan = plan_from(TrialPlan, "failover", {"bucket_ms": bucket_ms, **options})
        self._heal_what_an_earlier_trial_broke()
        plan = plan.for_stack(self.stack)
        proxy = self.stack.proxy
        if plan.rewire == "monitor" and not proxy.has_monitor:
            pytest.skip(f"{proxy.kind} has no monitor of its own: rewire='monitor' does not apply")
        try:
            result = run_failover(self.stack, plan)
        except RunnerTooBusyError as too_busy:
            # Shown and summarised like any trial, but judged by no SLO: the figures
            # say how busy the runner was, not how good the stack is.
            record_trial(self.request, self.stack, too_busy.result, verdict=False)
            raise
        record_trial(self.request, self.stack, result)
        return result

    def restart_window(self, **options: Any) -> RestartResult:
        """SIGKILL the proxy and start it again while a prober connects every 2 ms.
        Options: the fields of pytest_pgha.scenarios.restart.RestartPlan."""
        plan = plan_from(RestartPlan, "restart_window", options)
        if not self.stack.proxy.has_process:
            pytest.skip(f"{self.stack.proxy.kind} has no proxy process to crash")
        self._heal_what_an_earlier_trial_broke()
        result = run_restart_window(self.stack, plan)
        record_trial(self.request, self.stack, result)
        return result

    def replica_loss(self, **options: Any) -> ReplicaLossResult:
        """Kill a replica while writes and reads (through the read path) run. Options:
        the fields of pytest_pgha.scenarios.replica_loss.ReplicaLossPlan."""
        bucket_ms = pgha_config.options(self.request.config).bucket_ms
        plan = plan_from(ReplicaLossPlan, "replica_loss", {"bucket_ms": bucket_ms, **options})
        if self.stack.proxy.ro_dsn is None:
            pytest.skip(f"{self.stack.proxy.kind} has no read path in this configuration")
        self._heal_what_an_earlier_trial_broke()
        result = run_replica_loss(self.stack, plan)
        record_trial(self.request, self.stack, result)
        return result

    def durability(self, **options: Any) -> DurabilityResult:
        """Run the ledger workload, break commits with a fault (and fail over, or
        recover in place), then give every transaction a verdict: lost, phantom,
        committed, aborted, unknown. Options: the fields of
        pytest_pgha.scenarios.durability.DurabilityPlan (README: "Durability")."""
        bucket_ms = pgha_config.options(self.request.config).bucket_ms
        plan = plan_from(DurabilityPlan, "durability", {"bucket_ms": bucket_ms, **options})
        self._heal_what_an_earlier_trial_broke()
        result = run_durability(self.stack, plan)
        record_trial(self.request, self.stack, result)
        return result

    def _heal_what_an_earlier_trial_broke(self) -> None:
        """A cluster shared by several trials (module scope) starts each at full
        strength: nodes an earlier fault left down rejoin as standbys (pg_rewind)."""
        if all(node.running() for node in self.stack.cluster.nodes):
            return
        rejoined = self.stack.heal()
        self.stack.timeline.record("healed", nodes=rejoined)


@pytest.fixture
def pgha_scenario(request: pytest.FixtureRequest, pgha_stack: Stack) -> ScenarioRunner:
    """Runs failover, restart-window and replica-loss scenarios on the test's stack."""
    return ScenarioRunner(request, pgha_stack)


@pytest.fixture
def pgha_failover(pgha_scenario: ScenarioRunner) -> ScenarioRunner:
    """The former name of pgha_scenario, kept so that existing tests run unchanged."""
    return pgha_scenario
