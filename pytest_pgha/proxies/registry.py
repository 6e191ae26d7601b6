"""Proxy kinds by name; adapters are imported only when used."""

from __future__ import annotations

import importlib

from pytest_pgha.proxies.base import Proxy

ADAPTERS: dict[str, tuple[str, str]] = {
    "direct": ("pytest_pgha.proxies.direct", "DirectProxy"),
    "pgbouncer": ("pytest_pgha.proxies.pgbouncer", "PgBouncerProxy"),
    "haproxy": ("pytest_pgha.proxies.haproxy", "HAProxyProxy"),
    "pgpool": ("pytest_pgha.proxies.pgpool", "PgpoolProxy"),
    "proxysql": ("pytest_pgha.proxies.proxysql", "ProxySQLProxy"),
    "pgdog": ("pytest_pgha.proxies.pgdog", "PgDogProxy"),
    "pgcat": ("pytest_pgha.proxies.pgcat", "PgCatProxy"),
}


def adapter(kind: str) -> type[Proxy]:
    if kind not in ADAPTERS:
        raise KeyError(f"unknown proxy kind {kind!r}; kinds are {', '.join(ADAPTERS)}")
    module, name = ADAPTERS[kind]
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Proxy)):
        raise TypeError(f"{module}.{name} is not a Proxy adapter")
    return cls
