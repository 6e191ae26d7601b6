"""pytest-pgha: measure whether a PostgreSQL HA stack keeps its promises.

The public API, importable from here (loaded on first use, so that importing one
package of pytest-pgha does not import them all):

    from pytest_pgha import pgha_cluster_factory, register_metric, HA_MANAGERS
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_PUBLIC: dict[str, str] = {
    # fixtures and topologies for conftest.py
    "pgha_cluster_factory": "pytest_pgha.plugin.cluster_fixtures",
    "topologies": "pytest_pgha.plugin.topologies",  # a module: ready-made clusters
    # results, figures and SLOs
    "TrialPlan": "pytest_pgha.scenarios.failover",
    "TrialResult": "pytest_pgha.scenarios.failover",
    "RestartPlan": "pytest_pgha.scenarios.restart",
    "RestartResult": "pytest_pgha.scenarios.restart",
    "ReplicaLossPlan": "pytest_pgha.scenarios.replica_loss",
    "ReplicaLossResult": "pytest_pgha.scenarios.replica_loss",
    "ScenarioResult": "pytest_pgha.scenarios.protocol",
    "MetricValues": "pytest_pgha.metrics.values",
    "Metric": "pytest_pgha.metrics.catalog",
    "CATALOG": "pytest_pgha.metrics.catalog",
    "register_metric": "pytest_pgha.metrics.catalog",
    "SloViolation": "pytest_pgha.slo.judge",
    # what plugs in
    "HAManager": "pytest_pgha.ha.base",
    "HAOptions": "pytest_pgha.ha.base",
    "DetectPolicy": "pytest_pgha.ha.base",
    "HA_MANAGERS": "pytest_pgha.ha.registry",
    "Proxy": "pytest_pgha.proxies.base",
    "ProxySettings": "pytest_pgha.proxies.base",
    "PROXIES": "pytest_pgha.proxies.registry",
    "NodeTransport": "pytest_pgha.cluster.transport",
    "ClusterObserver": "pytest_pgha.cluster.observer",
    # errors
    "PghaError": "pytest_pgha.errors",
    "PghaConfigError": "pytest_pgha.errors",
    "RunnerTooBusy": "pytest_pgha.errors",
}
__all__ = [
    "CATALOG",
    "HA_MANAGERS",
    "PROXIES",
    "ClusterObserver",
    "DetectPolicy",
    "HAManager",
    "HAOptions",
    "Metric",
    "MetricValues",
    "NodeTransport",
    "PghaConfigError",
    "PghaError",
    "Proxy",
    "ProxySettings",
    "ReplicaLossPlan",
    "ReplicaLossResult",
    "RestartPlan",
    "RestartResult",
    "RunnerTooBusy",
    "ScenarioResult",
    "SloViolation",
    "TrialPlan",
    "TrialResult",
    "pgha_cluster_factory",
    "register_metric",
    "topologies",
]

if TYPE_CHECKING:
    from pytest_pgha.cluster.observer import ClusterObserver
    from pytest_pgha.cluster.transport import NodeTransport
    from pytest_pgha.errors import PghaConfigError, PghaError, RunnerTooBusy
    from pytest_pgha.ha.base import DetectPolicy, HAManager, HAOptions
    from pytest_pgha.ha.registry import HA_MANAGERS
    from pytest_pgha.metrics.catalog import CATALOG, Metric, register_metric
    from pytest_pgha.metrics.values import MetricValues
    from pytest_pgha.plugin import topologies
    from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory
    from pytest_pgha.proxies.base import Proxy, ProxySettings
    from pytest_pgha.proxies.registry import PROXIES
    from pytest_pgha.scenarios.failover import TrialPlan, TrialResult
    from pytest_pgha.scenarios.protocol import ScenarioResult
    from pytest_pgha.scenarios.replica_loss import ReplicaLossPlan, ReplicaLossResult
    from pytest_pgha.scenarios.restart import RestartPlan, RestartResult
    from pytest_pgha.slo.judge import SloViolation


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_pgha' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if module.endswith(f".{name}") else getattr(loaded, name)
    globals()[name] = value
    return value
