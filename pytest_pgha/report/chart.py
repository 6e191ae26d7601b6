"""The four-panel failover chart: throughput, errors, writer state, connections in use.

Time runs in seconds relative to the inject so charts of different trials line up.
The figure is built with matplotlib's object API on an Agg canvas rather than pyplot:
pyplot keeps a global figure registry and backend, which would leak between tests and
break under xdist workers without a display.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pytest_pgha.proxies.samples import PROBE_FAILED, UNKNOWN, ProxySample
from pytest_pgha.timeline import INJECT, Event
from pytest_pgha.workload.records import Outcome, TxRecord

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_OUTCOMES = tuple(Outcome)
_OUTCOME_CODE = {outcome: code for code, outcome in enumerate(_OUTCOMES)}
_ERROR_COLOURS = {
    Outcome.FAILED: "tab:red",
    Outcome.INDETERMINATE: "tab:orange",
    Outcome.CONNECT_FAILED: "tab:purple",
}
_PHASE_COLOURS = ("tab:green", "tab:brown", "tab:cyan", "tab:olive", "tab:pink", "tab:gray")
_PHASE_STYLES = ("-", "-.", ":")
_INJECT_COLOUR = "black"
# Writer changes are annotated on the state panel; a flapping proxy would bury the
# panel in text, so only the first few are labelled.
_MAX_WRITER_LABELS = 8
_LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8}


@dataclass(frozen=True)
class _Buckets:
    edges_s: FloatArray  # n + 1 bucket edges, seconds relative to the inject
    counts: dict[Outcome, IntArray]  # n counts per outcome


def render_failover_chart(
    records: Sequence[TxRecord],
    samples: Sequence[ProxySample],
    events: Sequence[Event],
    *,
    inject_us: int,
    bucket_ms: int,
    title: str,
    path: Path,
) -> Path:
    """Draw the chart to ``path`` (PNG) and return ``path``."""
    if bucket_ms <= 0:
        raise ValueError(f"bucket_ms must be positive, got {bucket_ms}")
    buckets = _bucket_records(records, inject_us, bucket_ms * 1000)
    fig = Figure(figsize=(13, 10), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(4, 1, sharex=True)
    tps_ax, err_ax, state_ax, conn_ax = (axes[i] for i in range(4))
    _draw_throughput(tps_ax, buckets, bucket_ms)
    _draw_errors(err_ax, buckets, bucket_ms)
    _draw_writer_state(state_ax, samples, inject_us)
    _draw_connections(conn_ax, samples, inject_us)
    _draw_events(list(axes), events, inject_us)
    conn_ax.set_xlabel("seconds relative to inject")
    conn_ax.set_xlim(*_x_range(buckets, samples, events, inject_us))
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _bucket_records(records: Sequence[TxRecord], inject_us: int, bucket_us: int) -> _Buckets | None:
    if not records:
        return None
    count = len(records)
    end_us = np.fromiter((r.end_us for r in records), dtype=np.int64, count=count)
    codes = np.fromiter((_OUTCOME_CODE[r.outcome] for r in records), dtype=np.int64, count=count)
    # Floor division anchors bucket edges on the inject, so pre-inject buckets never
    # straddle it and bucket 0 starts exactly at t = 0.
    index = (end_us - inject_us) // bucket_us
    first = int(index.min())
    n_buckets = int(index.max()) - first + 1
    # One bincount over (bucket, outcome) pairs instead of one pass per outcome.
    flat = (index - first) * len(_OUTCOMES) + codes
    table = np.bincount(flat, minlength=n_buckets * len(_OUTCOMES)).reshape(n_buckets, -1)
    edges_s = (np.arange(n_buckets + 1, dtype=np.float64) + first) * (bucket_us / 1e6)
    counts = {outcome: table[:, code].astype(np.int64) for outcome, code in _OUTCOME_CODE.items()}
    return _Buckets(edges_s, counts)


def _draw_throughput(ax: Axes, buckets: _Buckets | None, bucket_ms: int) -> None:
    ax.set_ylabel("ok tx / s")
    ax.set_title(f"successful transactions per second ({bucket_ms} ms buckets)", fontsize=10)
    if buckets is None:
        _say(ax, "no transactions")
        return
    tps = buckets.counts[Outcome.OK] * (1000.0 / bucket_ms)
    ax.stairs(tps, buckets.edges_s, fill=True, color="tab:blue", alpha=0.8, label="ok")
    ax.set_ylim(bottom=0)


def _draw_errors(ax: Axes, buckets: _Buckets | None, bucket_ms: int) -> None:
    ax.set_ylabel(f"errors / {bucket_ms} ms")
    ax.set_title("errors per bucket, by outcome", fontsize=10)
    if buckets is None:
        _say(ax, "no transactions")
        return
    bottom = np.zeros(len(buckets.edges_s) - 1, dtype=np.int64)
    for outcome, colour in _ERROR_COLOURS.items():
        counts = buckets.counts[outcome]
        total = int(counts.sum())
        if total == 0:
            continue
        top = bottom + counts
        # The edge line keeps a lone 1-bucket burst visible when the run spans minutes.
        ax.stairs(
            top,
            buckets.edges_s,
            baseline=bottom,
            fill=True,
            color=colour,
            linewidth=1.5,
            label=f"{outcome.value} ({total})",
        )
        bottom = top
    if not bottom.any():
        _say(ax, "no errors")
        ax.set_ylim(0, 1)
        return
    ax.set_ylim(bottom=0)
    ax.legend(**_LEGEND_OUTSIDE)


def _draw_writer_state(ax: Axes, samples: Sequence[ProxySample], inject_us: int) -> None:
    ax.set_ylabel("writer state")
    ax.set_title("writer backend state as the proxy reports it", fontsize=10)
    ax.set_yticks([-1, 0, 1], ["probe err", "down", "up"])
    # Room above "up" for the writer labels, clear of the state line.
    ax.set_ylim(-1.5, 2.6)
    if not samples:
        _say(ax, "no proxy samples")
        return
    times = _sample_times(samples, inject_us)
    states = np.array([s.writer_state for s in samples], dtype=np.float64)
    failed = states == PROBE_FAILED
    # A failed probe says nothing about the backend: hold the last known state in the
    # line and mark the failed probe separately, so it does not read as an outage.
    known = np.where(failed, np.nan, states)
    ax.step(times, _hold_last(known), where="post", color="tab:green", label="writer state")
    if failed.any():
        ax.plot(
            times[failed],
            states[failed],
            "x",
            color="tab:red",
            markersize=4,
            linestyle="none",
            label=f"probe error ({int(failed.sum())})",
        )
    _label_writer_changes(ax, samples, times)
    ax.legend(**_LEGEND_OUTSIDE)


def _draw_connections(ax: Axes, samples: Sequence[ProxySample], inject_us: int) -> None:
    ax.set_ylabel("connections")
    ax.set_title("backend connections in use on the writer", fontsize=10)
    if not samples:
        _say(ax, "no proxy samples")
        return
    times = _sample_times(samples, inject_us)
    in_use = np.array([s.connections_in_use for s in samples], dtype=np.float64)
    # Unknown values become gaps rather than dips to -1.
    in_use[in_use == UNKNOWN] = np.nan
    ax.step(times, in_use, where="post", color="tab:blue")
    ax.set_ylim(bottom=0)


def _draw_events(axes: list[Axes], events: Sequence[Event], inject_us: int) -> None:
    for ax in axes:
        ax.axvline(0.0, color=_INJECT_COLOUR, linestyle="--", linewidth=1.2, label="inject")
    phases = [e for e in events if e.name != INJECT]
    styles = _phase_styles(phases)
    for event in phases:
        x = (event.epoch_us - inject_us) / 1e6
        colour, linestyle = styles[event.name]
        for ax in axes:
            ax.axvline(x, color=colour, linestyle=linestyle, linewidth=0.9)
        # The legend names the lines: text next to them collides when phases are ms apart.
        axes[0].plot([], [], color=colour, linestyle=linestyle, label=f"{event.name} {x:+.3f} s")
    axes[0].legend(**_LEGEND_OUTSIDE)


def _phase_styles(phases: Sequence[Event]) -> dict[str, tuple[str, str]]:
    styles: dict[str, tuple[str, str]] = {}
    for event in phases:
        if event.name not in styles:
            n = len(styles)
            styles[event.name] = (
                _PHASE_COLOURS[n % len(_PHASE_COLOURS)],
                _PHASE_STYLES[(n // len(_PHASE_COLOURS)) % len(_PHASE_STYLES)],
            )
    return styles


def _label_writer_changes(ax: Axes, samples: Sequence[ProxySample], times: FloatArray) -> None:
    last: str | None = None
    labelled = 0
    for sample, t in zip(samples, times, strict=True):
        if sample.writer is None or sample.writer == last:
            continue
        last = sample.writer
        if labelled == _MAX_WRITER_LABELS:
            break
        labelled += 1
        # Above the state line, on a white ground, at alternating heights: changes can
        # be milliseconds apart. A dotted stem points at the moment of the change.
        height = 1.55 if labelled % 2 else 2.1
        ax.vlines(float(t), 1.0, height, colors="0.6", linestyles="dotted", linewidth=0.8)
        ax.text(
            float(t),
            height,
            f" writer {sample.writer}",
            fontsize=7,
            va="center",
            ha="left",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1},
        )


def _x_range(
    buckets: _Buckets | None,
    samples: Sequence[ProxySample],
    events: Sequence[Event],
    inject_us: int,
) -> tuple[float, float]:
    # The inject is always in view, even when no transaction ended after it.
    points = [0.0]
    if buckets is not None:
        points += [float(buckets.edges_s[0]), float(buckets.edges_s[-1])]
    if samples:
        epochs = [s.epoch_us for s in samples]
        points += [(min(epochs) - inject_us) / 1e6, (max(epochs) - inject_us) / 1e6]
    points += [(e.epoch_us - inject_us) / 1e6 for e in events]
    low, high = min(points), max(points)
    margin = max((high - low) * 0.02, 0.1)
    return low - margin, high + margin


def _sample_times(samples: Sequence[ProxySample], inject_us: int) -> FloatArray:
    epoch = np.array([s.epoch_us for s in samples], dtype=np.int64)
    return (epoch - inject_us) / 1e6


def _hold_last(values: FloatArray) -> FloatArray:
    """Forward-fill NaNs; leading NaNs stay NaN (nothing known yet)."""
    index = np.where(~np.isnan(values), np.arange(len(values)), 0)
    np.maximum.accumulate(index, out=index)
    filled: FloatArray = values[index]
    return filled


def _say(ax: Axes, text: str) -> None:
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=11,
        color="dimgray",
    )


def render_durability_chart(
    acked_end_us: Sequence[int],
    lost_end_us: Sequence[int],
    broken_end_us: Sequence[int],
    events: Sequence[Event],
    *,
    inject_us: int,
    bucket_ms: int,
    title: str,
    path: Path,
) -> Path:
    """Acknowledged commits over time, the lost ones and the broken ones marked, against
    the fault and the HA manager's phases (PNG at path)."""
    fig = Figure(figsize=(13, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots(1, 1)
    bucket_us = bucket_ms * 1000
    ax.set_ylabel(f"commits / {bucket_ms} ms")
    ax.set_xlabel("seconds relative to inject")
    for values, label, colour in (
        (acked_end_us, "acknowledged", "tab:blue"),
        (broken_end_us, "connection broke in COMMIT", "tab:orange"),
        (lost_end_us, "acknowledged, then LOST", "tab:red"),
    ):
        if not values:
            continue
        index = (np.asarray(values, dtype=np.int64) - inject_us) // bucket_us
        first = int(index.min())
        counts = np.bincount(index - first)
        edges = (np.arange(len(counts) + 1, dtype=np.float64) + first) * (bucket_us / 1e6)
        fill = label == "acknowledged"
        ax.stairs(counts, edges, fill=fill, alpha=0.5 if fill else 1.0, color=colour, label=label)
    if lost_end_us:
        xs = [(t - inject_us) / 1e6 for t in lost_end_us]
        ax.plot(xs, [0] * len(xs), "|", color="tab:red", markersize=14)
    if not (acked_end_us or lost_end_us or broken_end_us):
        _say(ax, "no transactions")
    _draw_events([ax], events, inject_us)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def render_cost_chart(
    rows: Sequence[dict[str, float | str]], *, x: str, y: str, series: str, title: str, path: Path
) -> Path:
    """One line per value of `series` (e.g. synchronous_commit), y against x."""
    fig = Figure(figsize=(9, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots(1, 1)
    for name in dict.fromkeys(str(r[series]) for r in rows):
        points = sorted((float(r[x]), float(r[y])) for r in rows if str(r[series]) == name)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize=10)
    ax.legend(title=series, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
