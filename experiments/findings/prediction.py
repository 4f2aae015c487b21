"""Is collapse predictable? The early-warning study, with thresholds that are not fit on
the runs they are judged on.

1. **Calibration.** The runs of ``collapse.calibrate_seeds`` are played with the
   detector logging every signal. Each run is labelled by its outcome, not by its
   algorithm: it *collapses* at the first step whose ``onset_window``-step mean success
   falls below ``onset_fraction`` of its first window's mean (:func:`collapse_step`).
   A signal's threshold is set just beyond the most extreme diagnostic any run that
   does not collapse reached (:func:`calibrate`): ``drop_margin`` x the lowest
   ``a_t / peak`` of a drop signal, ``spike_margin`` x the highest ``x_t / median`` of
   the grad-norm spike. So, in-sample, no healthy run would warn.
2. **Scoring.** The runs of ``collapse.score_seeds`` train with those thresholds
   (``trainer.collapse.*``, :func:`threshold_overrides`; the run's ``config.yaml``
   carries them, so ``ragen view`` draws them), and every warning they log is scored
   (:func:`score_runs`): per signal, on the runs that collapse, how many warned before
   the collapse step and by how many steps (the *lead*: collapse step - warning step,
   > 0 = early), how many warned late or never; on the runs that do not collapse,
   how many warned at all (*false alarms*).

The diagnostics come from :func:`ragen.trainer.collapse.replay`, the code the trainer
runs online, so a threshold found here fires at the same step in training.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ragen.trainer.collapse import SIGNALS, CollapseConfig, replay

__all__ = [
    "collapse_step",
    "diagnostics",
    "calibrate",
    "threshold_overrides",
    "first_warnings",
    "score_runs",
    "Calibration",
]


def collapse_step(points: Sequence[tuple[int, float]], window: int, fraction: float) -> int | None:
    """The first step whose ``window``-step mean success is below ``fraction`` x the mean
    of the first ``window`` values; ``None``: the run does not collapse (or starts at 0,
    where it cannot fall)."""
    if len(points) < window:
        return None
    values = [v for _, v in points]
    reference = statistics.mean(values[:window])
    if reference <= 0:
        return None
    for k in range(window - 1, len(points)):
        if statistics.mean(values[k - window + 1 : k + 1]) < fraction * reference:
            return points[k][0]
    return None


def diagnostics(rows: list[dict], signals: Sequence[str]) -> dict[str, list[tuple[int, float]]]:
    """``{signal: [(step, collapse/<signal>)]}`` replayed over a run's logged metrics
    (the diagnostics do not depend on the thresholds)."""
    _, diags = replay(CollapseConfig(signals=list(signals)), rows)
    out: dict[str, list[tuple[int, float]]] = {s: [] for s in signals}
    for d in diags:
        for s in signals:
            v = d.get(f"collapse/{s}")
            if isinstance(v, float) and math.isfinite(v):
                out[s].append((int(d["step"]), v))
    return out


@dataclass
class Calibration:
    """Thresholds per signal (``None``: not measurable on the calibration runs) and the
    healthy extreme each was set from."""

    thresholds: dict[str, float | None]
    extremes: dict[str, float | None]
    notes: dict[str, str]


def calibrate(
    healthy: list[dict[str, list[tuple[int, float]]]],
    signals: Sequence[str],
    drop_margin: float,
    spike_margin: float,
    min_steps: int = CollapseConfig().min_steps,
) -> Calibration:
    """Thresholds from the diagnostics of the calibration runs that do not collapse
    (module docstring). A drop signal whose diagnostic never left 1.0 (its peak stayed
    below the detector's ``min_drop``: the bandit's MI, 0 by construction) has nothing to
    calibrate on: ``None``, with a note."""
    if not healthy:
        raise ValueError("calibration needs at least one run that does not collapse")
    thresholds: dict[str, float | None] = {}
    extremes: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for s in signals:
        kind = SIGNALS[s][1]
        values = [v for run in healthy for step, v in run.get(s, []) if step >= min_steps]
        if not values:
            thresholds[s] = extremes[s] = None
            notes[s] = "not logged on the calibration runs"
            continue
        if kind == "drop":
            low = min(values)
            extremes[s] = low
            if low >= 1.0:
                thresholds[s] = None
                notes[s] = "never measurable: its peak stayed below min_drop on every run"
                continue
            thresholds[s] = round(min(max(drop_margin * low, 0.01), 0.99), 3)
        elif kind == "spike":
            high = max(values)
            extremes[s] = high
            thresholds[s] = round(max(spike_margin * high, 1.01), 3)
        else:  # surge: an absolute rise
            high = max(values)
            extremes[s] = high
            thresholds[s] = round(max(spike_margin * high, 0.01), 3)
    return Calibration(thresholds, extremes, notes)


def threshold_overrides(cal: Calibration) -> list[str]:
    """``trainer.collapse.*`` overrides: the calibrated signals and their thresholds."""
    signals = [s for s, t in cal.thresholds.items() if t is not None]
    items = [f"trainer.collapse.signals=[{','.join(signals)}]"]
    items += [f"trainer.collapse.{SIGNALS[s][2]}={cal.thresholds[s]}" for s in signals]
    return items


def first_warnings(events: list[dict]) -> dict[str, int]:
    """The step of each signal's first ``collapse`` event."""
    out: dict[str, int] = {}
    for e in events:
        s, step = e.get("signal"), e.get("step")
        if s and isinstance(step, (int, float)):
            out[s] = min(out.get(s, int(step)), int(step))
    return out


def score_runs(runs: list[dict], signals: Sequence[str]) -> dict[str, dict]:
    """Per signal (and ``any``: the first warning of any signal), over ``runs`` (dicts
    with ``collapses``: the collapse step or None, and ``warnings``: {signal: step}):

    ``collapsing`` runs and of them ``early`` (warned before the collapse step),
    ``late`` (at or after it), ``missed``; ``leads`` (collapse step - warning step, for
    every warned collapsing run); ``healthy`` runs and ``false_alarms`` among them."""
    table: dict[str, dict] = {}
    for s in [*signals, "any"]:
        row = {"collapsing": 0, "early": 0, "late": 0, "missed": 0, "leads": [],
               "healthy": 0, "false_alarms": 0}  # fmt: skip
        for run in runs:
            warned = run["warnings"]
            step = min(warned.values()) if s == "any" and warned else warned.get(s)
            if run["collapses"] is None:
                row["healthy"] += 1
                row["false_alarms"] += step is not None
                continue
            row["collapsing"] += 1
            if step is None:
                row["missed"] += 1
                continue
            lead = run["collapses"] - step
            row["leads"].append(lead)
            row["early" if lead > 0 else "late"] += 1
        table[s] = row
    return table
