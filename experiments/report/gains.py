"""A before/after gain, per seed and pooled, with the interval its data allow.

Which interval a gain gets depends on what the results file kept:

* **per-state outcomes** (both evaluations on the same N held-out states): each seed's
  gain gets the paired bootstrap over its states; two or more seeds are pooled by the
  stratified paired bootstrap over (seed, state) pairs, and with 3+ seeds the seed-level
  t interval is given beside it;
* **success rates only**, 2+ seeds: the seed-level t interval of the per-seed gains;
* **success rates only, one seed**: no interval; the gain is given with the binomial
  noise of its two cells and the reason.

A seed's gain is *beyond noise* when its paired-bootstrap interval excludes 0, or,
without per-state outcomes, when it exceeds the unpaired binomial half-width of its two
cells, ``sqrt(h(p_before, N)^2 + h(p_after, N)^2)`` with ``h`` =
:func:`ragen.stats.binomial_half_width` (the paired noise is smaller when the two
evaluations' outcomes correlate, as they do on shared states, so this errs towards
"within noise").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragen.stats import (
    Interval,
    binomial_half_width,
    paired_bootstrap,
    seed_t_interval,
    stratified_paired_bootstrap,
)


@dataclass(frozen=True)
class SeedGain:
    """One seed's before/after success on ``n`` held-out states (rates in [0, 1])."""

    seed: str
    before: float
    after: float
    n: int
    diffs: tuple[float, ...] | None = None  # per-state after - before, when kept

    @property
    def gain(self) -> float:
        return self.after - self.before

    @property
    def noise(self) -> float:
        """The unpaired binomial half-width of the gain (rate units)."""
        h1 = binomial_half_width(self.before, self.n)
        h2 = binomial_half_width(self.after, self.n)
        return math.hypot(h1, h2)

    @property
    def interval(self) -> Interval | None:
        """The paired-bootstrap interval over states, when the outcomes were kept."""
        return paired_bootstrap(self.diffs) if self.diffs else None

    @property
    def beyond_noise(self) -> bool:
        interval = self.interval
        if interval is not None:
            return interval.excludes_zero
        return abs(self.gain) > self.noise


def seed_gain(seed, before: dict, after: dict, n: int) -> SeedGain:
    """A :class:`SeedGain` from two evaluation records (``success_rate`` and, when kept,
    ``per_state``); the pairs are used only when both lists cover the same states."""
    b, a = before.get("per_state"), after.get("per_state")
    diffs = None
    if b and a and len(a) == len(b):
        diffs = tuple(float(x) - float(y) for x, y in zip(a, b))
        n = len(diffs)
    return SeedGain(
        str(seed), float(before["success_rate"]), float(after["success_rate"]), n, diffs
    )


@dataclass(frozen=True)
class Gain:
    """The seeds' gains pooled: ``interval`` is what a verdict reads (in points)."""

    seeds: tuple[SeedGain, ...]
    interval: Interval | None  # points
    beside: Interval | None = None  # the seed-level t interval next to a bootstrap (points)
    why: str = ""  # why there is no interval

    @property
    def mean(self) -> float:
        return 100 * sum(s.gain for s in self.seeds) / len(self.seeds)

    @property
    def sd(self) -> float:
        if len(self.seeds) < 2:
            return 0.0
        m = self.mean
        return math.sqrt(sum((100 * s.gain - m) ** 2 for s in self.seeds) / (len(self.seeds) - 1))

    @property
    def method(self) -> str:
        """How the interval was made, in words (or why there is none)."""
        k = len(self.seeds)
        if self.interval is None:
            return self.why or "one seed, no per-state outcomes: no interval"
        if self.interval.method == "seed t":
            return f"seed t, {k} seeds"
        if self.interval.method == "paired bootstrap":
            return f"paired bootstrap, {self.interval.n} states"
        return f"stratified paired bootstrap, {k} seeds x {self.interval.n // k} states"

    def text(self, method: bool = True) -> str:
        """``+4.1 [-2.7, +10.9] (seed t, 3 seeds)``; ``-9.8 (one seed, ...)``."""
        if self.interval is None:
            noise = 100 * max(s.noise for s in self.seeds)
            what = "one seed" if len(self.seeds) == 1 else f"{len(self.seeds)} equal seeds"
            return (
                f"{self.mean:+.1f} ({what}, noise ±{noise:.1f})" if method else f"{self.mean:+.1f}"
            )
        core = self.interval.format()
        extra = f"; seed t {self.beside.format()}" if self.beside is not None else ""
        return f"{core} ({self.method}{extra})" if method else core

    def beyond_noise(self) -> list[str]:
        """The seeds whose own gain is beyond noise."""
        return [s.seed for s in self.seeds if s.beyond_noise]

    def seeds_text(self) -> str:
        """``2 of 3 (s1, s2)``: seeds whose gain is beyond their own noise."""
        shown = self.beyond_noise()
        names = f" (s{', s'.join(shown)})" if shown and len(self.seeds) > 1 else ""
        return f"{len(shown)} of {len(self.seeds)}{names}"


def pool(seeds: Sequence[SeedGain]) -> Gain:
    """The gains of ``seeds`` pooled with the interval their data allow (module doc)."""
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("no seed to pool")
    with_states = all(s.diffs for s in seeds)
    t = seed_t_interval([s.gain for s in seeds]).points() if len(seeds) > 1 else None
    if with_states and len(seeds) == 1:
        return Gain(seeds, paired_bootstrap(seeds[0].diffs).points())
    if with_states:
        strat = stratified_paired_bootstrap([s.diffs for s in seeds]).points()
        return Gain(seeds, strat, t if len(seeds) >= 3 else None)
    if t is not None and t.low == t.high:
        why = "seeds with equal gains and no per-state outcomes: no interval"
        return Gain(seeds, None, why=why)
    return Gain(seeds, t)


def difference(a: Sequence[float], b: Sequence[float]) -> Interval:
    """``a - b`` paired by seed (two variants from the same warm starts), in the inputs'
    units, with the seed-level t interval."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} against {len(b)} seeds: pair them by seed first")
    return seed_t_interval([x - y for x, y in zip(a, b)])


def pct(rate: float | None) -> str:
    """``0.5214`` -> ``52.1%``; None -> ``-``."""
    return "-" if rate is None else f"{100 * rate:.1f}%"


def mean_sd(values: Sequence[float], scale: float = 100.0, unit: str = "%", digits: int = 1) -> str:
    """``52.1 ± 9.9%`` over seeds (one value alone: ``52.1%``; NaNs are left out)."""
    v = [scale * x for x in values if x == x]
    if not v:
        return "-"
    if len(v) == 1:
        return f"{v[0]:.{digits}f}{unit}"
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return f"{m:.{digits}f} ± {sd:.{digits}f}{unit}"
