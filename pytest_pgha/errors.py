"""Errors that reach the user: each names the problem and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PghaError(Exception):
    """Base class of every error pytest-pgha raises on purpose."""


class PghaConfigError(PghaError):
    """An option, marker or factory argument that cannot work.

    The plugin turns it into a pytest usage error when it comes from the command line.
    """

    @classmethod
    def invalid(cls, option: str, value: object, fix: str) -> PghaConfigError:
        return cls(f"invalid {option}={value!r}: {fix}")

    @classmethod
    def unknown(cls, where: str, names: Iterable[str], known: Iterable[str]) -> PghaConfigError:
        """Unknown option names, each with its closest known one, and the known list."""
        choices = list(known)
        parts = []
        for name in names:
            close = difflib.get_close_matches(name, choices, n=1)
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return cls(f"{where}: unknown option {', '.join(parts)}; options: {', '.join(choices)}")


class BinaryNotFoundError(PghaError):
    """A program the stack needs is not installed."""

    @classmethod
    def nothing_found(
        cls, what: str, tried: Iterable[str], install_hint: str
    ) -> BinaryNotFoundError:
        places = "\n".join(f"  - {place}" for place in tried)
        return cls(f"{what} not found. Tried, in order:\n{places}\nFix: {install_hint}")


class ClusterError(PghaError):
    """PostgreSQL did something the harness did not expect (it failed to start, ...)."""


class ProxyError(PghaError):
    """A proxy failed to start or to accept its configuration."""


class RunnerTooBusy(PghaError):
    """The harness's own timing error was too large to judge the stack by: a verdict
    about the runner, never about the stack."""
