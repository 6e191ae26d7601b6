"""The metric catalog: every figure a scenario measures, by name, with its unit, its
meaning in one line and how precise it is.

Each metric is registered beside the code that computes it (``register_metric`` at
import time), and everything that names metrics reads the catalog: the SLO parser and
its "did you mean", the judge (what -1 and None mean), the terminal summary (units and
the harness's timing error beside timed figures), ``pgha metrics`` and the README's
table. A plugin adds its own metrics the same way, or through the
``pytest_pgha_add_metrics`` hook.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from pytest_pgha.errors import PghaConfigError

UNITS = ("ms", "count", "workers", "bytes", "ratio", "percent")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Metric:
    """One figure a scenario measures."""

    name: str
    unit: str
    meaning: str
    precision: str
    # What computes it: failover (a failover trial's log and timeline, also the write
    # side of a replica loss), read path, restart window, harness.
    group: str
    # -1 means the thing was never disrupted, which meets every upper bound; None that
    # it never recovered, which meets none.
    minus_one_is_undisrupted: bool = False
    # Measured on the harness's clocks: shown beside the trial's harness timing error.
    timed: bool = False

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise PghaConfigError.invalid(
                "metric name", self.name, "use lower_case letters, digits and underscores"
            )
        if self.unit not in UNITS:
            raise PghaConfigError.invalid(f"unit of {self.name}", self.unit, f"use one of {UNITS}")
        for what, text in (("meaning", self.meaning), ("precision", self.precision)):
            if not text.strip() or "\n" in text:
                raise PghaConfigError.invalid(
                    f"{what} of {self.name}", text, "write one non-empty line"
                )


class MetricCatalog:
    """Metrics by name; registering the same definition twice is harmless, a different
    one under a taken name is an error."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def register(self, metric: Metric) -> Metric:
        known = self._metrics.get(metric.name)
        if known is not None and known != metric:
            raise PghaConfigError(
                f"metric {metric.name!r} is already in the catalog ({known.group}: "
                f"{known.meaning}); give the new one another name"
            )
        self._metrics[metric.name] = metric
        return metric

    def snapshot(self) -> dict[str, Metric]:
        return dict(self._metrics)

    def restore(self, snapshot: dict[str, Metric]) -> None:
        self._metrics = dict(snapshot)

    def get(self, name: str) -> Metric | None:
        return self._metrics.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._metrics

    def __iter__(self) -> Iterator[Metric]:
        # In registration order: each module lists its headline figures first.
        return iter(list(self._metrics.values()))

    def names(self) -> frozenset[str]:
        return frozenset(self._metrics)

    def suggestion(self, name: str) -> str:
        """ "did you mean ...?" for a misspelt name, else the list of valid names."""
        close = difflib.get_close_matches(name, sorted(self._metrics), n=3)
        if close:
            return f"did you mean {', '.join(close)}?"
        return f"valid: {', '.join(sorted(self._metrics))}"

    def unit_of(self, name: str) -> str | None:
        metric = self._metrics.get(name)
        return metric.unit if metric else None

    def markdown_table(self) -> str:
        """The README's metric table."""
        rows = [
            "| metric | unit | what it is | precision |",
            "|---|---|---|---|",
            *(f"| `{m.name}` | {m.unit} | {m.group}: {m.meaning} | {m.precision} |" for m in self),
        ]
        return "\n".join(rows)


CATALOG = MetricCatalog()


def register_metric(
    name: str,
    *,
    unit: str,
    meaning: str,
    precision: str,
    group: str,
    minus_one_is_undisrupted: bool = False,
    timed: bool = False,
) -> Metric:
    """Add a metric to the catalog (see Metric)."""
    return CATALOG.register(
        Metric(name, unit, meaning, precision, group, minus_one_is_undisrupted, timed)
    )
