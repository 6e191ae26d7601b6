"""SLO parsing, precedence and judgement; no database involved."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics.failover import FailoverMetrics
from pytest_pgha.slo.expressions import (
    OPERATORS,
    SloBound,
    merge_bounds,
    parse_assignment,
    parse_comparison,
    parse_lines,
    parse_marker,
)
from pytest_pgha.slo.judge import SloViolation, assert_slos, format_table, judge

SEED = FailoverMetrics(
    writes_resume_ms=1600,
    error_count_post_inject=8,
    total_ok_pre_inject=565342,
    ok_post_inject=1000,
    in_flight_errors=8,
    retry_errors=0,
    indeterminate_commits=0,
    connect_failures=0,
    workers=8,
    workers_lost=0,
    connections_survived=8,
    reconnect_ms_max=210.0,
    reconnect_ms_median=150.5,
    detect_ms=1000.0,
    promote_ms=80.0,
    rewire_ms=20.0,
    ready_ms=1100.0,
)


def seed(**changes: object) -> FailoverMetrics:
    return dataclasses.replace(SEED, **changes)  # type: ignore[arg-type]


# --- parsing -----------------------------------------------------------------------------


def test_marker_form() -> None:
    bound = parse_comparison("writes_resume_ms", "<= 1500")
    assert bound == SloBound("writes_resume_ms", "<=", "1500", "marker")
    assert bound.resolve(workers=8) == 1500


@pytest.mark.parametrize("op", OPERATORS)
def test_every_operator(op: str) -> None:
    assert parse_comparison("detect_ms", f"{op}2.5").op == op
    assert parse_assignment(f"detect_ms{op}2.5").op == op


def test_cli_form_with_and_without_whitespace() -> None:
    tight = parse_assignment("writes_resume_ms<=1500")
    loose = parse_assignment("  writes_resume_ms   <=  1500  ")
    assert tight == loose == SloBound("writes_resume_ms", "<=", "1500", "cli")


def test_ini_source_and_float_value() -> None:
    bound = parse_assignment("reconnect_ms_max < 250.5", source="ini")
    assert (bound.source, bound.resolve(8)) == ("ini", 250.5)


def test_negative_value() -> None:
    assert parse_assignment("writes_resume_ms==-1").resolve(8) == -1


@pytest.mark.parametrize(
    ("expr", "normalized", "resolved"),
    [
        ("<= workers", "workers", 8),
        ("<= 2*workers", "2*workers", 16),
        ("<= 2 * workers", "2*workers", 16),
        ("<= workers*1.5", "workers*1.5", 12),
        ("<= 0.5*workers", "0.5*workers", 4),
    ],
)
def test_workers_keyword(expr: str, normalized: str, resolved: float) -> None:
    bound = parse_comparison("error_count_post_inject", expr)
    assert bound.value_expr == normalized
    assert bound.resolve(workers=8) == resolved


@pytest.mark.parametrize(
    "text",
    [
        "writes_resume_ms=1500",
        "writes_resume_ms=<1500",
        "writes_resume_ms => 1500",
        "writes_resume_ms 1500",
        "<= 1500",
        "",
    ],
)
def test_bad_operator(text: str) -> None:
    with pytest.raises(PghaConfigError) as raised:
        parse_assignment(text)
    message = str(raised.value)
    assert repr(text) in message
    assert all(op in message for op in OPERATORS)


@pytest.mark.parametrize("expr", ["1500", "=< 1500", "about 1500"])
def test_bad_marker_operator(expr: str) -> None:
    with pytest.raises(PghaConfigError, match="<=") as raised:
        parse_comparison("writes_resume_ms", expr)
    assert expr in str(raised.value)


@pytest.mark.parametrize("value", ["fast", "1500ms", "2*workerz", "", "workers workers", "1e3"])
def test_garbage_value(value: str) -> None:
    text = f"writes_resume_ms<={value}"
    with pytest.raises(PghaConfigError) as raised:
        parse_assignment(text)
    assert repr(text) in str(raised.value)
    assert "workers" in str(raised.value)


def test_unknown_metric_suggests_close_names() -> None:
    with pytest.raises(PghaConfigError) as raised:
        parse_assignment("writes_resum_ms<=1500")
    message = str(raised.value)
    assert "'writes_resum_ms<=1500'" in message
    assert "did you mean writes_resume_ms" in message
    assert all(op in message for op in OPERATORS)


def test_unknown_metric_without_close_match_lists_all() -> None:
    with pytest.raises(PghaConfigError, match=r"valid: .*writes_resume_ms"):
        parse_comparison("zzz", "<= 1")


def test_bucket_ms_is_not_a_metric() -> None:
    with pytest.raises(PghaConfigError, match="unknown metric 'bucket_ms'"):
        parse_assignment("bucket_ms<=100")


def test_marker_number_must_be_a_comparison_string() -> None:
    with pytest.raises(PghaConfigError, match="'<= 1500'"):
        parse_comparison("writes_resume_ms", 1500)


def test_bounds_built_in_code_are_validated() -> None:
    assert SloBound("workers_lost", "==", "0").source == "code"
    with pytest.raises(PghaConfigError, match="did you mean workers_lost"):
        SloBound("worker_lost", "==", "0")
    with pytest.raises(PghaConfigError, match="<="):
        SloBound("workers_lost", "=", "0")
    with pytest.raises(PghaConfigError, match="workers"):
        SloBound("workers_lost", "==", "none")
    with pytest.raises(PghaConfigError, match="source"):
        SloBound("workers_lost", "==", "0", "env")  # type: ignore[arg-type]


def test_parse_marker_and_lines() -> None:
    marker = parse_marker({"writes_resume_ms": "<= 1500", "workers_lost": "== 0"})
    assert [(b.metric, b.source) for b in marker] == [
        ("writes_resume_ms", "marker"),
        ("workers_lost", "marker"),
    ]
    lines = parse_lines(["", "# a comment", " detect_ms <= 500 "], source="ini")
    assert lines == [SloBound("detect_ms", "<=", "500", "ini")]


# --- precedence --------------------------------------------------------------------------


def test_cli_overrides_ini_overrides_marker() -> None:
    marker = parse_marker({"writes_resume_ms": "<= 1000", "workers_lost": "== 0"})
    ini = parse_lines(["writes_resume_ms<=2000", "detect_ms<=900"], source="ini")
    cli = parse_lines(["writes_resume_ms<=3000"], source="cli")
    merged = merge_bounds(marker, ini, cli)
    assert [(b.metric, b.value_expr, b.source) for b in merged] == [
        ("writes_resume_ms", "3000", "cli"),
        ("workers_lost", "0", "marker"),
        ("detect_ms", "900", "ini"),
    ]


def test_ini_overrides_marker_without_cli() -> None:
    marker = parse_marker({"writes_resume_ms": "<= 1000"})
    ini = parse_lines(["writes_resume_ms<=2000"], source="ini")
    assert merge_bounds(marker, ini, []) == ini


def test_a_range_is_replaced_as_a_whole() -> None:
    ini = parse_lines(["detect_ms>=100", "detect_ms<=900"], source="ini")
    cli = parse_lines(["detect_ms<=500"], source="cli")
    assert merge_bounds([], ini, cli) == cli
    assert merge_bounds(ini, [], []) == ini


# --- judgement ---------------------------------------------------------------------------


def bounds(*texts: str) -> list[SloBound]:
    return parse_lines(texts, source="cli")


def test_judge_pass_and_fail() -> None:
    results = judge(SEED, bounds("writes_resume_ms<=1500", "error_count_post_inject<=workers"))
    assert [(r.metric, r.measured, r.bound, r.passed) for r in results] == [
        ("writes_resume_ms", 1600, 1500, False),
        ("error_count_post_inject", 8, 8, True),
    ]


def test_workers_bound_uses_the_trials_workers() -> None:
    (result,) = judge(seed(workers=4), bounds("error_count_post_inject<=workers"))
    assert (result.bound, result.passed) == (4, False)


def test_none_measured_fails_every_bound() -> None:
    metrics = seed(writes_resume_ms=None, detect_ms=None)
    results = judge(metrics, bounds("writes_resume_ms<=99999", "detect_ms!=0", "detect_ms>=0"))
    assert not any(r.passed for r in results)


def test_no_disruption_passes_upper_bounds_only() -> None:
    metrics = seed(writes_resume_ms=-1)
    upper = judge(metrics, bounds("writes_resume_ms<=1500", "writes_resume_ms<0"))
    assert all(r.passed for r in upper)
    (lower,) = judge(metrics, bounds("writes_resume_ms>=100"))
    assert not lower.passed


def test_format_table() -> None:
    results = judge(
        seed(writes_resume_ms=None),
        [
            *bounds("writes_resume_ms<=1500", "error_count_post_inject<=2*workers"),
            parse_comparison("reconnect_ms_median", "< 100"),
        ],
    )
    table = format_table(results)
    lines = table.splitlines()
    header = [cell.strip() for cell in lines[0].split("|")]
    assert header == ["metric", "measured", "bound", "result"]
    assert set(lines[1]) <= {"-", "+"}
    assert "none (never resumed)" in lines[2] and lines[2].endswith("FAIL")
    assert "<= 16 (2*workers) [cli]" in lines[3] and lines[3].endswith("PASS")
    assert "150.5" in lines[4] and "< 100 [marker]" in lines[4]
    assert len({line.index("|") for line in lines if "|" in line}) == 1  # columns aligned


def test_format_table_shows_no_disruption() -> None:
    table = format_table(judge(seed(writes_resume_ms=-1), bounds("writes_resume_ms<=1500")))
    assert "-1 (no disruption)" in table


def test_assert_slos_raises_with_the_table() -> None:
    slos = bounds("writes_resume_ms<=1500", "workers_lost==0")
    with pytest.raises(SloViolation) as raised:
        assert_slos(SEED, slos)
    assert isinstance(raised.value, AssertionError)
    assert "1 of 2 SLOs failed" in str(raised.value)
    assert format_table(judge(SEED, slos)) in str(raised.value)
    assert [r.passed for r in raised.value.results] == [False, True]


def test_assert_slos_returns_results_when_all_pass() -> None:
    results = assert_slos(SEED, bounds("writes_resume_ms<=2000"))
    assert [r.passed for r in results] == [True]
