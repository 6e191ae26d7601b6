"""A registry of named, pluggable things (HA managers, proxy adapters): one error for an
unknown name, with a "did you mean", and a snapshot a test run restores at its end so
that what one run's plugins registered does not leak into the next."""

from __future__ import annotations

import difflib
from typing import ClassVar, Generic, TypeVar

from pytest_pgha.errors import PghaConfigError

T = TypeVar("T")


class KindRegistry(Generic[T]):
    what: ClassVar[str] = "entry"

    def __init__(self) -> None:
        self._entries: dict[str, T] = {}

    def register(self, kind: str, entry: T) -> None:
        key = kind.lower()
        if not key.isidentifier():
            raise PghaConfigError.invalid(
                f"{self.what} kind", kind, "use letters, digits and underscores"
            )
        self._entries[key] = entry

    def kinds(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, kind: object) -> bool:
        return isinstance(kind, str) and kind.lower() in self._entries

    def canonical(self, kind: str) -> str:
        """The registered spelling of kind (kinds are case-insensitive), or a clear error."""
        key = kind.lower()
        if key in self._entries:
            return key
        close = difflib.get_close_matches(key, list(self._entries), n=2)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise PghaConfigError(
            f"unknown {self.what} {kind!r}; {hint}known: {', '.join(self._entries)}"
        )

    def get(self, kind: str) -> T:
        return self._entries[self.canonical(kind)]

    def snapshot(self) -> dict[str, T]:
        return dict(self._entries)

    def restore(self, snapshot: dict[str, T]) -> None:
        self._entries = dict(snapshot)
