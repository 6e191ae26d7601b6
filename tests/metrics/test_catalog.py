"""The metric catalog: what is in it, and how the SLO parser, the judge and the summary
read it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics import CATALOG, FailoverMetrics, Metric, MetricCatalog
from pytest_pgha.metrics.restart import ProbeReport
from pytest_pgha.report.summary import SummaryEntry, format_terminal_summary
from pytest_pgha.slo.expressions import parse_assignment
from pytest_pgha.slo.judge import judge

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_failover_figure_is_in_the_catalog() -> None:
    fields = {f.name for f in dataclasses.fields(FailoverMetrics)} - {"bucket_ms"}
    assert fields <= CATALOG.names()
    assert {m.name for m in CATALOG if m.group in ("failover", "harness")} == fields


def test_every_restart_figure_is_in_the_catalog() -> None:
    report = ProbeReport(1, 0, 0.0, None).to_json()
    assert set(report) - {"histogram_ms"} | {"restart_ms"} <= CATALOG.names()


def test_resume_figures_read_minus_one_as_undisrupted() -> None:
    flagged = {m.name for m in CATALOG if m.minus_one_is_undisrupted}
    assert flagged == {"writes_resume_ms", "recovery_ms", "reads_resume_ms"}


def test_the_same_definition_twice_is_harmless_another_one_is_refused() -> None:
    catalog = MetricCatalog()
    metric = Metric("lost_writes", "count", "acknowledged writes missing", "exact", "toy")
    catalog.register(metric)
    catalog.register(metric)
    with pytest.raises(PghaConfigError, match="already in the catalog"):
        catalog.register(dataclasses.replace(metric, unit="ms"))


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"name": "Lost-Writes"}, "metric name"),
        ({"unit": "furlongs"}, "unit of"),
        ({"meaning": "two\nlines"}, "meaning of"),
        ({"precision": " "}, "precision of"),
    ],
)
def test_a_malformed_metric_says_what_is_wrong(changes: dict[str, str], problem: str) -> None:
    fields = {"name": "x_ms", "unit": "ms", "meaning": "m", "precision": "p", "group": "g"}
    with pytest.raises(PghaConfigError, match=problem):
        Metric(**{**fields, **changes})  # type: ignore[arg-type]


def test_unknown_names_get_a_suggestion_from_the_catalog() -> None:
    assert CATALOG.suggestion("recovry_ms").startswith("did you mean recovery_ms")
    with pytest.raises(PghaConfigError, match="did you mean reads_resume_ms"):
        parse_assignment("reads_resum_ms<=100")


@pytest.fixture
def toy_metric() -> Iterator[Metric]:
    metric = CATALOG.register(
        Metric("toy_stall_ms", "ms", "a toy stall", "one bucket", "toy", True, True)
    )
    yield metric
    CATALOG._metrics.pop(metric.name)


def test_a_registered_metric_is_judged_with_its_flags(toy_metric: Metric) -> None:
    bound = parse_assignment("toy_stall_ms<=100")
    (undisrupted,) = judge({"toy_stall_ms": -1}, [bound])
    (never,) = judge({"toy_stall_ms": None}, [bound])
    assert undisrupted.passed and undisrupted.unit == "ms" and undisrupted.timed
    assert not never.passed


def test_the_summary_shows_units_and_the_timing_error_of_timed_figures(
    toy_metric: Metric,
) -> None:
    timed, count = judge(
        {"toy_stall_ms": 50, "workers_lost": 0},
        [parse_assignment("toy_stall_ms<=100"), parse_assignment("workers_lost==0")],
    )
    entry = SummaryEntry(
        "t",
        {"harness_lag_ms_max": 7.5, "workload_lag_ms_max": 3},
        [dataclasses.asdict(timed), dataclasses.asdict(count)],
    )
    lines = format_terminal_summary([entry])
    assert lines == [
        "PASS t toy_stall_ms 50 ms <= 100 ms (harness timing error <= 7.5 ms)",
        "PASS t workers_lost 0 == 0",
    ]


def test_the_readme_table_is_the_catalog() -> None:
    text = README.read_text()
    match = re.search(r"<!-- metrics -->\n(.*?)\n<!-- /metrics -->", text, re.S)
    assert match, "README.md lost its metric table markers"
    assert match.group(1) == CATALOG.markdown_table(), "regenerate it: pgha metrics"
