"""Figures a reader can check: every seed drawn, with the mean and the spread over seeds.

:func:`plot_sweep` draws one panel per metric; each variant has a colour, each of its
seeds a thin line, their mean a thick line and mean ± one standard deviation (over
seeds, at the x values every seed logged, kept within the seeds' own range) a band. :func:`plot_signals` draws the
collapse study: each signal's diagnostic on runs that collapse and runs that do not,
with the threshold chosen on the calibration seeds and each run's collapse step.
"""

from __future__ import annotations

import statistics
from pathlib import Path

#: variant colours, in order (matplotlib's tab10, readable on white)
COLORS = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def seed_band(runs: list[list[tuple[float, float]]]):
    """``(xs, mean, std, low, high)`` at the x values every run has (std 0 for one run;
    low/high: the smallest and largest seed's value there)."""
    if not runs:
        return [], [], [], [], []
    common = set(x for x, _ in runs[0])
    for points in runs[1:]:
        common &= set(x for x, _ in points)
    xs = sorted(common)
    tables = [dict(points) for points in runs]
    means, stds, lows, highs = [], [], [], []
    for x in xs:
        values = [t[x] for t in tables]
        means.append(statistics.mean(values))
        stds.append(statistics.stdev(values) if len(values) > 1 else 0.0)
        lows.append(min(values))
        highs.append(max(values))
    return xs, means, stds, lows, highs


def _save(fig, path: Path) -> None:
    """PNG with a 256-colour palette: a third of the bytes, the same picture to the eye
    (the figures are committed next to their tables)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_sweep(
    series: dict[str, dict[int, dict[str, list]]],
    panels: list[tuple[str, str, str]],
    path: Path,
    title: str = "",
    labels: dict[str, str] | None = None,
) -> Path:
    """``series[variant][seed][key] = [(x, value), ...]``; ``panels``: (key, title,
    x-axis label)."""
    plt = _pyplot()
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.3 * rows), squeeze=False)
    labels = labels or {}
    for ax, (key, panel_title, x_label) in zip(axes.flat, panels):
        for i, (variant, seeds) in enumerate(series.items()):
            color = COLORS[i % len(COLORS)]
            runs = [s[key] for s in seeds.values() if s.get(key)]
            for points in runs:
                xs, ys = zip(*points)
                ax.plot(xs, ys, color=color, alpha=0.3, lw=0.8)
            xs, mean, std, lows, highs = seed_band(runs)
            if xs:
                name = f"{labels.get(variant, variant)} ({len(runs)} seeds)"
                marker = "o" if len(xs) <= 16 else None
                ax.plot(xs, mean, color=color, lw=2.0, marker=marker, ms=3, label=name)
                # mean ± std, kept within the seeds' own range (a rate stays in [0, 1])
                lo = [max(m - s, a) for m, s, a in zip(mean, std, lows)]
                hi = [min(m + s, b) for m, s, b in zip(mean, std, highs)]
                ax.fill_between(xs, lo, hi, color=color, alpha=0.12, lw=0)
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel(x_label, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, names = [], []
    for ax in axes.flat:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=9)
    legend_rows = (len(names) + 3) // 4
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.045 * legend_rows + 0.02, 1, 0.96 if title else 1))
    _save(fig, path)
    plt.close(fig)
    return path


def plot_signals(
    runs: list[dict],
    thresholds: dict[str, tuple[float, str]],
    path: Path,
    success_key: str,
    title: str = "",
) -> Path:
    """The collapse study's figure. ``runs``: dicts with ``label``, ``collapses``
    (onset step or None), ``success`` [(step, v)] and ``diag`` {signal: [(step, v)]};
    ``thresholds``: signal -> (value, kind). One panel for success, one per signal;
    red lines for runs that collapse (a dot at their collapse step), blue for the rest."""
    plt = _pyplot()
    signals = list(thresholds)
    panels = [("success", success_key)] + [(s, f"collapse/{s}") for s in signals]
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.3 * rows), squeeze=False)
    for ax, (name, key) in zip(axes.flat, panels):
        for run in runs:
            points = run["success"] if name == "success" else run["diag"].get(name, [])
            if not points:
                continue
            xs, ys = zip(*points)
            color = "#d62728" if run["collapses"] is not None else "#1f77b4"
            ax.plot(xs, ys, color=color, alpha=0.55, lw=1.0)
            onset = run["collapses"]
            if onset is not None:
                at = dict(points)
                if onset in at:
                    ax.plot([onset], [at[onset]], "o", color=color, ms=4)
        if name != "success":
            value, kind = thresholds[name]
            ax.axhline(value, color="black", ls="--", lw=1.0)
            rule = "fires below" if kind == "drop" else "fires above"
            ax.set_title(f"{key}\n({rule} {value:.3g}, chosen on calibration seeds)", fontsize=9)
        else:
            ax.set_title(f"{key} (dot: collapse step)", fontsize=9)
        ax.set_xlabel("step", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    from matplotlib.lines import Line2D

    fig.legend(
        [Line2D([], [], color="#d62728"), Line2D([], [], color="#1f77b4")],
        ["runs that collapse", "runs that do not"],
        loc="lower center",
        ncol=2,
        fontsize=9,
    )
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95 if title else 1))
    _save(fig, path)
    plt.close(fig)
    return path
