"""The durability scenario's plan and result, without servers: options are checked
before anything starts, and the result has every scenario's shape."""

from __future__ import annotations

import pytest

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.faults.commits import COMMIT_FAULTS
from pytest_pgha.lag import LagSummary
from pytest_pgha.metrics import CATALOG, compute_failover_metrics
from pytest_pgha.metrics.durability import figures, resolve
from pytest_pgha.metrics.values import MetricValues
from pytest_pgha.scenarios.durability import DurabilityPlan, DurabilityResult
from pytest_pgha.scenarios.protocol import plan_from
from pytest_pgha.timeline import Event
from pytest_pgha.workload.ledger import LedgerEntry
from pytest_pgha.workload.records import Outcome, TxRecord

INJECT = Event("inject", 1_000_000, 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fault": "kill_primry"}, "use one of none, kill_primary"),
        ({"rounds": 0}, "rounds"),
        ({"hold_s": -1}, "hold_s"),
        ({"session_settings": "synchronous_commit=local"}, "give a mapping"),
        ({"workers": 0}, "workers"),
        ({"detect_delay_s": 100}, "detect_delay_s"),
        ({"ha": "patroniX"}, "patroni|scripted"),
    ],
)
def test_bad_options_fail_before_anything_starts(options, message):
    with pytest.raises(PghaConfigError, match=message):
        DurabilityPlan(**options)


def test_an_unknown_option_gets_did_you_mean():
    with pytest.raises(PghaConfigError, match="did you mean 'rounds'"):
        plan_from(DurabilityPlan, "durability", {"round": 3})


def test_every_fault_says_what_it_does():
    assert all(fault.meaning for fault in COMMIT_FAULTS.values())
    assert {"kill_primary", "crash_restart", "terminate_sync_waits"} <= set(COMMIT_FAULTS)


def test_a_durability_result_has_every_scenarios_shape():
    record = TxRecord(0, 0, 900_000, 950_000, Outcome.OK)
    entries = [LedgerEntry(record, 1, 10, 0, 5432, 1, 1)]
    resolved = resolve(entries, set(), {10: "committed"})
    lag = LagSummary(3.0, 2.0, 10)
    result = DurabilityResult(
        plan=DurabilityPlan(session_settings={"synchronous_commit": "local"}),
        proxy_kind="direct",
        trial=1,
        entries=entries,
        resolved=resolved,
        events=[INJECT],
        inject=INJECT,
        figures=figures(resolved, inject_us=INJECT.epoch_us),
        write_side=compute_failover_metrics([], [INJECT], inject_us=INJECT.epoch_us, workers=8),
        judged_on="node1",
        present=set(),
        standby_views=[],
        harness_lag=lag,
        workload_lag=lag,
    )
    assert isinstance(result.metrics, MetricValues) and set(result.metrics) <= CATALOG.names()
    assert result.metrics.lost_acked_writes == 1 and result.metrics.txid_status_traps == 1
    assert result.parameters["session_settings"] == "synchronous_commit=local"
    assert repr(result).startswith("<durability proxy=direct") and "\n" not in repr(result)
    assert result.details()["verdicts"]["lost"] == 1
    attachments = result.attachments()
    assert attachments["ledger.log"].count("\n") == 1
    assert '"verdict": "lost"' in attachments["lost, phantom and unknown transactions.json"]
    assert result.chart_series()["lost"] == [950_000]
