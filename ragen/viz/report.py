"""Curves (matplotlib PNG) and a markdown table for training runs and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragen.trainer.metrics_logger import read_metrics

CURVES = [
    ("rollout/success_rate", "train success rate"),
    ("val/success_rate", "validation success rate"),
    ("rollout/group_reward_std", "in-group reward std"),
    ("actor/entropy", "entropy"),
    ("actor/grad_norm_max", "grad norm (max)"),
    ("rollout/response_length", "response length (tokens)"),
]


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if v is not None:
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def plot_runs(runs: dict[str, Path], out_png: Path, keys=CURVES) -> Path:
    """One panel per metric, one line per run (``runs``: label -> run folder)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    data = {
        label: read_metrics(path)
        for label, path in runs.items()
        if (Path(path) / "metrics.jsonl").exists()
    }
    cols = 3
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (key, title) in zip(axes.flat, keys):
        for label, metrics in data.items():
            xs, ys = _series(metrics, key)
            if xs:
                ax.plot(xs, ys, marker="o" if len(xs) < 15 else None, ms=3, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


#: the demo's policies, in table order (results.json keys); the RL column names no
#: algorithm: each env trains with its own (``ragen.recipes.Budget.algo``)
DEMO_COLUMNS = ("random", "warm start (SFT)", "after RL", "oracle")
#: the RL column's key in results written before envs had their own algorithm
LEGACY_KEYS = {"after RL (StarPO-S)": "after RL"}


def upgrade_results(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``results`` with every legacy policy key renamed (``LEGACY_KEYS``), in place."""
    for row in results.values():
        for old, new in LEGACY_KEYS.items():
            if isinstance(row, dict) and old in row and new not in row:
                row[new] = row.pop(old)
    return results


def results_table(results: dict[str, dict[str, Any]], envs: list[str]) -> str:
    """Markdown: one row per environment, one column per policy (success rate), and the
    RL gain over the warm start with its 95% paired-bootstrap interval (``rl_gain``,
    ``ragen.demo.rl_gain``) where both were evaluated on the same states."""
    columns = list(DEMO_COLUMNS)
    head = [*columns[:3], GAIN_COLUMN, *columns[3:]]
    lines = ["| environment | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for env in envs:
        row = results.get(env, {})
        cells = []
        for c in head:
            if c == GAIN_COLUMN:
                cells.append(gain_cell(row.get("rl_gain")))
                continue
            v = row.get(c, {}).get("success_rate")
            cells.append("—" if v is None else f"{100 * v:.1f}%")
        lines.append(f"| {env} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: the gain column of the demo's table
GAIN_COLUMN = "RL gain (points, 95% interval)"


def gain_cell(gain: dict[str, Any] | None) -> str:
    """``+8.2 [+4.9, +11.5]`` from an ``Interval.to_json()`` in success-rate units."""
    if not gain:
        return "—"
    return f"{100 * gain['mean']:+.1f} [{100 * gain['low']:+.1f}, {100 * gain['high']:+.1f}]"


def _states_note(results: dict[str, Any], envs: list[str]) -> str:
    """``", 512 states per cell"`` when every evaluated env says how many it played."""
    counts = {
        cell.get("episodes")
        for env in envs
        for cell in results.get(env, {}).values()
        if isinstance(cell, dict) and "success_rate" in cell
    }
    return f", {counts.pop()} states per cell" if len(counts) == 1 and None not in counts else ""


def write_demo_report(
    out: Path, results: dict[str, Any], envs: list[str], rl_runs: dict[str, Path]
) -> Path:
    table = results_table(results, envs)
    png = plot_runs({env: path for env, path in rl_runs.items()}, out / "curves.png")
    (out / "results.md").write_text(
        "# ragen demo results\n\nSuccess rate on held-out validation states (temperature "
        f"0.5){_states_note(results, envs)}. The RL gain is after RL minus the warm start, "
        "paired state by state, with its 95% bootstrap interval over the states.\n\n"
        + table
        + f"\n\nLearning curves: {png.name}\n"
    )
    return out / "results.md"
