"""SLO bounds on the catalog's metrics, as written in markers, ini files and on the command line.

Marker form, one keyword per metric::

    @pytest.mark.pgha_slo(writes_resume_ms="<= 1500", error_count_post_inject="<= workers")

Command-line / ini form, one bound per item::

    writes_resume_ms<=1500
    error_count_post_inject <= 2*workers

A value is a number, ``workers`` (the trial's ``FailoverMetrics.workers``) or a number
times ``workers`` (``2*workers`` or ``workers*2``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics import CATALOG

SloSource = Literal["marker", "cli", "ini", "code"]
SOURCES: frozenset[str] = frozenset({"marker", "cli", "ini", "code"})
# Two-character operators first so that "<=" is never read as "<" followed by "=5".
OPERATORS: tuple[str, ...] = ("<=", ">=", "==", "!=", "<", ">")

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_OP = "|".join(re.escape(op) for op in OPERATORS)
_VALUE_RE = re.compile(
    rf"^(?:(?P<num>{_NUMBER})|(?:(?P<pre>{_NUMBER})\s*\*\s*)?workers|workers\s*\*\s*(?P<post>{_NUMBER}))$"
)
_COMPARISON_RE = re.compile(rf"^\s*(?P<op>{_OP})\s*(?P<value>.*?)\s*$")
_ASSIGNMENT_RE = re.compile(rf"^\s*(?P<metric>[A-Za-z_]\w*)\s*(?P<op>{_OP})\s*(?P<value>.*?)\s*$")
_HELP = (
    f"expected an operator ({', '.join(OPERATORS)}) and a value: a number, 'workers' or 'N*workers'"
)


@dataclass(frozen=True)
class SloBound:
    """One bound, e.g. ``writes_resume_ms <= 1500``, and where it was written."""

    metric: str
    op: str
    value_expr: str
    source: SloSource = "code"

    def __post_init__(self) -> None:
        # Checked here too so bounds built in code are as safe as parsed ones.
        text = f"{self.metric}{self.op}{self.value_expr}"
        _check_metric(self.metric, text)
        if self.op not in OPERATORS:
            raise _malformed(text)
        _factor_of_workers(self.value_expr, text)
        if self.source not in SOURCES:
            raise PghaConfigError.invalid("source", self.source, f"use one of {sorted(SOURCES)}")

    def resolve(self, workers: int) -> float:
        """The bound's number for a trial with ``workers`` workers."""
        number, per_worker = _factor_of_workers(self.value_expr, str(self))
        return number * workers if per_worker else number

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value_expr}"


def parse_comparison(metric: str, expr: object, *, source: SloSource = "marker") -> SloBound:
    """A marker keyword: ``metric`` is the keyword, ``expr`` e.g. ``"<= 1500"``."""
    text = f"{metric}={expr!r}"
    if not isinstance(expr, str):
        # A bare number would leave the direction to guesswork.
        raise PghaConfigError(f"invalid SLO {text}: write it as a string like '<= {expr}'; {_HELP}")
    match = _COMPARISON_RE.match(expr)
    if match is None:
        raise _malformed(text)
    _check_metric(metric, text)
    return _bound(metric, match["op"], match["value"], source, text)


def parse_assignment(text: str, *, source: SloSource = "cli") -> SloBound:
    """A command-line or ini item such as ``writes_resume_ms<=1500``."""
    match = _ASSIGNMENT_RE.match(text)
    if match is None:
        raise _malformed(repr(text))
    _check_metric(match["metric"], repr(text))
    return _bound(match["metric"], match["op"], match["value"], source, repr(text))


def parse_marker(kwargs: Mapping[str, object]) -> list[SloBound]:
    """Every keyword of an SLO marker."""
    return [parse_comparison(name, expr, source="marker") for name, expr in kwargs.items()]


def parse_lines(lines: Iterable[str], *, source: SloSource) -> list[SloBound]:
    """Command-line values or ini lines; blank lines and ``#`` comments are skipped."""
    return [
        parse_assignment(line, source=source)
        for line in lines
        if line.strip() and not line.lstrip().startswith("#")
    ]


def merge_bounds(
    marker: Iterable[SloBound], ini: Iterable[SloBound], cli: Iterable[SloBound]
) -> list[SloBound]:
    """Bounds in force: per metric, those of the most specific source that names it.

    The whole set of a metric's bounds is replaced, not single bounds, so a range given
    on the command line (``x>=1`` and ``x<=9``) replaces the ini's ``x<=5`` entirely.
    """
    chosen: dict[str, list[SloBound]] = {}
    for layer in (marker, ini, cli):
        by_metric: dict[str, list[SloBound]] = {}
        for bound in layer:
            by_metric.setdefault(bound.metric, []).append(bound)
        chosen.update(by_metric)
    return [bound for bounds in chosen.values() for bound in bounds]


def _bound(metric: str, op: str, value: str, source: SloSource, text: str) -> SloBound:
    _factor_of_workers(value, text)
    return SloBound(metric, op, _normalize(value), source)


def _normalize(value: str) -> str:
    return re.sub(r"\s+", "", value)


def _factor_of_workers(value: str, text: str) -> tuple[float, bool]:
    """(number, True) for ``number*workers``, (number, False) for a plain number."""
    match = _VALUE_RE.match(value.strip())
    if match is None:
        raise _malformed(text)
    if match["num"] is not None:
        return float(match["num"]), False
    factor = match["pre"] or match["post"] or "1"
    return float(factor), True


def _check_metric(metric: str, text: str) -> None:
    if metric in CATALOG:
        return
    raise PghaConfigError(
        f"invalid SLO {text}: unknown metric {metric!r}; {CATALOG.suggestion(metric)} "
        f"(operators: {', '.join(OPERATORS)})"
    )


def _malformed(text: str) -> PghaConfigError:
    return PghaConfigError(f"invalid SLO {text}: {_HELP}")
