"""The Allure results of a real trial read like a report: the phases and the SLO
verdicts as steps, clean parameters, the run's environment and failure categories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugin_helpers import TRIAL, output, run

INNER = f"""
import pytest

DETECTION = [pytest.param(("tuple", 1), id="as-a-tuple")]


@pytest.mark.slo(workers_lost="== 0", writes_resume_ms="<= 1")
@pytest.mark.parametrize("detection", DETECTION)
def test_trial(pgha_scenario, detection):
    pgha_scenario.failover({TRIAL})
"""


def test_a_trial_reads_as_a_report(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makepyfile(test_inner=INNER)
    results = pytester.path / "allure-results"
    result = run(pytester, run_basedir, "--pgha-proxies=direct", f"--alluredir={results}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output(result)  # writes_resume_ms <= 1

    (test,) = [
        json.loads(path.read_text())
        for path in results.glob("*-result.json")
        if json.loads(path.read_text())["name"].startswith("test_trial")
    ]
    steps = [step["name"] for step in test["steps"]]
    phases = [name.split(" at +")[0] for name in steps if " at +" in name]
    assert phases[:2] == ["inject", "detect"] and "promote_done" in phases, steps
    verdicts = {
        s["name"].split(":")[0]: s["status"] for s in test["steps"] if s["name"].startswith("SLO")
    }
    assert verdicts == {"SLO workers_lost": "passed", "SLO writes_resume_ms": "failed"}, steps

    shown = {p["name"]: p["value"] for p in test["parameters"] if p.get("mode") != "hidden"}
    assert shown["proxy"] == "direct" and shown["ha"] == "scripted", shown
    assert "pgha_proxy_kind" not in shown and "detection" not in shown, shown

    environment = (results / "environment.properties").read_text()
    assert "postgresql=" in environment and "cores=" in environment, environment
    categories = json.loads((results / "categories.json").read_text())
    assert [c["name"] for c in categories][:2] == [
        "SLO violations",
        "Harness errors: runner too busy",
    ]
    assert test["status"] == "failed" and "SLOs failed" in test["statusDetails"]["message"]


DURABILITY = """
import pytest
from pytest_pgha import pgha_cluster_factory

pgha_cluster = pgha_cluster_factory(replicas=1)


@pytest.mark.slo(lost_acked_writes="== 0")
def test_durability(pgha_scenario):
    pgha_scenario.durability(fault="kill_primary", warmup_s=0.5, settle_s=0.5, rate=500)
"""


def test_a_durability_trial_attaches_its_verdicts_history_and_chart(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(test_inner=DURABILITY)
    results = pytester.path / "allure-results"
    result = run(pytester, run_basedir, "--pgha-proxies=direct", f"--alluredir={results}")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), output(result)
    (test,) = [json.loads(p.read_text()) for p in results.glob("*-result.json")]
    attachments = {a["name"]: results / a["source"] for a in test["attachments"]}
    assert {"verdicts.json", "ledger.log", "commits chart"} <= set(attachments), attachments
    verdicts = json.loads(attachments["verdicts.json"].read_text())
    ledger_lines = attachments["ledger.log"].read_text().splitlines()
    assert sum(verdicts.values()) == len(ledger_lines) > 100
    history = attachments["history.edn (Jepsen set workload)"].read_text().splitlines()
    assert history[0].startswith("{:process ") and ":type :invoke, :f :add" in history[0]
    assert history[-1].startswith("{:process -1, :type :ok, :f :read, :value #{")
    assert attachments["commits chart"].read_bytes()[:4] == b"\x89PNG"
    shown = {p["name"]: p["value"] for p in test["parameters"] if p.get("mode") != "hidden"}
    assert shown["fault"] == "kill_primary", shown
