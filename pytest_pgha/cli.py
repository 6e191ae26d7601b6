"""The `pgha` command: `pgha doctor`, `pgha cleanup` and `pgha metrics`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_pgha import doctor
from pytest_pgha.metrics import CATALOG
from pytest_pgha.sandbox.context import default_base_dir, reap_orphans


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgha", description="pytest-pgha's helper commands")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "doctor", help="list the stack components found and how to install the missing ones"
    )
    cleanup = commands.add_parser(
        "cleanup",
        help="stop processes and remove directories that killed runs left behind, and "
        "the runs kept with --pgha-keep",
    )
    cleanup.add_argument(
        "--basedir",
        type=Path,
        default=None,
        help="sandbox base directory (default: $PGHA_BASEDIR, /dev/shm/pgha)",
    )
    cleanup.add_argument(
        "--all",
        action="store_true",
        help="also what live runs own (stop every pytest-pgha sandbox)",
    )
    metrics = commands.add_parser(
        "metrics", help="print the metric catalog as a Markdown table (README.md holds it)"
    )
    metrics.add_argument(
        "--update",
        type=Path,
        metavar="FILE",
        help="rewrite the table between <!-- metrics --> and <!-- /metrics --> in FILE",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        text, code = doctor.report(doctor.findings())
        print(text)
        return code
    if args.command == "metrics":
        return _metrics(args.update)
    base = args.basedir or default_base_dir()
    if not base.exists():
        print(f"nothing to clean: {base} does not exist")
        return 0
    # Asked for explicitly: the runs kept with --pgha-keep go too.
    print(f"{base}: {reap_orphans(base, everything=args.all, kept=True)}")
    return 0


def _metrics(update: Path | None) -> int:
    table = CATALOG.markdown_table()
    if update is None:
        print(table)
        return 0
    text = update.read_text()
    start, end = "<!-- metrics -->\n", "\n<!-- /metrics -->"
    if start not in text or end not in text:
        print(f"{update} has no {start.strip()} ... {end.strip()} markers", file=sys.stderr)
        return 2
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    update.write_text(f"{head}{start}{table}{end}{tail}")
    print(f"{update}: metric table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
