"""Intervals for the figures ragen reports: paired gains over held-out states and seeds.

A before/after gain measured on the same N held-out states is paired: each state gives
one difference ``d_i = after_i - before_i`` (for success, each of -1, 0, +1), and the
gain is their mean. Its 95% interval comes from the **paired bootstrap**: draw N states
with replacement, ``B`` times, take the mean difference of each draw, and read the
2.5th and 97.5th percentiles of those ``B`` means. Over several seeds the same is done
over (seed, state) pairs, each seed's states resampled within that seed (a stratified
bootstrap: every draw keeps every seed's share); the seed-level Student-t interval is
the other view, the spread of whole runs, and with 3 seeds it is wide.

Pure functions over lists and numpy arrays, seeded: the same outcomes give the same
interval in any process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

#: bootstrap draws of every interval (10,000: the percentiles then move by < 0.1 point)
BOOTSTRAP_DRAWS = 10_000
#: two-sided 97.5% quantiles of Student's t by degrees of freedom (1..30; the normal's
#: 1.96 beyond), so the seed-level interval needs no scipy
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% interval, in the units of the inputs (a success rate of 0.5
    is 0.5; :meth:`points` gives percentage points)."""

    mean: float
    low: float
    high: float
    n: int  # paired units behind it: states, (seed, state) pairs or seeds
    method: str  # "paired bootstrap", "stratified paired bootstrap", "seed t", "binomial"

    @property
    def excludes_zero(self) -> bool:
        """Whether the whole interval lies on one side of 0 (a gain or loss shown)."""
        return self.low > 0 or self.high < 0

    def points(self) -> Interval:
        """The same interval in percentage points (x100)."""
        return Interval(100 * self.mean, 100 * self.low, 100 * self.high, self.n, self.method)

    def format(self, digits: int = 1, sign: bool = True) -> str:
        """``+8.2 [+4.9, +11.5]``."""
        f = f"{{:{'+' if sign else ''}.{digits}f}}"
        return f"{f.format(self.mean)} [{f.format(self.low)}, {f.format(self.high)}]"

    def to_json(self) -> dict:
        return asdict(self)


def paired_differences(
    before: dict[int, float], after: dict[int, float]
) -> tuple[np.ndarray, list[int]]:
    """``after[s] - before[s]`` for every state ``s`` both measured, as a (N,) float
    array in the order of the sorted state keys (the keys are returned with it).

    Raises ``ValueError`` when the two share no state: an unpaired comparison is not
    what these intervals are for."""
    states = sorted(set(before) & set(after))
    if not states:
        raise ValueError("before and after share no state: nothing to pair")
    diffs = np.array([float(after[s]) - float(before[s]) for s in states], dtype=np.float64)
    return diffs, states


def paired_bootstrap(
    diffs: Sequence[float] | np.ndarray, draws: int = BOOTSTRAP_DRAWS, seed: int = 0
) -> Interval:
    """The mean of per-state differences ``diffs`` (N,) and its 95% paired-bootstrap
    interval: ``B = draws`` resamples of the N states with replacement,

        mean_b = (1/N) sum_i d[idx_b,i],   interval = [q_2.5(mean_b), q_97.5(mean_b)].
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"diffs must be a non-empty 1-D sequence, got shape {d.shape}")
    rng = np.random.default_rng(seed)
    means = _resampled_means(d, draws, rng)
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(float(d.mean()), float(low), float(high), int(d.size), "paired bootstrap")


def stratified_paired_bootstrap(
    diffs_by_seed: Sequence[Sequence[float] | np.ndarray],
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = 0,
) -> Interval:
    """The mean gain over seeds, each seed's states resampled within that seed.

    ``diffs_by_seed[k]`` is seed k's per-state differences (N_k,). Each draw resamples
    every seed's states with replacement and averages the seeds' means (each seed weighs
    the same, as in the per-seed table):

        mean_b = (1/K) sum_k (1/N_k) sum_i d_k[idx_bk,i].

    This interval holds the run-to-run variation of the seeds measured fixed; the spread
    between seeds is :func:`seed_t_interval`'s.
    """
    groups = [np.asarray(d, dtype=np.float64) for d in diffs_by_seed]
    if not groups or any(g.ndim != 1 or g.size == 0 for g in groups):
        raise ValueError("every seed needs a non-empty 1-D list of per-state differences")
    rng = np.random.default_rng(seed)
    means = np.mean([_resampled_means(g, draws, rng) for g in groups], axis=0)  # (draws,)
    low, high = np.percentile(means, [2.5, 97.5])
    mean = float(np.mean([g.mean() for g in groups]))
    n = sum(int(g.size) for g in groups)
    return Interval(mean, float(low), float(high), n, "stratified paired bootstrap")


def seed_t_interval(values: Sequence[float]) -> Interval:
    """The mean of per-seed values (K,) with its Student-t 95% interval,
    ``mean ± t_{0.975, K-1} * sd / sqrt(K)``; with one seed the interval is unbounded."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("seed_t_interval needs at least one value")
    mean = float(v.mean())
    if v.size == 1:
        return Interval(mean, -math.inf, math.inf, 1, "seed t")
    dof = v.size - 1
    t = _T975[dof - 1] if dof <= len(_T975) else 1.96
    half = t * float(v.std(ddof=1)) / math.sqrt(v.size)
    return Interval(mean, mean - half, mean + half, int(v.size), "seed t")


def binomial_half_width(rate: float, n: int) -> float:
    """Half the normal-approximation 95% interval of a success rate measured on ``n``
    episodes, ``1.96 * sqrt(p (1 - p) / n)``: the noise of one cell (at p = 0.5, n = 128:
    0.087, i.e. ±8.7 points; its standard error alone is 4.4)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    p = min(max(float(rate), 0.0), 1.0)
    return 1.96 * math.sqrt(p * (1 - p) / n)


def _resampled_means(d: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws,) means of ``d`` resampled with replacement, in chunks that keep the index
    matrix small (10,000 x 512 int64 would be 40 MB at once)."""
    out = np.empty(draws, dtype=np.float64)
    chunk = max(1, 2_000_000 // max(d.size, 1))
    for start in range(0, draws, chunk):
        stop = min(draws, start + chunk)
        idx = rng.integers(0, d.size, size=(stop - start, d.size))
        out[start:stop] = d[idx].mean(axis=1)
    return out
