"""A trial the harness could not time is repeated once on a healed stack, and a second
late one ends in the runner-too-busy verdict, never in an SLO verdict on the stack."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_pgha.errors import RunnerTooBusy
from pytest_pgha.lag import LagSummary
from pytest_pgha.scenarios import failover
from pytest_pgha.scenarios.failover import TrialPlan, run_failover


class FakeTrials:
    """Stands in for run_failover_trial: hands out trials with the given lateness."""

    def __init__(self, lateness_ms: list[float]) -> None:
        self.lateness_ms = list(lateness_ms)
        self.runs = 0

    def __call__(self, stack: object, plan: TrialPlan) -> failover.TrialResult:
        late = self.lateness_ms[self.runs]
        self.runs += 1
        summary = LagSummary(late, late, 10, {"heartbeat": late})
        quiet = LagSummary(1.0, 1.0, 10, {"heartbeat": 1.0})
        return failover.TrialResult(
            plan,
            "direct",
            [],
            [],
            [],
            None,
            None,
            "node1",
            summary,
            quiet,  # type: ignore[arg-type]
        )


class FakeStack(SimpleNamespace):
    heals = 0

    def heal(self) -> list[str]:
        self.heals += 1
        return ["node0"]


def run(monkeypatch: pytest.MonkeyPatch, lateness_ms: list[float], **plan: object):
    trials = FakeTrials(lateness_ms)
    monkeypatch.setattr(failover, "run_failover_trial", trials)
    stack = FakeStack()
    trial_plan = TrialPlan(**{"rewire": "explicit", **plan})  # type: ignore[arg-type]
    return trials, stack, lambda: run_failover(stack, trial_plan)  # type: ignore[arg-type]


def test_a_trial_on_time_runs_once(monkeypatch):
    trials, stack, go = run(monkeypatch, [99.0])
    result = go()
    assert (trials.runs, stack.heals, result.attempts) == (1, 0, 1)


def test_a_late_trial_is_repeated_once_on_a_healed_stack(monkeypatch):
    trials, stack, go = run(monkeypatch, [180.0, 10.0])
    result = go()
    assert (trials.runs, stack.heals, result.attempts) == (2, 1, 2)
    assert "180.0 ms late" in result.extra["first_attempt"]["lag_excess"]


def test_late_twice_is_the_runners_fault_not_the_stacks(monkeypatch):
    _, _, go = run(monkeypatch, [180.0, 120.0])
    with pytest.raises(RunnerTooBusy) as raised:
        go()
    message = str(raised.value)
    assert "runner was too busy" in message and "No verdict on the stack" in message
    assert "180.0 ms" in message and "120.0 ms" in message and "lower -n" in message
    assert raised.value.result.attempts == 2  # type: ignore[attr-defined]


def test_the_bound_is_one_bucket_unless_given(monkeypatch):
    assert TrialPlan(bucket_ms=200).lag_bound_ms == 200
    assert TrialPlan(max_harness_lag_ms=5).lag_bound_ms == 5
    _, _, go = run(monkeypatch, [60.0, 60.0], bucket_ms=50)
    with pytest.raises(RunnerTooBusy):
        go()


@pytest.mark.parametrize("pgha_proxy_kind", ["pgbouncer"], indirect=True)
def test_a_live_stack_is_healed_between_attempts(pgha_failover, pgha_cluster, pgha_proxy):
    """A bound no harness meets: both attempts are late. The first attempt's fenced
    primary rejoined before the second, which failed over again through the proxy."""
    before = pgha_cluster.primary.timeline()
    with pytest.raises(RunnerTooBusy, match="runner was too busy") as raised:
        pgha_failover.failover(
            detect_delay_s=0.0, max_harness_lag_ms=0, rate=500, warmup_s=0.5, settle_s=0.5
        )
    second = raised.value.result  # type: ignore[attr-defined]
    assert second.attempts == 2
    assert second.metrics.ok_post_inject > 0 and second.metrics.workers_lost == 0
    assert pgha_cluster.primary.timeline() == before + 2
    assert second.harness_lag.max_ms is not None and second.harness_lag.samples > 100
