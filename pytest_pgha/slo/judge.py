"""Compare measured failover metrics with SLO bounds and explain the verdict."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from pytest_pgha.metrics import CATALOG, FailoverMetrics
from pytest_pgha.slo.expressions import SloBound, SloSource

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
    "!=": operator.ne,
}
_UPPER = frozenset({"<=", "<"})
Measured: TypeAlias = int | float | None
Metrics: TypeAlias = FailoverMetrics | Mapping[str, Measured]
_HEADER = ("metric", "measured", "bound", "result")


@dataclass(frozen=True)
class SloResult:
    """One bound checked against one trial."""

    metric: str
    op: str
    bound: float  # resolved: "2*workers" with 8 workers is 16
    measured: int | float | None
    passed: bool
    source: SloSource
    bound_expr: str = ""  # as written; the table shows it when it names workers
    unit: str | None = None  # the catalog's
    timed: bool = False  # on the harness's clocks: shown beside its timing error


class SloViolation(AssertionError):
    """At least one SLO failed; the message is the table of every result."""

    def __init__(self, results: Sequence[SloResult]) -> None:
        self.results = list(results)
        failed = sum(not r.passed for r in self.results)
        super().__init__(f"{failed} of {len(self.results)} SLOs failed\n{format_table(results)}")


def judge(metrics: Metrics, bounds: Iterable[SloBound]) -> list[SloResult]:
    """One result per bound, in the order given."""
    return [_judge_one(metrics, bound) for bound in bounds]


def assert_slos(metrics: Metrics, bounds: Iterable[SloBound]) -> list[SloResult]:
    """Raise SloViolation if any bound fails; return the results otherwise."""
    results = judge(metrics, bounds)
    if not all(r.passed for r in results):
        raise SloViolation(results)
    return results


def format_table(results: Sequence[SloResult]) -> str:
    """Plain-text table ``metric | measured | bound | result`` for assertion messages."""
    rows = [_HEADER, *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = [
        " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _lookup(metrics: Metrics, name: str) -> Measured:
    if isinstance(metrics, Mapping):
        return metrics.get(name)
    value: Measured = getattr(metrics, name, None)
    return value


def _judge_one(metrics: Metrics, bound: SloBound) -> SloResult:
    known = CATALOG.get(bound.metric)
    measured = _lookup(metrics, bound.metric)
    limit = bound.resolve(int(_lookup(metrics, "workers") or 0))
    return SloResult(
        metric=bound.metric,
        op=bound.op,
        bound=limit,
        measured=measured,
        passed=_passes(bound.metric, measured, bound.op, limit),
        source=bound.source,
        bound_expr=bound.value_expr,
        unit=CATALOG.unit_of(bound.metric),
        timed=bool(known and known.timed),
    )


def _passes(metric: str, measured: float | None, op: str, limit: float) -> bool:
    # None means the thing never happened (writes never resumed, no phase event):
    # no bound can be met by it.
    if measured is None:
        return False
    # -1 means writes were never disrupted, which is better than any upper bound,
    # even one a careless user set below zero.
    if _undisrupted_means_minus_one(metric) and measured == -1 and op in _UPPER:
        return True
    return _COMPARE[op](measured, limit)


def _undisrupted_means_minus_one(metric: str) -> bool:
    known = CATALOG.get(metric)
    return known is not None and known.minus_one_is_undisrupted


def _row(result: SloResult) -> tuple[str, str, str, str]:
    bound = f"{result.op} {_number(result.bound)}"
    if "workers" in result.bound_expr:
        bound += f" ({result.bound_expr})"
    bound += f" [{result.source}]"
    return (
        result.metric,
        _measured(result.metric, result.measured),
        bound,
        "PASS" if result.passed else "FAIL",
    )


def _measured(metric: str, value: float | None) -> str:
    if _undisrupted_means_minus_one(metric) and value is None:
        return "none (never resumed)"
    if _undisrupted_means_minus_one(metric) and value == -1:
        return "-1 (no disruption)"
    return "none" if value is None else _number(value)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
