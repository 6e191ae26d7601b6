"""A trial's figures by their catalog names: a read-only mapping that also reads as
attributes (``result.metrics.writes_resume_ms``), so SLO checks, JSON and user code
all see the same names."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeAlias

from pytest_pgha.metrics.catalog import CATALOG

Measured: TypeAlias = int | float | None
# Shown first in a repr; the rest follow in the catalog's order.
HEADLINE = ("writes_resume_ms", "recovery_ms", "reads_resume_ms", "unavailable_ms")


class MetricValues(Mapping[str, Measured]):
    def __init__(self, values: Mapping[str, Measured]) -> None:
        self._values = dict(values)

    def __getitem__(self, name: str) -> Measured:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Measured:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            known = "" if name in CATALOG else f"; {CATALOG.suggestion(name)}"
            raise AttributeError(
                f"this trial has no metric {name!r}{known} (it measured: {', '.join(self._values)})"
            ) from None

    def to_json(self) -> dict[str, Measured]:
        return dict(self._values)

    def __repr__(self) -> str:
        shown = [n for n in HEADLINE if n in self._values]
        rest = len(self._values) - len(shown)
        figures = ", ".join(f"{n}={self._values[n]!r}" for n in shown)
        more = f", ... {rest} more" if rest else ""
        return f"MetricValues({figures}{more})"
