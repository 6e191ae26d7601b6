"""SLO bounds on failover metrics: parsing, precedence and judgement."""

from pytest_pgha.slo.expressions import (
    SloBound,
    merge_bounds,
    parse_assignment,
    parse_comparison,
    parse_lines,
    parse_marker,
)
from pytest_pgha.slo.judge import SloResult, SloViolation, assert_slos, format_table, judge

__all__ = [
    "SloBound",
    "SloResult",
    "SloViolation",
    "assert_slos",
    "format_table",
    "judge",
    "merge_bounds",
    "parse_assignment",
    "parse_comparison",
    "parse_lines",
    "parse_marker",
]
