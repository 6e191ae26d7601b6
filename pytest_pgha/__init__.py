"""pytest-pgha: measure whether a PostgreSQL HA stack keeps its promises."""

__version__ = "0.1.0"
