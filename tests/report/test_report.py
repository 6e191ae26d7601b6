"""The failover chart, the Allure attachments and the run summary, on synthetic data."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from pytest_pgha.proxies.samples import PROBE_FAILED, ProxySample
from pytest_pgha.report import allure_report
from pytest_pgha.report.chart import render_failover_chart
from pytest_pgha.report.summary import (
    SummaryEntry,
    format_terminal_summary,
    from_workeroutput,
    merge_entries,
    read_entries,
    slo_counts,
    to_workeroutput,
    write_entries,
    write_summary,
)
from pytest_pgha.timeline import Event
from pytest_pgha.workload.records import Outcome, TxRecord, read_log

INJECT_US = 1_700_000_000_000_000
WORKERS = 8
OUTAGE_US = (400_000, 1_600_000)  # like the seed: writes stop at +0.4 s, resume at +1.6 s
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def seed_like_records(
    before_s: float = 5.0, after_s: float = 5.0, period_us: int = 400
) -> list[TxRecord]:
    """8 workers at ~2500 tx/s each; one error per worker when the primary dies, a few
    failed reconnects during the outage, clean resumption afterwards."""
    records: list[TxRecord] = []
    start, stop = INJECT_US - int(before_s * 1e6), INJECT_US + int(after_s * 1e6)
    for worker in range(WORKERS):
        for txn_no, begin in enumerate(range(start + worker * 37, stop, period_us)):
            rel = begin - INJECT_US
            if rel < OUTAGE_US[0] or rel >= OUTAGE_US[1]:
                records.append(TxRecord(worker, txn_no, begin, begin + 300, Outcome.OK))
            elif rel < OUTAGE_US[0] + period_us:
                outcome = Outcome.INDETERMINATE if worker == 0 else Outcome.FAILED
                records.append(TxRecord(worker, txn_no, begin, begin + 300, outcome, "57P01", True))
            elif worker < 3 and rel % 300_000 < period_us:
                records.append(
                    TxRecord(
                        worker, txn_no, begin, begin + 100, Outcome.CONNECT_FAILED, "08006", True
                    )
                )
    return records


def seed_like_samples() -> list[ProxySample]:
    samples = []
    for tick in range(-50, 51):
        rel_us = tick * 100_000
        writer = "127.0.0.1:5433" if rel_us < 1_500_000 else "127.0.0.1:5434"
        in_use = 0 if OUTAGE_US[0] <= rel_us < OUTAGE_US[1] else 5 + tick % 4
        state = PROBE_FAILED if tick % 13 == 0 else 1
        samples.append(ProxySample(INJECT_US + rel_us, writer, state, -1 if state < 0 else in_use))
    return samples


def seed_like_events() -> list[Event]:
    return [
        Event("inject", INJECT_US, 0),
        Event("detect", INJECT_US + 1_000_000, 0),
        Event("promote_done", INJECT_US + 1_450_000, 0),
        Event("rewire_done", INJECT_US + 1_500_000, 0),
    ]


def render(tmp_path: Path, records: list[TxRecord], samples: list[ProxySample]) -> Path:
    return render_failover_chart(
        records,
        samples,
        seed_like_events(),
        inject_us=INJECT_US,
        bucket_ms=100,
        title="synthetic SIGKILL of the primary",
        path=tmp_path / "charts" / "failover.png",
    )


def assert_readable_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 20_000
    pixels = mpimg.imread(str(path))
    rgb = pixels[..., :3]
    not_white = np.any(rgb < 0.95, axis=-1).mean()
    # Axes, labels and data cover a few percent of the canvas; a blank figure is ~0.
    assert not_white > 0.03
    # Packed to one integer per pixel: np.unique over rows is slow on a 1.3 Mpx image.
    packed = (rgb * 255).astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)
    assert len(np.unique(packed)) > 20


# -- chart ---------------------------------------------------------------------


def test_chart_from_seed_like_run(tmp_path: Path) -> None:
    path = render(tmp_path, seed_like_records(), seed_like_samples())
    assert path == tmp_path / "charts" / "failover.png"
    assert_readable_png(path)


def test_chart_without_samples_or_post_inject_records(tmp_path: Path) -> None:
    before_inject = [r for r in seed_like_records(after_s=0.0) if r.end_us < INJECT_US]
    assert_readable_png(render(tmp_path, before_inject, []))


def test_chart_with_nothing_at_all(tmp_path: Path) -> None:
    path = render_failover_chart(
        [], [], [], inject_us=INJECT_US, bucket_ms=100, title="empty", path=tmp_path / "e.png"
    )
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_chart_of_200k_records_is_fast(tmp_path: Path) -> None:
    records = seed_like_records(before_s=6.5, after_s=6.5)
    assert len(records) > 200_000
    started = time.perf_counter()
    render(tmp_path, records, seed_like_samples())
    # Target is < 1 s; the bound leaves room for a loaded CI machine.
    assert time.perf_counter() - started < 3.0


def test_chart_rejects_nonpositive_bucket(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bucket_ms"):
        render_failover_chart(
            [], [], [], inject_us=0, bucket_ms=0, title="x", path=tmp_path / "x.png"
        )


# -- samples -------------------------------------------------------------------


def test_proxy_sample_json_round_trip() -> None:
    sample = ProxySample(INJECT_US, "127.0.0.1:5434", 1, 6)
    assert json.loads(json.dumps(sample.to_json())) == sample.to_json()
    assert ProxySample.from_json(sample.to_json()) == sample
    assert ProxySample.from_json({"epoch_us": 1, "writer": None, "writer_state": -1}).writer is None


# -- summary -------------------------------------------------------------------


def slo(
    metric: str, measured: float | None, op: str, bound: float, passed: bool
) -> dict[str, object]:
    return {"metric": metric, "measured": measured, "op": op, "bound": bound, "passed": passed}


def worker_entries() -> tuple[list[SummaryEntry], list[SummaryEntry]]:
    gw0 = [
        SummaryEntry(
            "tests/proxies/test_failover.py::test_kill[proxysql]",
            {"writes_resume_ms": 1600.0, "error_count_post_inject": 8},
            [
                slo("writes_resume_ms", 1600.0, "<=", 2000, True),
                slo("lost_commits", 0, "==", 0, True),
            ],
            {"proxy": "proxysql", "workers": 8},
        )
    ]
    gw1 = [
        SummaryEntry(
            "tests/proxies/test_failover.py::test_kill[direct]",
            {"writes_resume_ms": None},
            [slo("writes_resume_ms", None, "<=", 2000, False)],
            {"proxy": "direct"},
        )
    ]
    return gw0, gw1


def test_summary_merges_workers_through_workeroutput(tmp_path: Path) -> None:
    gw0, gw1 = worker_entries()
    # What xdist would carry: plain strings in config.workeroutput.
    workeroutput = {"gw1": to_workeroutput(gw1), "gw0": to_workeroutput(gw0)}
    merged = merge_entries(*(from_workeroutput(text) for text in workeroutput.values()))
    assert [e.nodeid for e in merged] == [gw1[0].nodeid, gw0[0].nodeid]  # sorted by node id
    assert merged == sorted(gw0 + gw1, key=lambda e: e.nodeid)
    assert slo_counts(merged) == (2, 1)
    assert from_workeroutput("") == []


def test_worker_file_round_trip(tmp_path: Path) -> None:
    gw0, _ = worker_entries()
    path = write_entries(gw0, tmp_path / "gw0.json")
    assert isinstance(json.loads(path.read_text()), list)
    assert read_entries(path) == gw0


def test_write_summary_is_complete_and_atomic(tmp_path: Path) -> None:
    gw0, gw1 = worker_entries()
    path = write_summary(merge_entries(gw0, gw1), tmp_path / "out" / "summary.json")
    summary = json.loads(path.read_text())
    assert set(summary) == {"generated_at", "tests", "slo"}
    assert summary["slo"] == {"passed": 2, "failed": 1}
    assert [SummaryEntry.from_json(t) for t in summary["tests"]] == merge_entries(gw0, gw1)
    # No temporary file left beside the summary.
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]


def test_terminal_summary_lines() -> None:
    gw0, gw1 = worker_entries()
    assert format_terminal_summary(merge_entries(gw0, gw1)) == [
        "FAIL tests/proxies/test_failover.py::test_kill[direct] writes_resume_ms n/a <= 2000",
        "PASS tests/proxies/test_failover.py::test_kill[proxysql] writes_resume_ms 1600 <= 2000",
        "PASS tests/proxies/test_failover.py::test_kill[proxysql] lost_commits 0 == 0",
    ]


# -- allure --------------------------------------------------------------------


def test_allure_is_off_in_a_plain_run(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if getattr(request.config.option, "allure_report_dir", None):
        pytest.skip("this run itself writes allure results")
    assert allure_report.allure_enabled() is False
    attached = allure_report.attach_failover_report(
        metrics_json={"writes_resume_ms": 1600},
        records=seed_like_records(before_s=0.1, after_s=0.1),
        samples=seed_like_samples(),
        events=seed_like_events(),
        chart_path=tmp_path / "missing.png",
        parameters={"proxy": "proxysql"},
    )
    assert attached is False
    allure_report.attach_text("log", "text")
    allure_report.attach_file(tmp_path / "missing.log")


def test_records_csv_columns() -> None:
    record = TxRecord(3, 7, 10, 20, Outcome.FAILED, "25006", False)
    lines = allure_report.records_csv([record]).splitlines()
    assert lines == [
        "client_id,txn_no,start_us,end_us,outcome,sqlstate,connection_broken",
        "3,7,10,20,failed,25006,False",
    ]


INNER_TEST = """
from pathlib import Path

from pytest_pgha.report.allure_report import (
    allure_enabled, attach_failover_report, attach_file, attach_text,
)
from pytest_pgha.report.chart import render_failover_chart
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.timeline import Event
from pytest_pgha.workload.records import Outcome, TxRecord


def test_failover(tmp_path):
    assert allure_enabled()
    inject = 1_000_000_000
    records = [TxRecord(c, n, inject + n * 1000, inject + n * 1000 + 300, Outcome.OK)
               for c in range(2) for n in range(-500, 500)]
    samples = [ProxySample(inject + i * 100_000, "h:1", 1, 2) for i in range(-5, 5)]
    events = [Event("inject", inject, 0), Event("promote_done", inject + 200_000, 0)]
    chart = render_failover_chart(records, samples, events, inject_us=inject, bucket_ms=100,
                                  title="inner", path=tmp_path / "chart.png")
    log = tmp_path / "postgres.log"
    log.write_text("LOG:  database system is ready to accept connections")
    assert attach_failover_report(
        metrics_json={"writes_resume_ms": 200}, records=records, samples=samples,
        events=events, chart_path=chart, parameters={"proxy": "proxysql", "workers": 2},
    )
    attach_text("note", "hello")
    attach_file(log)
"""


def test_attachments_land_in_alluredir(pytester: pytest.Pytester) -> None:
    outer_enabled = allure_report.allure_enabled()
    pytester.makepyfile(test_inner=INNER_TEST)
    results = pytester.path / "allure-results"
    outcome = pytester.runpytest(
        "-p", "no:randomly", "-p", "no:pgha", "-p", "no:cacheprovider", "--alluredir", str(results)
    )
    outcome.assert_outcomes(passed=1)
    names = [p.name for p in results.iterdir()]
    assert any(n.endswith("-attachment.png") for n in names)
    assert any(n.endswith("-attachment.json") for n in names)
    assert any(n.endswith("-attachment.csv") for n in names)
    assert any(n.endswith("-attachment.txt") for n in names)
    (result_file,) = results.glob("*-result.json")
    result = json.loads(result_file.read_text())
    assert {p["name"]: p["value"] for p in result["parameters"]} == {
        "proxy": "proxysql",  # plain text, not allure's repr
        "workers": "2",
    }
    attachments = {a["name"] for a in result["attachments"]}
    assert {
        "metrics",
        "transactions.csv",
        "transactions.log (pgbench -l)",
        "timeline",
        "proxy samples",
        "failover chart",
    } <= attachments
    assert {"note", "postgres.log"} <= attachments
    (log_source,) = [
        a["source"] for a in result["attachments"] if a["name"].endswith("(pgbench -l)")
    ]
    logged = list(read_log(results / log_source))
    assert len(logged) == 2000 and all(r.outcome is Outcome.OK for r in logged)
    assert logged[0].latency_us == 300
    # The inner session unregistered its listener: the outer run is as it was.
    assert allure_report.allure_enabled() is outer_enabled


def test_timing_figures_carry_their_trials_timing_error() -> None:
    entry = SummaryEntry(
        "t::x",
        {"harness_lag_ms_max": 3.5, "workload_lag_ms_max": 7.25},
        [
            {"metric": "recovery_ms", "measured": 400, "op": "<=", "bound": 1200, "passed": True}
            | {"timed": True},
            {"metric": "workers_lost", "measured": 0, "op": "==", "bound": 0, "passed": True},
        ],
    )
    assert format_terminal_summary([entry]) == [
        "PASS t::x recovery_ms 400 <= 1200 (harness timing error <= 7.25 ms)",
        "PASS t::x workers_lost 0 == 0",
    ]
