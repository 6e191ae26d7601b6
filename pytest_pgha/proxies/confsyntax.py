"""Values as TOML / libconfig text, shared by the adapters that write such files."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.base import Backend, ProxySettings

_INTEGER = re.compile(r"-?\d+")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def scalar(value: str) -> str:
    """An option's text as a TOML (or libconfig) scalar: integers and booleans bare,
    anything else a quoted string."""
    if _INTEGER.fullmatch(value):
        return value
    if value.lower() in ("true", "false"):
        return value.lower()
    return json.dumps(value)


def quoted(value: str) -> str:
    return json.dumps(value)


def table_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def key_values(values: Mapping[str, str]) -> list[str]:
    return [f"{key} = {scalar(value)}" for key, value in values.items()]


def require_backend(settings: ProxySettings, name: str) -> Backend:
    """The backend called name; checked before a rewire changes anything."""
    for backend in settings.backends:
        if backend.name == name:
            return backend
    raise ProxyError(f"no backend {name!r}; backends are {[b.name for b in settings.backends]}")
