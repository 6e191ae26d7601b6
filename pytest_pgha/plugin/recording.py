"""The one path every scenario's result takes: Allure attachments, the run summary, and
the SLO verdicts of the markers, the ini file and --pgha-slo.

A violated SLO fails the test after its body has run (pytest_runtest_call in the
plugin), so the rest of the test still runs and its own assertions are reported too."""

from __future__ import annotations

import pytest

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics import CATALOG
from pytest_pgha.plugin import session
from pytest_pgha.plugin.slo_fixtures import bounds_for, result_dicts
from pytest_pgha.report.allure_report import (
    allure_enabled,
    attach_failover_report,
    attach_file,
    attach_phases,
    attach_text,
    attach_verdicts,
    set_parameters,
)
from pytest_pgha.report.summary import SummaryEntry
from pytest_pgha.scenarios.protocol import ScenarioResult
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.slo.judge import SloResult, SloViolation, judge

VIOLATIONS_KEY = pytest.StashKey[list[SloViolation]]()


def record_trial(
    request: pytest.FixtureRequest, stack: Stack, result: ScenarioResult, *, verdict: bool = True
) -> list[SloResult]:
    """Attach, summarise and (unless verdict is False) judge one result."""
    item = request.node
    _add_plugins_metrics(item.config, result)
    report = {**result.metrics, **result.details()}
    if allure_enabled():
        _attach(request, stack, result, report)
    results: list[SloResult] = []
    if verdict:
        bounds = bounds_for(item, applies_to=frozenset(result.metrics))
        results = judge(result.metrics, bounds)
    session.add_entry(
        item.config,
        SummaryEntry(item.nodeid, report, result_dicts(results), dict(result.parameters)),
    )
    if allure_enabled():
        attach_phases(result.events, result.inject)
        attach_verdicts(result_dicts(results))
        set_parameters({}, hidden=_pytest_parameters_to_hide(item))
    if not all(r.passed for r in results):
        item.stash.setdefault(VIOLATIONS_KEY, []).append(SloViolation(results))
    return results


def _pytest_parameters_to_hide(item: pytest.Item) -> list[str]:
    """pytest's own parameters that the trial's repeat (the proxy kind) or that only a
    repr would show (a tuple of options): the trial's parameters say it plainly."""
    params: dict[str, object] = getattr(getattr(item, "callspec", None), "params", {})
    return [
        name
        for name, value in params.items()
        if name == "pgha_proxy_kind" or not isinstance(value, (str, int, float, bool))
    ]


def _add_plugins_metrics(config: pytest.Config, result: ScenarioResult) -> None:
    for figures in config.hook.pytest_pgha_trial_metrics(result=result):
        for name, value in (figures or {}).items():
            if name not in CATALOG:
                raise PghaConfigError(
                    f"pytest_pgha_trial_metrics returned {name!r}, which is not in the "
                    f"metric catalog: register it in pytest_pgha_add_metrics first"
                )
            result.added_metrics[name] = value


def violations(item: pytest.Item) -> list[SloViolation]:
    return item.stash.get(VIOLATIONS_KEY, [])


def _attach(
    request: pytest.FixtureRequest, stack: Stack, result: ScenarioResult, report: dict[str, object]
) -> None:
    chart = None
    series = getattr(result, "chart_series", None)
    if series is not None:
        from pytest_pgha.report.chart import render_durability_chart

        points = series()
        render_durability_chart(
            points["acked"],
            points["lost"],
            points["broken"],
            list(result.events),
            inject_us=result.inject.epoch_us,
            bucket_ms=result.bucket_ms,
            title=request.node.nodeid,
            path=stack.cluster.workdir / f"{result.scenario}-commits.png",
        )
        attach_file(stack.cluster.workdir / f"{result.scenario}-commits.png", "commits chart")
    if result.records:
        from pytest_pgha.report.chart import render_failover_chart

        chart = render_failover_chart(
            result.records,
            result.samples,
            list(result.events),
            inject_us=result.inject.epoch_us,
            bucket_ms=result.bucket_ms,
            title=request.node.nodeid,
            path=stack.cluster.workdir / f"{result.scenario}-chart.png",
        )
    attach_failover_report(
        metrics_json=report,
        records=result.records,
        samples=result.samples,
        events=result.events,
        chart_path=chart,
        parameters=result.parameters,
    )
    for name, text in result.attachments().items():
        attach_text(name, text)
    for node in stack.cluster.nodes:
        attach_text(f"{node.name}.log", node.logs())
    log = stack.proxy.log_path
    if log.exists() and log.stat().st_size:
        attach_text(log.name, log.read_text(errors="replace"))
