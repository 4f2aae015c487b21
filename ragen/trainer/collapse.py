"""Echo-trap early warning: a detector over the per-step metrics the trainer logs.

The RAGEN paper's finding 3: multi-turn RL collapses into an *echo trap* -- the
in-group reward variance, the entropy and the diversity of the reasoning fall, and
gradients spike, often before the reward does. :class:`CollapseDetector` is fed each
step's metrics dict (``detector.update(step, metrics)``) and returns the warnings of that
step; the trainer logs them as ``collapse`` events in ``metrics.jsonl`` and acts on
``trainer.on_collapse`` (warn | stop | rollback).

Signals (metric key -> rule; x_t the metric at step t, ``w`` = ``window``):

* ``group_reward_std`` (``rollout/group_reward_std``), ``entropy`` (``actor/entropy``),
  ``thought_diversity`` (``rollout/thought_distinct``), ``mutual_info``
  (``reasoning/mutual_info``) -- a **drop**: with the moving average
  ``a_t = mean(x_{t-w+1..t})`` and its running peak ``P_t = max_{s<=t} a_s`` (over steps
  with a full window), fire when ``a_t < ratio * P_t``.
* ``grad_norm`` (``actor/grad_norm_max``) -- a **spike**: fire when
  ``x_t > ratio * median(x_{t-h..t-1})`` over the ``history`` previous steps.
* ``format_errors`` (``rollout/format_error_rate``) -- a **surge**: fire when
  ``a_t - min_{s<=t} a_s > delta`` (an absolute rise of the error rate).

No signal fires before step ``min_steps``; each fires at most once until :meth:`reset`.
A missing or non-finite value (e.g. a step the filter skipped) is ignored, not counted.
A drop signal also needs its peak to be meaningful: ``a_t`` must have fallen by at least
``min_drop`` in absolute terms, so a metric that is already ~0 cannot "halve" on noise.

The defaults of :class:`CollapseConfig` were measured on the bandit echo-trap runs
(docs/notebook/2026-11-results-history.md, "Echo-trap early warning"): each threshold
keeps a margin beyond the
most extreme value its diagnostic reached on the healthy StarPO / StarPO-S runs of seeds
0 and 1 (seed 2 held out to check them).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from ragen.config_fields import option
from ragen.errors import ConfigError

__all__ = ["CollapseConfig", "CollapseDetector", "CollapseWarning", "SIGNALS", "ON_COLLAPSE"]

ON_COLLAPSE = ("warn", "stop", "rollback")


# name -> (metric key, kind, config attribute of the threshold)
SIGNALS: dict[str, tuple[str, str, str]] = {
    "group_reward_std": ("rollout/group_reward_std", "drop", "group_std_ratio"),
    "entropy": ("actor/entropy", "drop", "entropy_ratio"),
    "thought_diversity": ("rollout/thought_distinct", "drop", "thought_diversity_ratio"),
    "mutual_info": ("reasoning/mutual_info", "drop", "mutual_info_ratio"),
    "grad_norm": ("actor/grad_norm_max", "spike", "grad_norm_spike"),
    "format_errors": ("rollout/format_error_rate", "surge", "format_error_rise"),
}


_DROP_RATIO = dict(
    gt=0,
    lt=1,
    fix="e.g. 0.5 (fire at half the peak); drop the signal from "
    "trainer.collapse.signals to turn it off",
)


@dataclass
class CollapseConfig:
    """``trainer.collapse``: the detector's windows and thresholds (module docstring).

    The thresholds are 0.9x (drops) or 1.5-2x (spike, surge) the most extreme value seen
    on the healthy StarPO / StarPO-S bandit runs of seeds 0 and 1, rounded to 0.05
    (docs/notebook/2026-11-results-history.md, "Echo-trap early warning").
    """

    enabled: bool = option(True, "run the echo-trap detector over each step's metrics")
    # mutual_info is off by default: its threshold could not be measured here (the
    # bandit's MI is 0 by construction), and a default that is a guess would be worse
    # than none; add it to the list to use it.
    signals: list[str] = option(
        default_factory=lambda: [
            "group_reward_std",
            "entropy",
            "grad_norm",
            "thought_diversity",
            "format_errors",
        ],
        help="which signals run; the others are ignored (mutual_info is off by default: "
        "its threshold is not measured)",
        choices=tuple(SIGNALS),
    )
    min_steps: int = option(4, "no warning before this step (the first steps set the peak)", ge=0)
    window: int = option(3, "moving-average length of the drop and surge signals", ge=1)
    group_std_ratio: float = option(
        0.55,
        "group_reward_std fires when its average falls below ratio x its peak "
        "(healthy minimum 0.64)",
        **_DROP_RATIO,
    )
    entropy_ratio: float = option(
        0.4,
        "entropy fires below ratio x its peak (healthy minimum 0.49; StarPO-S entropy "
        "drifts up, then back)",
        **_DROP_RATIO,
    )
    thought_diversity_ratio: float = option(
        0.3,
        "thought_diversity fires below ratio x its peak (healthy minimum 0.35: a "
        "converged policy repeats itself)",
        **_DROP_RATIO,
    )
    mutual_info_ratio: float = option(
        0.3,
        "mutual_info fires below ratio x its peak (not measured: the signal is off by default)",
        **_DROP_RATIO,
    )
    min_drop: float = option(
        0.02,
        "a drop must also lose at least this much in absolute terms (a metric near 0 "
        "cannot halve on noise)",
        ge=0,
    )
    grad_norm_spike: float = option(
        5.0,
        "grad_norm fires when the step's max exceeds spike x the median of the history "
        "(healthy maximum 3.3)",
        gt=1,
        fix="e.g. 8",
    )
    grad_norm_history: int = option(10, "previous steps in the grad_norm median", ge=1)
    format_error_rise: float = option(
        0.2,
        "format_errors fires when the error rate's average exceeds its running minimum "
        "by this (healthy maximum 0.10)",
        gt=0,
    )


@dataclass(frozen=True)
class CollapseWarning:
    """One warning: which signal, at which step, and a one-line explanation."""

    step: int
    signal: str
    message: str
    value: float
    reference: float
    # the step the decline began: where a drop's moving average peaked (or a surge's was
    # lowest); the warning step itself for a spike. ``trainer.rollback_to=onset`` uses it.
    onset: int = 0


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class CollapseDetector:
    """Feed :meth:`update` one step's metrics at a time; it returns that step's warnings.

    Also exposes ``collapse/<signal>`` diagnostics per step (:attr:`last_metrics`): the
    ratio ``a_t / P_t`` of drop signals, ``x_t / median`` of spikes and ``a_t - min`` of
    surges, so the margin to each threshold can be read off the curves.
    """

    def __init__(self, cfg: CollapseConfig | None = None):
        self.cfg = cfg or CollapseConfig()
        unknown = sorted(set(self.cfg.signals) - set(SIGNALS))
        if unknown:
            raise ConfigError(f"unknown collapse signals {unknown}; choose from {sorted(SIGNALS)}")
        self.reset()

    def reset(self) -> None:
        """Forget every history (after a rollback the trainer replays the kept steps)."""
        c = self.cfg
        self._values = {name: deque(maxlen=max(c.window, c.grad_norm_history)) for name in SIGNALS}
        self._peak: dict[str, float] = {}
        self._low: dict[str, float] = {}
        self._onset: dict[str, int] = {}  # step of the peak (drop) or of the low (surge)
        self._fired: set[str] = set()
        self.last_metrics: dict[str, float] = {}

    @property
    def fired(self) -> set[str]:
        return set(self._fired)

    def update(self, step: int, metrics: Mapping[str, float]) -> list[CollapseWarning]:
        """Add step ``step``'s metrics; return the warnings that fire at this step."""
        c = self.cfg
        out: list[CollapseWarning] = []
        self.last_metrics = {}
        if not c.enabled:
            return out
        for name in c.signals:
            key, kind, attr = SIGNALS[name]
            x = metrics.get(key)
            if not _finite(x):
                continue
            x = float(x)
            hist = self._values[name]
            threshold = float(getattr(c, attr))
            warning = None
            if kind == "spike":
                prev = list(hist)[-c.grad_norm_history :]
                if len(prev) >= min(3, c.grad_norm_history):
                    med = statistics.median(prev)
                    ratio = x / med if med > 0 else (math.inf if x > 0 else 1.0)
                    self.last_metrics[f"collapse/{name}"] = min(ratio, 1e6)
                    if ratio > threshold:
                        warning = (
                            f"{key} {x:.3g} is {ratio:.1f}x the median {med:.3g} of the last "
                            f"{len(prev)} steps (threshold {threshold:g}x)",
                            med,
                        )
                hist.append(x)
            else:
                hist.append(x)
                if len(hist) < c.window:
                    continue
                avg = sum(list(hist)[-c.window :]) / c.window
                if kind == "drop":
                    if avg >= self._peak.get(name, -math.inf):
                        self._onset[name] = step
                    peak = max(self._peak.get(name, avg), avg)
                    self._peak[name] = peak
                    # a peak below min_drop (a metric that was ~0 all along, e.g. the MI
                    # of identical prompts) cannot collapse: report 1, never fire
                    ratio = avg / peak if peak >= max(c.min_drop, 1e-12) else 1.0
                    self.last_metrics[f"collapse/{name}"] = ratio
                    if ratio < threshold and peak - avg >= c.min_drop:
                        warning = (
                            f"{key} fell to {avg:.3g} ({c.window}-step mean), {ratio:.0%} of "
                            f"its peak {peak:.3g} (threshold {threshold:.0%})",
                            peak,
                        )
                else:  # surge
                    if avg <= self._low.get(name, math.inf):
                        self._onset[name] = step
                    low = min(self._low.get(name, avg), avg)
                    self._low[name] = low
                    rise = avg - low
                    self.last_metrics[f"collapse/{name}"] = rise
                    if rise > threshold:
                        warning = (
                            f"{key} rose to {avg:.3g} ({c.window}-step mean) from {low:.3g} "
                            f"(threshold +{threshold:g})",
                            low,
                        )
            if warning is not None and step >= c.min_steps and name not in self._fired:
                self._fired.add(name)
                onset = self._onset.get(name, step) if kind != "spike" else step
                out.append(CollapseWarning(step, name, warning[0], x, warning[1], onset))
        return out


def replay(cfg: CollapseConfig, rows) -> tuple[list[CollapseWarning], list[dict[str, float]]]:
    """Run a detector over logged per-step ``rows`` (``read_metrics``) -> (warnings,
    per-step diagnostics). The same code path the trainer runs online, so thresholds can
    be tuned on finished runs."""
    det = CollapseDetector(cfg)
    warnings, diags = [], []
    for row in rows:
        warnings += det.update(int(row["step"]), row)
        diags.append({"step": row["step"], **det.last_metrics})
    return warnings, diags
