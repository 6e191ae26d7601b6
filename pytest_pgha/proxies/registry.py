"""Proxy kinds by name; built-in adapters are imported only when used. A plugin adds its
own adapter with `PROXIES.register(kind, AdapterClass)`, or in the
`pytest_pgha_add_proxies` hook."""

from __future__ import annotations

import importlib

from pytest_pgha.pluggable import KindRegistry
from pytest_pgha.proxies.base import Proxy

# A Proxy subclass, or where to import a built-in one from (module, class name).
ProxyEntry = type[Proxy] | tuple[str, str]


class ProxyRegistry(KindRegistry[ProxyEntry]):
    what = "proxy kind"

    def adapter(self, kind: str) -> type[Proxy]:
        entry = self.get(kind)
        if isinstance(entry, tuple):
            module, name = entry
            entry = getattr(importlib.import_module(module), name)
        if not (isinstance(entry, type) and issubclass(entry, Proxy)):
            raise TypeError(f"the adapter of proxy kind {kind!r} is not a Proxy subclass")
        return entry


PROXIES = ProxyRegistry()
for _kind, _class in {
    "direct": "DirectProxy",
    "pgbouncer": "PgBouncerProxy",
    "haproxy": "HAProxyProxy",
    "pgpool": "PgpoolProxy",
    "proxysql": "ProxySQLProxy",
    "pgdog": "PgDogProxy",
    "pgcat": "PgCatProxy",
}.items():
    PROXIES.register(_kind, (f"pytest_pgha.proxies.{_kind}", _class))
BUILT_IN_KINDS = PROXIES.kinds()


def adapter(kind: str) -> type[Proxy]:
    return PROXIES.adapter(kind)
