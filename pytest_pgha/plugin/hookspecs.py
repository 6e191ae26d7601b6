"""Hooks through which a conftest.py or another plugin adds to pytest-pgha, called once
per run (and per xdist worker) before the options are read. Registrations last for the
run: the plugin restores the registries at its end."""

from __future__ import annotations

from pytest_pgha.ha.registry import HARegistry
from pytest_pgha.metrics.catalog import MetricCatalog
from pytest_pgha.proxies.registry import ProxyRegistry


def pytest_pgha_add_metrics(catalog: MetricCatalog) -> None:
    """Register metrics (``catalog.register(Metric(...))``) that SLOs may then bound."""


def pytest_pgha_add_ha_managers(registry: HARegistry) -> None:
    """Register HA managers: ``registry.register(kind, factory)``, where
    ``factory(cluster, proxy, timeline, options)`` returns an object with the
    HAManager protocol of pytest_pgha.ha.base and that kind; trials pick it with ha=kind."""


def pytest_pgha_add_proxies(registry: ProxyRegistry) -> None:
    """Register proxy adapters: ``registry.register(kind, ProxySubclass)``; the kind then
    joins --pgha-proxies and the default parametrization."""
