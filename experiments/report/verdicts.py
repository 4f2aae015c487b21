"""The rule that turns a finding's intervals into its verdict.

A finding is split into **parts**: each a prediction of the paper, measured as one effect
whose sign the paper predicts (signed here so that the prediction is "> 0"), with the
95% interval the data allow (:mod:`experiments.report.gains`: over seeds, or over
events such as collapses), the number of independent units behind it (seeds or events),
and the smallest effect that would matter (``delta``: 5 points of success, 1 step of
warning lead). A part is

* **reproduced** when its interval excludes 0 in the predicted direction, on 3+ units;
* **contradicted** when its interval excludes 0 in the opposite direction, on 3+ units;
* **not shown** when its interval holds 0 and lies below ``delta`` (3+ units): an effect
  of the size that would matter is ruled out;
* **inconclusive** otherwise: fewer than 3 units (one event, one seed), no interval, a
  setup that cannot show the effect (warm starts at random play's level, every variant
  at the ceiling), or an interval wide enough to hold both 0 and ``delta``.

The finding is **reproduced** when every part is, **partly** when some part is
reproduced and another is not, else **contradicted** when some part is, else
**inconclusive** when every part is, else **not shown**. The verdict is over the parts
the results measure; a part whose data are gone is listed as inconclusive with why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragen.stats import Interval

REPRODUCED = "reproduced"
PARTLY = "partly"
NOT_SHOWN = "not shown"
INCONCLUSIVE = "inconclusive"
CONTRADICTED = "contradicted"
#: the fewest independent units (seeds, events) a part needs for anything but inconclusive
MIN_UNITS = 3
#: the smallest effect that matters, by unit of measure
DELTA_POINTS = 5.0
DELTA_STEPS = 1.0


@dataclass(frozen=True)
class Part:
    """One prediction of a finding and its measured effect (signed: > 0 as predicted)."""

    claim: str  # the paper's prediction, in words
    measure: str  # what was measured, in words
    interval: Interval | None  # the effect with its 95% interval, in ``unit``s
    units: int  # independent seeds or events behind the interval
    unit: str = "points"
    delta: float = DELTA_POINTS
    setup_ok: bool = True  # could this setup show the effect at all
    why: str = ""  # why the setup cannot show it, or why there is no interval

    @property
    def verdict(self) -> str:
        return part_verdict(self)

    def evidence(self) -> str:
        """``+98.4 [+94.6, +102.3] points (seed t, 3 seeds)`` or the reason there is none."""
        if self.interval is None:
            return self.why or "no interval"
        method = self.interval.method
        text = f"{self.interval.format()} {self.unit} ({method}, {self.units} {_units(method)})"
        return f"{text}; {self.why}" if self.why else text


def _units(method: str) -> str:
    return "events" if method == "event t" else "seeds"


def part_verdict(part: Part) -> str:
    """A part's verdict by the module's rule."""
    i = part.interval
    if not part.setup_ok or i is None or part.units < MIN_UNITS:
        return INCONCLUSIVE
    if i.low > 0:
        return REPRODUCED
    if i.high < 0:
        return CONTRADICTED
    if i.high < part.delta:
        return NOT_SHOWN
    return INCONCLUSIVE


def finding_verdict(parts: Sequence[Part]) -> str:
    """A finding's verdict from its parts' (module doc)."""
    verdicts = [p.verdict for p in parts]
    if verdicts and all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    if REPRODUCED in verdicts:
        return PARTLY
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if all(v == INCONCLUSIVE for v in verdicts):
        return INCONCLUSIVE
    return NOT_SHOWN


def rule_text() -> str:
    """The rule as the docs state it (the constants above, so the two cannot part)."""
    return f"""A finding is split into **parts**, each one prediction of the paper measured as
one effect, signed so that the paper predicts it above 0, with its 95% interval: the
seed-level t interval over seeds (variants paired by seed, from the same warm starts),
the stratified paired bootstrap where per-state outcomes were kept, or a t interval
over events (collapses) for a timing claim. A part is

* **reproduced**: the interval excludes 0 in the predicted direction, on {MIN_UNITS}+ seeds or events;
* **contradicted**: the interval excludes 0 in the opposite direction, on {MIN_UNITS}+ seeds or events;
* **not shown**: the interval holds 0 and its upper end is below the smallest effect
  that matters ({DELTA_POINTS:g} points of success; {DELTA_STEPS:g} step of warning lead), on {MIN_UNITS}+ units;
* **inconclusive**: anything else: fewer than {MIN_UNITS} seeds or events (a finding judged
  on one event is inconclusive), no interval (the figure's data are gone), a setup that
  cannot show the effect (warm starts at random play's level, every variant at the
  ceiling), or an interval wide enough to hold both 0 and the smallest effect that matters.

A finding is **reproduced** when every part is; **partly** when at least one part is
reproduced and another is not; otherwise **contradicted** when a part is; **inconclusive**
when every part is; **not shown** otherwise. `python -m experiments.report` applies the
rule to the results files (`experiments/report/verdicts.py`)."""
