"""ragen.stats: the intervals behind every reported gain."""

import math

import numpy as np
import pytest

from ragen.stats import (
    Interval,
    binomial_half_width,
    paired_bootstrap,
    paired_differences,
    seed_t_interval,
    stratified_paired_bootstrap,
)


def test_paired_bootstrap_of_a_clear_gain_excludes_zero_and_is_seeded():
    rng = np.random.default_rng(0)
    before = (rng.random(512) < 0.4).astype(float)
    after = np.where(rng.random(512) < 0.25, 1.0, before)  # ~15 points gained, never lost
    gain = paired_bootstrap(after - before)
    assert gain.mean == pytest.approx(float((after - before).mean()))
    assert 0 < gain.low < gain.mean < gain.high
    assert gain.excludes_zero and gain.n == 512
    assert paired_bootstrap(after - before) == gain  # the same draws in any process


def test_paired_bootstrap_matches_the_normal_interval_of_the_mean_difference():
    # for a large sample the percentile interval is mean ± 1.96 sd / sqrt(n)
    rng = np.random.default_rng(1)
    d = rng.choice([-1.0, 0.0, 1.0], p=[0.1, 0.7, 0.2], size=2000)
    gain = paired_bootstrap(d, draws=20_000)
    half = 1.96 * d.std(ddof=1) / math.sqrt(d.size)
    assert gain.high - gain.mean == pytest.approx(half, rel=0.08)
    assert gain.mean - gain.low == pytest.approx(half, rel=0.08)


def test_no_difference_gives_an_interval_around_zero():
    d = [1.0, -1.0] * 100 + [0.0] * 312
    gain = paired_bootstrap(d)
    assert gain.mean == 0 and gain.low < 0 < gain.high and not gain.excludes_zero


def test_paired_differences_pair_by_state_and_refuse_disjoint_states():
    diffs, states = paired_differences({3: 0.0, 1: 1.0, 2: 1.0}, {1: 1.0, 3: 1.0, 9: 0.0})
    assert states == [1, 3] and diffs.tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="share no state"):
        paired_differences({1: 0.0}, {2: 1.0})


def test_stratified_bootstrap_weighs_every_seed_equally():
    seeds = [[1.0] * 100, [0.0] * 400]  # seed means 1.0 and 0.0 -> 0.5, whatever the sizes
    pooled = stratified_paired_bootstrap(seeds)
    assert pooled.mean == pytest.approx(0.5) and pooled.low == pooled.high == pytest.approx(0.5)
    assert pooled.n == 500 and pooled.method == "stratified paired bootstrap"


def test_seed_t_interval_uses_student_t():
    i = seed_t_interval([0.10, 0.12, 0.08])
    half = 4.303 * np.std([0.10, 0.12, 0.08], ddof=1) / math.sqrt(3)
    assert i.mean == pytest.approx(0.10)
    assert (i.low, i.high) == pytest.approx((0.10 - half, 0.10 + half))
    one = seed_t_interval([0.2])
    assert one.low == -math.inf and one.high == math.inf


def test_binomial_half_width_of_a_cell():
    assert binomial_half_width(0.5, 128) == pytest.approx(0.0866, abs=1e-4)
    assert binomial_half_width(0.5, 512) == pytest.approx(0.0433, abs=1e-4)
    with pytest.raises(ValueError):
        binomial_half_width(0.5, 0)


def test_interval_points_and_format():
    i = Interval(0.082, 0.049, 0.115, 512, "paired bootstrap").points()
    assert i.format() == "+8.2 [+4.9, +11.5]"
    assert Interval(-0.01, -0.03, 0.01, 3, "seed t").points().format() == "-1.0 [-3.0, +1.0]"


@pytest.mark.parametrize("bad", [[], [[1.0], []]])
def test_bad_inputs_are_refused(bad):
    with pytest.raises(ValueError):
        if bad and isinstance(bad[0], list):
            stratified_paired_bootstrap(bad)
        else:
            paired_bootstrap(bad)
