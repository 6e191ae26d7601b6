"""SLOs in tests: the `slo` marker, --pgha-slo / ini `pgha_slo`, and the `pgha_slo`
fixture for checks written in code."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import asdict
from typing import Any

import pytest

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics import FailoverMetrics
from pytest_pgha.plugin import options as pgha_config
from pytest_pgha.plugin import session
from pytest_pgha.report.summary import SummaryEntry
from pytest_pgha.slo.expressions import (
    SloBound,
    merge_bounds,
    parse_comparison,
    parse_lines,
    parse_marker,
)
from pytest_pgha.slo.judge import Metrics, SloResult, SloViolation, judge


def bounds_for(item: pytest.Item, applies_to: frozenset[str] | None = None) -> list[SloBound]:
    """Marker < ini < command line, for one test. Only bounds on metrics the scenario
    measures (applies_to) are kept from ini/cli, so a global bound on writes does not
    fail a restart-window test."""
    opts = pgha_config.options(item.config)
    marker = [b for m in reversed(list(item.iter_markers("slo"))) for b in parse_marker(m.kwargs)]
    ini = parse_lines(opts.slo_ini, source="ini")
    cli = parse_lines(opts.slo_cli, source="cli")
    if applies_to is not None:
        ini = [b for b in ini if b.metric in applies_to]
        cli = [b for b in cli if b.metric in applies_to]
    return merge_bounds(marker, ini, cli)


def result_dicts(results: list[SloResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]


class SloChecker:
    """`pgha_slo.check(result, writes_resume_ms="<= 1500")`: result is a scenario's
    result, its `.metrics`, or a mapping of metric names to figures."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item
        self.results: list[SloResult] = []

    def check(self, measured: object, **bounds: str) -> list[SloResult]:
        parsed = [parse_comparison(name, expr, source="code") for name, expr in bounds.items()]
        results = judge(figures_of(measured), parsed)
        self.results.extend(results)
        if not all(r.passed for r in results):
            raise SloViolation(results)
        return results


def figures_of(measured: object) -> Metrics:
    """The figures to judge, or one clear error: a gate never reads a figure off an
    object that does not carry it (that would report "never resumed" for a trial
    whose writes resumed)."""
    metrics = getattr(measured, "metrics", None)
    if isinstance(metrics, Mapping):
        return metrics
    if isinstance(measured, (Mapping, FailoverMetrics)):
        return measured
    raise PghaConfigError(
        f"pgha_slo.check() takes a scenario's result, its .metrics or a mapping of "
        f"metric names to figures, not {type(measured).__name__}"
    )


@pytest.fixture
def pgha_slo(request: pytest.FixtureRequest) -> Generator[SloChecker, None, None]:
    """Check SLO bounds from code; results go to the run summary like marker ones."""
    checker = SloChecker(request.node)
    yield checker
    if checker.results:
        session.add_entry(
            request.config,
            SummaryEntry(request.node.nodeid, {}, result_dicts(checker.results)),
        )


def validate_options(config: pytest.Config) -> None:
    """Malformed --pgha-slo / ini pgha_slo bounds are usage errors, found at start."""
    opts = pgha_config.options(config)
    for where, lines, source in (
        ("ini pgha_slo", opts.slo_ini, "ini"),
        ("--pgha-slo", opts.slo_cli, "cli"),
    ):
        try:
            parse_lines(lines, source=source)  # type: ignore[arg-type]
        except PghaConfigError as error:
            raise PghaConfigError(f"{where}: {error}") from None


def validate_marker(item: pytest.Item) -> str | None:
    """An error message for a malformed slo marker, found at collection."""
    try:
        for marker in item.iter_markers("slo"):
            parse_marker(marker.kwargs)
    except PghaConfigError as error:
        return f"{item.nodeid}: {error}"
    return None
