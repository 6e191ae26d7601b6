"""What every scenario's result offers, whatever the scenario: its figures under the
catalog's names, its parameters as data, the logs it recorded, and a short repr. The
plugin records every result through this one interface (Allure, summary, SLOs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics.values import Measured, MetricValues
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.timeline import Event
from pytest_pgha.workload.records import TxRecord


class ScenarioResult(Protocol):
    scenario: ClassVar[str]
    # Figures plugins computed from the trial (pytest_pgha_trial_metrics).
    added_metrics: dict[str, Measured]

    @property
    def metrics(self) -> MetricValues:
        """The figures SLOs bound, by catalog name."""

    @property
    def parameters(self) -> Mapping[str, object]:
        """What the trial was (proxy, HA manager, fault, ...), as plain data."""

    @property
    def records(self) -> Sequence[TxRecord]:
        """The transactions the chart shows (empty when the scenario has none)."""

    @property
    def samples(self) -> Sequence[ProxySample]:
        """The proxy's view during the trial (empty when not sampled)."""

    @property
    def events(self) -> Sequence[Event]:
        """The timeline: the fault, each phase of the HA manager."""

    @property
    def inject(self) -> Event:
        """The fault's event: time zero of every figure."""

    @property
    def bucket_ms(self) -> int:
        """The resolution of the records' chart and of the resume figures."""

    def details(self) -> dict[str, Any]:
        """Everything else the report keeps (lag summaries, histograms, attempts)."""

    def attachments(self) -> Mapping[str, str]:
        """Named text files the report attaches besides the common ones (a durability
        trial's verdict lists, its ledger log); empty for most scenarios."""


def short_repr(result: ScenarioResult) -> str:
    parameters = ", ".join(f"{k}={v}" for k, v in result.parameters.items())
    return f"<{result.scenario} {parameters}: {result.metrics!r}>"


PlanT = TypeVar("PlanT")


def plan_from(plan_class: type[PlanT], scenario: str, options: Mapping[str, Any]) -> PlanT:
    """A scenario's plan from the keyword options a test gave, or one clear error that
    names the option, suggests the closest known one and lists them all."""
    assert is_dataclass(plan_class)
    known = [f.name for f in fields(plan_class)]
    unknown = [name for name in options if name not in known]
    if unknown:
        raise PghaConfigError.unknown(f"{scenario}()", unknown, known)
    try:
        return plan_class(**options)
    except TypeError as error:
        raise PghaConfigError(f"{scenario}(): {error}") from None


def check_load(scenario: str, *, workers: int, rate: float | None) -> None:
    """The options every scenario's workload shares, checked the same way."""
    if not isinstance(workers, int) or workers < 1:
        raise PghaConfigError.invalid(f"{scenario} workers", workers, "use a whole number >= 1")
    if rate is not None and not rate > 0:
        raise PghaConfigError.invalid(
            f"{scenario} rate", rate, "use transactions per second > 0, or None"
        )


def check_window(scenario: str, *, warmup_s: float, settle_s: float, least_s: float) -> None:
    if warmup_s < least_s or settle_s < least_s:
        raise PghaConfigError.invalid(
            f"{scenario} warmup_s/settle_s",
            (warmup_s, settle_s),
            f"give the workload at least {least_s:g} s before and after the fault",
        )
