"""The report's figures, drawn with matplotlib's Agg backend (no display) and returned as PNG bytes.

Each function takes tables from `analysis.py` and returns one PNG; `render.py` writes them beside
report.md and index.html, which both reference them.
"""

from __future__ import annotations

import io
from textwrap import fill

import matplotlib

matplotlib.use("Agg")  # before pyplot: reports are built on headless CI machines

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.compare.analysis import Comparison  # noqa: E402
from experiments.track.finished_runs import higher_is_better  # noqa: E402


def _png(fig: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def metric_curves(comp: Comparison, significance: pd.DataFrame) -> bytes:
    """Mean of each metric vs the swept parameter, with its 95% CI band (bootstrap by query, CR2 t by
    conversation), one panel per metric."""
    metrics = list(comp.metrics)
    cols = min(3, len(metrics))
    rows = int(np.ceil(len(metrics) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    x = np.asarray(comp.sweep_values)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        table = significance[significance["metric"] == metric].set_index("run").loc[list(comp.labels)]
        ax.plot(x, table["mean"], marker="o", ms=3, color="C0")
        ax.fill_between(x, table["ci_low"], table["ci_high"], alpha=0.2, color="C0", label="95% CI")
        marked = table["significant"].to_numpy(bool)
        ax.scatter(x[marked], table["mean"].to_numpy()[marked], marker="*", s=80, color="C3", zorder=3,
                   label="significant vs baseline (Holm)")  # fmt: skip
        ax.set_title(metric)
        ax.set_xlabel(comp.sweep_param)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"metrics vs {comp.sweep_param}")
    fig.tight_layout()
    return _png(fig)


def label_curves(comp: Comparison, per_label: pd.DataFrame, metric: str) -> bytes:
    """`metric` vs the swept parameter, one line (with CI band) per label value, e.g. per BEAM ability."""
    fig, ax = plt.subplots(figsize=(9, 5.2))
    x = np.asarray(comp.sweep_values)
    colours = plt.get_cmap("tab10")
    for i, (value, part) in enumerate(per_label.groupby("label", sort=True)):
        part = part.set_index("run").loc[list(comp.labels)]
        colour = colours(i % 10)
        ax.plot(
            x, part["mean"], marker="o", ms=3, color=colour, label=f"{value} (n={int(part['n'].iloc[0])})"
        )
        ax.fill_between(x, part["ci_low"], part["ci_high"], alpha=0.08, color=colour)
    ax.set_xlabel(comp.sweep_param)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per {(comp.label_column or 'label').removeprefix('label.')} (bands: 95% CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _png(fig)


def delta_heatmap(
    comp: Comparison, per_label: pd.DataFrame, metric: str, significance: pd.DataFrame | None = None
) -> bytes:
    """Delta of `metric` vs the baseline, label values x runs, diverging colours centred on 0.

    A cell whose paired test is significant after the report's Holm correction is outlined and marked †
    (better) or ‡ (worse): per-label cells by Holm across all (label, run) cells, the overall row by the
    report's own family (`significance`: runs x metrics), as the tables beside the figure are.
    """
    table = per_label.pivot(index="label", columns="run", values="delta")
    marks = per_label.pivot(index="label", columns="run", values="significant")
    runs = [lab for lab in comp.labels if lab != comp.baseline]
    table, marks = table[runs], marks[runs].astype(bool)
    overall = comp.values[metric]
    table.loc["(overall)"] = [float((overall[r] - overall[comp.baseline]).mean()) for r in runs]
    if significance is not None:
        part = significance[significance["metric"] == metric].set_index("run")
        marks.loc["(overall)"] = [bool(part.at[r, "significant"]) for r in runs]
    else:
        marks.loc["(overall)"] = False
    values, significant = table.to_numpy(float), marks.to_numpy(bool)
    limit = max(float(np.nanmax(np.abs(values))), 1e-9)
    width = min(2.0 + 0.75 * len(runs), 22)
    fig, ax = plt.subplots(figsize=(width, 1.2 + 0.42 * len(table)))
    image = ax.imshow(values, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    names, axis_name = _tick_names(comp, runs)
    ax.set_xticks(range(len(runs)), names, rotation=60, ha="right", fontsize=7)
    ax.set_xlabel(axis_name or "run")
    ax.set_yticks(range(len(table)), table.index, fontsize=8)
    better = higher_is_better(metric)
    for (i, j), value in np.ndenumerate(values):
        if significant[i, j]:  # outlined whatever the table's size, so large heat maps still show it
            for lw, colour in ((3.2, "black"), (1.4, "#ffd43b")):  # seen on dark and light cells alike
                ax.add_patch(plt.Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, lw=lw, ec=colour))
        if table.size <= 300:
            mark = ("†" if (value > 0) == better else "‡") if significant[i, j] else ""
            ax.text(j, i, f"{value:+.2f}{mark}", ha="center", va="center",
                    fontsize=7 if mark else 6, fontweight="bold" if mark else "normal",
                    color="white" if abs(value) > 0.6 * limit else "black")  # fmt: skip
    ax.axhline(len(table) - 1.5, color="grey", lw=0.8)  # the overall row is another test family
    fig.colorbar(image, ax=ax, label=f"Δ {metric} vs {comp.baseline}")
    ax.set_title(f"Δ {metric} vs baseline {_short_label(comp.baseline, 60)}")
    legend = (
        "outlined (yellow on black), † / ‡: significantly better / worse than the baseline (paired test, "
        f"Holm across all {int(marks.iloc[:-1].size)} per-label cells; the (overall) row: Holm across "
        "the report's runs × metrics)"
    )
    # Just under the axis label, wherever the rotated tick labels end.
    ax.annotate(fill(legend, 90), xy=(0, 0), xycoords=ax.xaxis.label, xytext=(0, -4),
                textcoords="offset points", fontsize=7, ha="left", va="top")  # fmt: skip
    return _png(fig)


def wins_losses(significance: pd.DataFrame, comp: Comparison, metric: str) -> bytes:
    """Per-query wins / ties / losses of every run against the baseline, as stacked bars."""
    table = significance[(significance["metric"] == metric) & (significance["run"] != comp.baseline)]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * len(table)))
    y = np.arange(len(table))
    left = np.zeros(len(table))
    for column, colour in (("wins", "#2b8a3e"), ("ties", "#c7c7c7"), ("losses", "#c92a2a")):
        counts = table[column].to_numpy(float)
        ax.barh(y, counts, left=left, color=colour, label=column)
        left += counts
    names, axis_name = _tick_names(comp, list(table["run"]))
    ax.set_yticks(y, names, fontsize=7)
    if axis_name:
        ax.set_ylabel(axis_name)
    ax.invert_yaxis()
    ax.set_xlabel(f"queries ({metric} vs {comp.baseline})")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _png(fig)


def _tick_names(comp: Comparison, runs: list[str]) -> tuple[list[str], str | None]:
    """Axis ticks: the swept value when every run is a point of one sweep, else the (short) run label."""
    value = dict(zip(comp.labels, comp.sweep_values, strict=True))
    if comp.sweep_param and all(np.isfinite(value[r]) for r in runs):
        return [f"{value[r]:g}" for r in runs], comp.sweep_param
    return [_short_label(r) for r in runs], None


def _short_label(label: str, width: int = 40) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"
