"""The collapse detector on synthetic metric sequences, one signal at a time."""

import math

import pytest

from ragen.trainer.collapse import CollapseConfig, CollapseDetector, replay

# fixed round thresholds, so the expected steps below do not move with the defaults
BASE = dict(
    group_std_ratio=0.5,
    entropy_ratio=0.5,
    thought_diversity_ratio=0.5,
    mutual_info_ratio=0.3,
    grad_norm_spike=8.0,
    format_error_rise=0.3,
)


def _run(key, values, **cfg):
    det = CollapseDetector(CollapseConfig(**{**BASE, **cfg}))
    fired = []
    for step, v in enumerate(values, start=1):
        fired += [(w.step, w.signal) for w in det.update(step, {key: v})]
    return fired, det


def test_group_reward_std_drop_fires_once_after_half_the_peak():
    # 3-step means: .3 .3 .3 | .25 .2 .15 (= half of .3 at step 7, below it at 8)
    values = [0.3, 0.3, 0.3, 0.15, 0.15, 0.15, 0.15, 0.1, 0.1, 0.0]
    fired, det = _run("rollout/group_reward_std", values)
    assert fired == [(8, "group_reward_std")]
    assert det.last_metrics["collapse/group_reward_std"] == pytest.approx((0.1 + 0.1 + 0) / 3 / 0.3)


def test_healthy_and_rising_metrics_never_fire():
    rising = [0.2 + 0.01 * k for k in range(30)]
    noisy = [0.3, 0.25, 0.32, 0.28, 0.3, 0.26, 0.31, 0.27] * 4
    for key in ("rollout/group_reward_std", "actor/entropy", "rollout/thought_distinct"):
        assert _run(key, rising)[0] == [] and _run(key, noisy)[0] == []


def test_drop_needs_an_absolute_loss_and_min_steps():
    tiny = [0.01, 0.01, 0.01, 0.001, 0.001, 0.001, 0.001]  # halves, but by < min_drop
    assert _run("actor/entropy", tiny)[0] == []
    assert _run("actor/entropy", tiny, min_drop=0.0)[0] == [(5, "entropy")]
    early = [1.0, 0.0, 0.0, 0.0]  # fires at step 4 (= min_steps), not before
    assert _run("actor/entropy", early)[0] == [(4, "entropy")]
    assert _run("actor/entropy", early, min_steps=5)[0] == []


def test_entropy_mutual_info_and_thought_diversity_drops():
    seq = [1.0] * 5 + [0.2] * 5
    assert _run("actor/entropy", seq)[0] == [(7, "entropy")]
    assert _run("rollout/thought_distinct", seq)[0] == [(7, "thought_diversity")]
    # mutual_info is off by default (unmeasured threshold); listed, it fires at 30% of
    # its peak (3-step mean 0.2/1 at step 8 ... < 0.3)
    assert _run("reasoning/mutual_info", seq)[0] == []
    signals = ["mutual_info"]
    assert _run("reasoning/mutual_info", seq, signals=signals)[0] == [(8, "mutual_info")]


def test_grad_norm_spike():
    calm = [0.1, 0.12, 0.09, 0.11, 0.1, 0.1]
    assert _run("actor/grad_norm_max", [*calm, 0.7])[0] == []  # 7x: below 8x
    fired, det = _run("actor/grad_norm_max", [*calm, 1.0, 0.1, 5.0])
    assert fired == [(7, "grad_norm")]  # once, even though step 9 spikes again
    assert det.last_metrics["collapse/grad_norm"] > 8


def test_format_error_surge():
    seq = [0.05, 0.0, 0.05, 0.0, 0.1, 0.4, 0.6, 0.7]
    # 3-step means ... min 0.033, then (0.1+0.4+0.6)/3 = 0.367 (+0.33 > 0.3) at step 7
    assert _run("rollout/format_error_rate", seq)[0] == [(7, "format_errors")]


def test_missing_and_non_finite_values_are_skipped():
    seq = [0.3, None, 0.3, math.nan, 0.3, 0.0, 0.0, 0.0]
    fired, _ = _run("rollout/group_reward_std", seq)
    assert fired and fired[0][1] == "group_reward_std"


def test_signals_subset_disabled_and_reset():
    seq = [1.0] * 5 + [0.0] * 5
    assert _run("actor/entropy", seq, signals=["group_reward_std"])[0] == []
    assert _run("actor/entropy", seq, enabled=False)[0] == []
    fired, det = _run("actor/entropy", seq)
    det.reset()
    for step, v in enumerate(seq, start=1):
        fired += [(w.step, w.signal) for w in det.update(step, {"actor/entropy": v})]
    assert fired == [(7, "entropy"), (7, "entropy")]
    with pytest.raises(ValueError, match="unknown collapse signals"):
        CollapseDetector(CollapseConfig(signals=["reward"]))


def test_replay_matches_online_updates():
    rows = [{"step": s, "actor/entropy": v} for s, v in enumerate([1.0] * 5 + [0.1] * 5, 1)]
    warnings, diags = replay(CollapseConfig(**BASE), rows)
    assert [(w.step, w.signal) for w in warnings] == [(7, "entropy")]
    assert len(diags) == 10 and "collapse/entropy" in diags[-1]


def test_onset_is_the_step_the_moving_average_peaked():
    det = CollapseDetector(CollapseConfig(**BASE))
    seq = [0.2, 0.3, 0.4, 0.5, 0.2, 0.1, 0.0, 0.0, 0.0]  # 3-step mean peaks at step 4
    warnings = [w for s, v in enumerate(seq, 1) for w in det.update(s, {"actor/entropy": v})]
    assert [(w.step, w.onset) for w in warnings] == [(7, 4)]
