"""The collapse study's files: thresholds chosen on the calibration seeds, and the
report of how the scored seeds' warnings did (``experiments.findings.prediction``).

* :func:`calibrate_and_save` reads the finished calibration runs, chooses the
  thresholds and writes ``<results>/<finding>-thresholds.yaml``, a ``ragen train``
  config fragment (``ragen train ... config=<that file>`` trains with them) whose keys
  are the ``trainer.collapse.*`` the viewer reads; returns them as overrides for the
  scored runs.
* :func:`write` scores the finished runs of both seed sets (the calibration seeds
  in-sample, for reference; the scored seeds are the result), draws
  ``<finding>-collapse.png`` and returns the report's markdown and numbers.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from experiments.findings import prediction, sweep
from experiments.findings.config import FindingConfig
from ragen.trainer.collapse import SIGNALS


def study_runs(cfg: FindingConfig, out: Path, seeds: list[int]) -> list[dict[str, Any]]:
    """Every finished run of ``seeds``: its collapse step, warnings and diagnostics."""
    from ragen.trainer.metrics_logger import read_events, read_metrics

    c = cfg.collapse
    runs = []
    for name, variant in cfg.variants.items():
        for seed in seeds:
            folder = sweep.run_dir(out, name, seed)
            if not (folder / sweep.DONE).exists():
                continue
            rows = read_metrics(folder)
            success = [
                (int(r["step"]), float(r[c.success_key]))
                for r in rows
                if isinstance(r.get(c.success_key), (int, float))
            ]
            runs.append(
                {
                    "label": f"{variant.label or name} s{seed}",
                    "variant": name,
                    "seed": seed,
                    "folder": str(folder),
                    "collapses": prediction.collapse_step(
                        success, c.onset_window, c.onset_fraction
                    ),
                    "success": success,
                    "diag": prediction.diagnostics(rows, c.signals),
                    "warnings": prediction.first_warnings(read_events(folder, "collapse")),
                }
            )
    return runs


def calibrate_and_save(cfg: FindingConfig, out: Path, results: Path, name: str) -> list[str]:
    """Thresholds from the calibration runs (only those seeds), saved; as overrides."""
    c = cfg.collapse
    runs = study_runs(cfg, out, c.calibrate_seeds)
    healthy = [r["diag"] for r in runs if r["collapses"] is None]
    cal = prediction.calibrate(healthy, c.signals, c.drop_margin, c.spike_margin)
    overrides = prediction.threshold_overrides(cal)
    (out / "thresholds.json").write_text(
        json.dumps(
            {
                "calibrate_seeds": c.calibrate_seeds,
                "thresholds": cal.thresholds,
                "healthy_extremes": cal.extremes,
                "notes": cal.notes,
                "healthy_runs": [r["label"] for r in runs if r["collapses"] is None],
                "collapsing_runs": [r["label"] for r in runs if r["collapses"] is not None],
                "overrides": overrides,
            },
            indent=1,
        )
    )
    collapse = {"signals": [s for s, t in cal.thresholds.items() if t is not None]}
    collapse |= {SIGNALS[s][2]: t for s, t in cal.thresholds.items() if t is not None}
    lines = [
        f"# trainer.collapse thresholds chosen on seeds {c.calibrate_seeds} of the "
        f"'{name}' finding (experiments/findings); use: ragen train ... config=<this file>",
        "trainer:",
        "  collapse:",
        f"    signals: [{', '.join(collapse.pop('signals'))}]",
        *[f"    {k}: {v}" for k, v in collapse.items()],
    ]
    (results / f"{name}-thresholds.yaml").write_text("\n".join(lines) + "\n")
    return overrides


def _leads(values: list[int]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):+g} ({', '.join(f'{v:+d}' for v in sorted(values))})"


def _score_lines(table: dict[str, dict]) -> list[str]:
    lines = [
        "| signal | runs that collapse | warned before the collapse | late | missed | "
        "lead, steps (median; each) | runs that do not | false alarms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for signal, row in table.items():
        lines.append(
            f"| {signal} | {row['collapsing']} | {row['early']} | {row['late']} | "
            f"{row['missed']} | {_leads(row['leads'])} | {row['healthy']} | "
            f"{row['false_alarms']} |"
        )
    return lines


def write(cfg: FindingConfig, out: Path, results: Path, name: str) -> tuple[str, dict]:
    """The collapse study's markdown and numbers (and its figure)."""
    from experiments.findings.plots import plot_signals

    c = cfg.collapse
    saved = out / "thresholds.json"
    if not saved.exists():
        return "Collapse study: no calibration yet (run without --report-only).", {}
    cal = json.loads(saved.read_text())
    thresholds = {s: t for s, t in cal["thresholds"].items() if t is not None}
    calib = study_runs(cfg, out, c.calibrate_seeds)
    scored = study_runs(cfg, out, c.score_seeds)
    scored_table = prediction.score_runs(scored, list(thresholds))
    # in-sample: the calibration runs replayed with the thresholds chosen on them
    from ragen.trainer.collapse import CollapseConfig, replay
    from ragen.trainer.metrics_logger import read_metrics

    for run in calib:
        warnings, _ = replay(_collapse_config(thresholds), read_metrics(run["folder"]))
        run["warnings"] = prediction.first_warnings(
            [{"signal": w.signal, "step": w.step} for w in warnings]
        )
    calib_table = prediction.score_runs(calib, list(thresholds))
    figure = plot_signals(
        scored,
        {s: (t, SIGNALS[s][1]) for s, t in thresholds.items()},
        results / f"{name}-collapse.png",
        c.success_key,
        f"collapse signals on the scored seeds {c.score_seeds}",
    )
    lines = [
        "## Collapse prediction",
        "",
        f"A run *collapses* at the first step whose {c.onset_window}-step mean "
        f"`{c.success_key}` falls below {c.onset_fraction:g} x its first "
        f"{c.onset_window} steps' mean (judged on the outcome, whatever the algorithm). "
        f"Thresholds were chosen on seeds {c.calibrate_seeds} only: "
        f"{c.drop_margin:g} x the lowest drop diagnostic (a_t / peak), "
        f"{c.spike_margin:g} x the highest spike diagnostic (x_t / median) that a "
        "calibration run which does not collapse reached after the detector's "
        f"`min_steps` ({CollapseConfig().min_steps}). Calibration runs that do not "
        f"collapse: {', '.join(cal['healthy_runs']) or 'none'}; that collapse: "
        f"{', '.join(cal['collapsing_runs']) or 'none'}.",
        "",
        "| signal | healthy extreme (calibration) | threshold | note |",
        "|---|---|---|---|",
    ]
    for s in c.signals:
        ext, t = cal["healthy_extremes"].get(s), cal["thresholds"].get(s)
        lines.append(
            f"| {s} | {'-' if ext is None else f'{ext:.3f}'} | {'-' if t is None else t} | "
            f"{cal['notes'].get(s, '')} |"
        )
    lines += [
        "",
        f"The scored seeds {c.score_seeds} trained with these thresholds "
        f"(`{name}-thresholds.yaml`, in each run's config.yaml as `trainer.collapse.*`); "
        "their logged warnings, scored (lead = collapse step - warning step; > 0: the "
        "warning came first):",
        "",
        *_score_lines(scored_table),
        "",
        f"In-sample, for reference (the calibration seeds {c.calibrate_seeds}, replayed "
        "with the thresholds chosen on them):",
        "",
        *_score_lines(calib_table),
        "",
        f"![collapse signals]({figure.name})",
        "",
        "Per run (scored seeds): collapse step and each signal's first warning:",
        "",
        "| run | collapses at | " + " | ".join(thresholds) + " |",
        "|---|---|" + "---|" * len(thresholds),
    ]
    for run in scored:
        cells = [str(run["warnings"].get(s, "-")) for s in thresholds]
        onset = run["collapses"] if run["collapses"] is not None else "-"
        lines.append(f"| {run['label']} | {onset} | " + " | ".join(cells) + " |")
    numbers = {
        "thresholds": cal,
        "scored": scored_table,
        "in_sample": calib_table,
        "runs": [{k: r[k] for k in ("label", "collapses", "warnings")} for r in scored],
    }
    return "\n".join(lines), numbers


def _collapse_config(thresholds: dict[str, float]):
    from ragen.trainer.collapse import CollapseConfig

    cfg = CollapseConfig(signals=list(thresholds))
    for s, t in thresholds.items():
        setattr(cfg, SIGNALS[s][2], t)
    return cfg
