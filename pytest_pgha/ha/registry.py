"""HA managers by kind. The scenario builds its manager from here (`ha=` option); a
plugin adds its own with `HA_MANAGERS.register(kind, factory)`, or in the
`pytest_pgha_add_ha_managers` hook."""

from __future__ import annotations

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.ha.base import HAFactory, HAManager, HAOptions
from pytest_pgha.pluggable import KindRegistry
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.timeline import Timeline


class HARegistry(KindRegistry[HAFactory]):
    what = "HA manager"

    def create(
        self,
        kind: str,
        cluster: Cluster,
        proxy: Proxy | None,
        timeline: Timeline,
        options: HAOptions,
    ) -> HAManager:
        manager = self.get(kind)(cluster, proxy, timeline, options)
        if getattr(manager, "kind", None) != kind:
            raise PghaConfigError(
                f"the {kind!r} HA manager's factory built one of kind "
                f"{getattr(manager, 'kind', None)!r}: set its kind to {kind!r}"
            )
        return manager


def _scripted(
    cluster: Cluster, proxy: Proxy | None, timeline: Timeline, options: HAOptions
) -> HAManager:
    from pytest_pgha.ha.scripted import ScriptedHA

    return ScriptedHA(cluster, proxy, timeline, detect=options.detect, rewire=options.rewire)


HA_MANAGERS = HARegistry()
HA_MANAGERS.register("scripted", _scripted)
