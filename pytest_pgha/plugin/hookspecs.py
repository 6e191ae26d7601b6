"""Hooks through which a conftest.py or another plugin adds to pytest-pgha, called once
per run (and per xdist worker) before the options are read. Registrations last for the
run: the plugin restores the registries at its end."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_pgha.ha.registry import HARegistry
from pytest_pgha.metrics.catalog import MetricCatalog
from pytest_pgha.metrics.values import Measured
from pytest_pgha.proxies.registry import ProxyRegistry
from pytest_pgha.scenarios.protocol import ScenarioResult


def pytest_pgha_add_metrics(catalog: MetricCatalog) -> None:
    """Register metrics (``catalog.register(Metric(...))``) that SLOs may then bound."""


def pytest_pgha_add_ha_managers(registry: HARegistry) -> None:
    """Register HA managers: ``registry.register(kind, factory)``, where
    ``factory(cluster, proxy, timeline, options)`` returns an object with the
    HAManager protocol of pytest_pgha.ha.base and that kind; trials pick it with ha=kind."""


def pytest_pgha_add_proxies(registry: ProxyRegistry) -> None:
    """Register proxy adapters: ``registry.register(kind, ProxySubclass)``; the kind then
    joins --pgha-proxies and the default parametrization."""


def pytest_pgha_trial_metrics(result: ScenarioResult) -> Mapping[str, Measured] | None:
    """Figures of your own, computed from a finished trial (its records, samples,
    events, metrics), under names registered in the catalog; they join result.metrics
    before the SLOs are judged. Return None when the trial is not yours to measure."""
