"""Attach a failover test's evidence to the Allure report.

allure-pytest accepts attachments even without ``--alluredir`` and throws them away;
building a CSV of 200k transactions and a chart just to discard them is seconds per
test, so everything here first asks :func:`allure_enabled`.

Call these from the thread running the test: allure-pytest finds the test an
attachment belongs to through the calling thread.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.timeline import Event
from pytest_pgha.workload.records import TxRecord, write_log

CSV_COLUMNS = (
    "client_id",
    "txn_no",
    "start_us",
    "end_us",
    "outcome",
    "sqlstate",
    "connection_broken",
)
_TYPE_BY_SUFFIX = {
    ".log": "TEXT",
    ".txt": "TEXT",
    ".out": "TEXT",
    ".json": "JSON",
    ".csv": "CSV",
    ".png": "PNG",
    ".svg": "SVG",
    ".yaml": "YAML",
    ".yml": "YAML",
    ".xml": "XML",
    ".html": "HTML",
}


def allure_enabled() -> bool:
    """True when allure-pytest is writing results (``--alluredir`` was given)."""
    try:
        from allure_commons import plugin_manager

        # Imported by name: allure_pytest ships no type information.
        listener_module = importlib.import_module("allure_pytest.listener")
    except ImportError:
        return False
    listener_class: type = listener_module.AllureListener
    # allure-pytest registers its listener only when it has a results dir; without one
    # only the title/test helpers are registered and attachments go nowhere.
    return any(isinstance(plugin, listener_class) for plugin in plugin_manager.get_plugins())


TIMING_ERROR_KEYS = (
    "harness_lag_ms_max",
    "harness_lag_ms_p99",
    "workload_lag_ms_max",
    "workload_lag_ms_p99",
    "harness_lag",
    "workload_lag",
    "attempts",
    "first_attempt",
    "runner_too_busy",
)


def attach_failover_report(
    *,
    metrics_json: Mapping[str, Any],
    records: Sequence[TxRecord],
    samples: Sequence[ProxySample],
    events: Sequence[Event],
    chart_path: Path | None,
    parameters: Mapping[str, object],
) -> bool:
    """Attach metrics, transaction log, timeline, samples and chart; False if allure is off."""
    if not allure_enabled():
        return False
    import allure

    set_parameters(parameters)
    _attach_json("metrics", dict(metrics_json))
    timing = {k: metrics_json[k] for k in TIMING_ERROR_KEYS if k in metrics_json}
    if timing:
        # Beside the figures it qualifies: how late the harness itself ran.
        _attach_json("harness timing error", timing)
    allure.attach(
        records_csv(records),
        name="transactions.csv",
        attachment_type=allure.attachment_type.CSV,
    )
    allure.attach(
        records_pgbench_log(records),
        name="transactions.log (pgbench -l)",
        attachment_type=allure.attachment_type.TEXT,
    )
    _attach_json("timeline", [event.to_json() for event in events])
    if samples:
        _attach_json("proxy samples", [sample.to_json() for sample in samples])
    if chart_path is not None and chart_path.is_file():
        _attach_path(chart_path, "failover chart", attachment_type=allure.attachment_type.PNG)
    return True


def attach_text(name: str, text: str) -> None:
    """Attach ``text`` (a log excerpt, a config) as plain text when allure is on."""
    if not allure_enabled():
        return
    import allure

    allure.attach(text, name=name, attachment_type=allure.attachment_type.TEXT)


def attach_file(path: Path, name: str | None = None) -> None:
    """Attach a file (server log, proxy log); its suffix picks the attachment type."""
    if not allure_enabled() or not path.is_file():
        return
    import allure

    type_name = _TYPE_BY_SUFFIX.get(path.suffix.lower())
    if type_name is None:
        # Unknown suffix: keep the file's own extension so the browser can still offer it.
        _attach_path(path, name or path.name, extension=path.suffix.lstrip("."))
        return
    attachment_type = getattr(allure.attachment_type, type_name)
    _attach_path(path, name or path.name, attachment_type=attachment_type)


def records_csv(records: Iterable[TxRecord]) -> str:
    """The transaction log as CSV with a header row (``CSV_COLUMNS``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(
        (
            r.client_id,
            r.txn_no,
            r.start_us,
            r.end_us,
            r.outcome.value,
            r.sqlstate or "",
            r.connection_broken,  # "True"/"False", which pandas reads as bool
        )
        for r in records
    )
    return out.getvalue()


def records_pgbench_log(records: Iterable[TxRecord]) -> str:
    """The transaction log in pgbench's `-l` format (read back by records.read_log)."""
    out = io.StringIO()
    write_log(records, out)
    return out.getvalue()


def _attach_json(name: str, payload: object) -> None:
    import allure

    # default=str: metrics may carry enums or paths; a lossy string beats a lost report.
    body = json.dumps(payload, indent=2, default=str)
    allure.attach(body, name=name, attachment_type=allure.attachment_type.JSON)


def _attach_path(path: Path, name: str, **kind: Any) -> None:
    import allure

    # allure's Attach.file is unannotated; going through Any keeps mypy --strict quiet
    # without a type: ignore that would turn stale once allure adds annotations.
    attach: Any = allure.attach
    # allure copies the file into the results dir, so big logs are not read into memory.
    attach.file(str(path), name=name, **kind)


def attach_phases(events: Sequence[Event], inject: Event) -> None:
    """The trial's timeline as Allure steps: each event with its time after the fault
    (the fault itself, then detect, fence, decide, promote, rewire, follow)."""
    if not allure_enabled():
        return
    import allure

    for event in events:
        if event.epoch_us < inject.epoch_us:
            continue
        offset_ms = (event.epoch_us - inject.epoch_us) / 1000
        details = ", ".join(f"{k}={v}" for k, v in event.detail.items() if k != "lsns")
        title = f"{event.name} at +{offset_ms:.1f} ms" + (f" ({details})" if details else "")
        with allure.step(title):
            pass


class _Verdict(AssertionError):
    """Raised inside a failed SLO's step, so that Allure shows the step as failed."""


def attach_verdicts(verdicts: Sequence[Mapping[str, Any]]) -> None:
    """Each SLO verdict as an Allure step that passes or fails, with measured vs bound."""
    if not allure_enabled():
        return
    import allure

    for verdict in verdicts:
        unit = f" {verdict['unit']}" if verdict.get("unit") == "ms" else ""
        title = (
            f"SLO {verdict['metric']}: measured {verdict['measured']}{unit}, bound "
            f"{verdict['op']} {verdict['bound']}{unit} [{verdict['source']}]"
        )
        try:
            with allure.step(title):
                if not verdict["passed"]:
                    raise _Verdict(title)
        except _Verdict:
            pass  # the test fails after its body, with every verdict's table


def set_parameters(parameters: Mapping[str, object], hidden: Iterable[str] = ()) -> None:
    """The trial's parameters as plain text, and pytest's own that they repeat or
    that only a repr could show (tuples, dicts) hidden. Written on the test's result
    itself: allure.dynamic.parameter quotes every string and cannot hide a parameter
    pytest already recorded."""
    result = _current_test_result()
    if result is None:
        return
    from allure_commons.model2 import Parameter

    by_name = {parameter.name: parameter for parameter in result.parameters}
    for name in hidden:
        if name in by_name:
            by_name[name].mode = "hidden"
    for name, value in parameters.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if name in by_name:
            by_name[name].value = text
        else:
            result.parameters.append(Parameter(name=name, value=text))


def _current_test_result() -> Any:
    """allure-pytest's result object of the running test, or None."""
    if not allure_enabled():
        return None
    from allure_commons import plugin_manager

    listener_class: type = importlib.import_module("allure_pytest.listener").AllureListener
    listeners: list[Any] = [
        plugin for plugin in plugin_manager.get_plugins() if isinstance(plugin, listener_class)
    ]
    return listeners[0].allure_logger.get_test(None) if listeners else None


# How the report groups failures (Allure reads categories.json from the results).
CATEGORIES = [
    {
        "name": "SLO violations",
        "description": "the stack missed a bound: a verdict about the stack",
        "matchedStatuses": ["failed"],
        "messageRegex": ".*SLOs failed.*",
    },
    {
        "name": "Harness errors: runner too busy",
        "description": "the harness could not time the trial; no verdict about the stack",
        "matchedStatuses": ["failed", "broken"],
        "messageRegex": ".*runner was too busy.*",
    },
    {
        "name": "Stack errors",
        "description": "a server, proxy or HA manager did not do its part",
        "matchedStatuses": ["failed", "broken"],
        "traceRegex": ".*(ClusterError|ProxyError).*",
    },
    {
        "name": "Harness errors",
        "description": "anything else that broke: the test or the harness itself",
        "matchedStatuses": ["broken"],
    },
]


def write_run_files(results_dir: Path, environment: Mapping[str, str]) -> None:
    """environment.properties (what the run ran on) and categories.json, beside the
    results, where Allure's report generator reads them."""
    results_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"{_key(key)}={_property(value)}" for key, value in environment.items()]
    (results_dir / "environment.properties").write_text("\n".join(lines) + "\n")
    (results_dir / "categories.json").write_text(json.dumps(CATEGORIES, indent=2) + "\n")


def _key(name: str) -> str:
    # A properties key ends at the first blank, '=' or ':': "postgresql (wheel)" would
    # become the key "postgresql" with the rest in its value.
    return "_".join(name.replace("(", "").replace(")", "").replace("=", "").split())


def _property(value: str) -> str:
    # Java properties: backslashes and line breaks must be escaped.
    return value.replace("\\", "\\\\").replace("\n", "\\n")
