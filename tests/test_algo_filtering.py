"""StarPO-S uncertainty filtering."""

from __future__ import annotations

import pytest
import torch

from ragen.algo import filter_groups, group_reward_std

# groups (first appearance order), population std: g0 0, g1 0.5, g2 1, g3 0, g4 0.5
SCORES = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 2.0, 5.0, 5.0, 0.0, 1.0])
INDEX = ["g0", "g0", "g0", "g1", "g1", "g2", "g2", "g3", "g3", "g4", "g4"]
SAMPLE_GROUP = [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def kept_groups(mask):
    return sorted({g for g, keep in zip(SAMPLE_GROUP, mask.tolist()) if keep})


@pytest.mark.parametrize(
    "strategy,value,include_zero,expected",
    [
        ("top_p", 0.25, True, [1, 2]),  # ceil(1.25) = 2 groups; g1 beats g4 (tie, earlier)
        ("top_p", 0.01, True, [2]),  # at least one group
        ("top_p", 1.0, False, [1, 2, 4]),  # zero-std groups never kept
        ("top_k", 3, True, [1, 2, 4]),
        ("top_k", 4, True, [0, 1, 2, 4]),  # g0 beats g3 (tie at 0, earlier)
        ("top_k", 4, False, [1, 2, 4]),
        ("top_k", 99, True, [0, 1, 2, 3, 4]),
        ("min_std", 0.5, True, [1, 2, 4]),
        ("min_std", 0.6, True, [2]),
        ("min_std", 0.0, False, [1, 2, 4]),
        ("min_std", 2.0, True, []),
    ],
)
def test_filter_keeps_expected_groups(strategy, value, include_zero, expected):
    mask, metrics = filter_groups(SCORES, INDEX, strategy, value, include_zero)
    assert mask.dtype == torch.bool and mask.shape == (11,)
    assert kept_groups(mask) == expected
    assert metrics["num_groups"] == 5 and metrics["num_groups_kept"] == len(expected)


def test_filter_metrics():
    mask, metrics = filter_groups(SCORES, INDEX, "top_p", 0.25)
    s = 0.5
    assert metrics["std_mean_before"] == pytest.approx((0 + s + 2 * s + 0 + s) / 5)
    assert metrics["std_max_before"] == pytest.approx(2 * s)
    assert metrics["std_mean_after"] == pytest.approx(1.5 * s)
    assert metrics["std_max_after"] == pytest.approx(2 * s)
    assert metrics["kept_group_frac"] == pytest.approx(0.4)
    assert metrics["kept_sample_frac"] == pytest.approx(4 / 11)
    assert all(isinstance(v, float) for v in metrics.values())


def test_filter_ties_follow_first_appearance_not_id_value():
    # ids 9 and 2 have equal std; 9 appears first, so it wins the single slot.
    mask, _ = filter_groups([0.0, 1.0, 0.0, 1.0], torch.tensor([9, 9, 2, 2]), "top_k", 1)
    assert mask.tolist() == [True, True, False, False]


def test_filter_all_zero_std_and_rounding():
    # 0.1 * 3 / 3 != 0.1 in floating point: std must still be exactly 0
    scores = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7], dtype=torch.float64)
    mask, metrics = filter_groups(scores, [0, 0, 0, 1, 1], "top_p", 1.0, include_zero=False)
    assert (
        not mask.any() and metrics["std_max_before"] == 0.0 and metrics["kept_sample_frac"] == 0.0
    )


def test_filter_validation():
    with pytest.raises(ValueError, match="top_p"):
        filter_groups(SCORES, INDEX, "top_p", 0.0)
    with pytest.raises(ValueError, match="top_k"):
        filter_groups(SCORES, INDEX, "top_k", 1.5)
    with pytest.raises(ValueError, match="min_std"):
        filter_groups(SCORES, INDEX, "bottom_p", 0.5)
    with pytest.raises(ValueError, match="11 samples"):
        filter_groups(SCORES, INDEX[:3], "top_p", 0.5)


# A windowed batch: every turn of an episode is its own sample with the same episode
# score. Group 0: episode 10 (score 1, 4 turns) and episode 11 (score 0, 1 turn);
# group 1: episodes 12, 13 (scores 1, 0, 2 turns each); group 2: episodes 14 and 15 with
# equal scores (std 0).
WINDOWED = dict(
    scores=[1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 3.0, 3.0, 3.0],
    index=[0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2],
    episode_ids=[10, 10, 10, 10, 11, 12, 12, 13, 13, 14, 15, 15],
)


def test_filter_ranks_groups_by_the_std_over_episodes():
    w = WINDOWED
    # over samples, group 0 (1, 1, 1, 1, 0) looks less spread than group 1 (1, 1, 0, 0)
    by_sample = group_reward_std(w["scores"], w["index"])
    assert by_sample[0] == pytest.approx(0.4) and by_sample[1] == pytest.approx(0.5)
    # over episodes both are one success and one failure: std 0.5 each
    by_episode = group_reward_std(w["scores"], w["index"], w["episode_ids"])
    assert by_episode.tolist() == pytest.approx([0.5, 0.5, 0.0])
    # so the filter keeps group 0 (tie, earlier) where the per-sample std would keep group 1
    keep, metrics = filter_groups(w["scores"], w["index"], "top_k", 1, episode_ids=w["episode_ids"])
    assert keep.tolist() == [True] * 5 + [False] * 7
    assert metrics["std_mean_before"] == pytest.approx(1 / 3)
    keep_by_sample, _ = filter_groups(w["scores"], w["index"], "top_k", 1)
    assert keep_by_sample.tolist() == [False] * 5 + [True] * 4 + [False] * 3
    # episode ids are told apart within their group: reusing an id across groups is fine
    reused = [0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1]
    assert group_reward_std(w["scores"], w["index"], reused).tolist() == by_episode.tolist()


def test_group_reward_std_definition_and_errors():
    # population std: half 0 / half 1 is 0.5 at any group size; a group of one has std 0
    std = group_reward_std([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 7.0], [0, 0, 1, 1, 1, 1, 2])
    assert std.tolist() == pytest.approx([0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="episode_reward"):
        group_reward_std([1.0, 0.0], [0, 0], episode_ids=[3, 3])


# --- RAGEN-2 variants: strategies x ranking metrics ------------------------------------
# SCORES/INDEX above: std per group [0, .5, 1, 0, .5] (sum 2), mean [1, .5, 1, 5, .5]


@pytest.mark.parametrize(
    "strategy,value,metric,expected",
    [
        # nucleus on std: sorted 1 (g2), .5 (g1), .5 (g4), 0, 0; mass 2
        ("nucleus", 0.5, "reward_std", [2]),  # 1 >= 0.5 * 2
        ("nucleus", 0.6, "reward_std", [1, 2]),  # 1.5 >= 1.2
        ("nucleus", 1.0, "reward_std", [1, 2, 4]),  # zero-mass groups never needed
        # nucleus on variance: 1, .25, .25 (mass 1.5): 0.7 * 1.5 = 1.05 -> 2 groups
        ("nucleus", 0.7, "reward_var", [1, 2]),
        ("min_p", 0.5, "reward_std", [1, 2, 4]),  # >= 0.5 * max(1)
        ("min_p", 0.6, "reward_std", [2]),
        ("min_p", 0.0, "reward_std", [0, 1, 2, 3, 4]),
        ("threshold", 0.5, "reward_std", [1, 2, 4]),
        ("top_k", 1, "reward", [3]),  # highest mean score (5)
        ("top_k", 2, "reward", [0, 3]),  # then g0 (1.0) ties g2 (1.0), g0 first
        ("threshold", 1.0, "reward", [0, 2, 3]),
    ],
)
def test_filter_strategies_and_metrics(strategy, value, metric, expected):
    mask, metrics = filter_groups(SCORES, INDEX, strategy, value, metric=metric)
    assert kept_groups(mask) == expected
    assert metrics["num_groups_kept"] == len(expected)


def test_filter_by_sample_values_entropy_and_length():
    # per-sample values; group means: g0 2, g1 0.5, g2 3, g3 1, g4 4
    values = torch.tensor([2.0, 2.0, 2.0, 0.0, 1.0, 3.0, 3.0, 1.0, 1.0, 4.0, 4.0])
    for metric in ("entropy", "length"):
        mask, metrics = filter_groups(
            SCORES, INDEX, "top_k", 2, metric=metric, sample_values=values
        )
        assert kept_groups(mask) == [2, 4]
        assert metrics["metric_mean_before"] == pytest.approx((2 + 0.5 + 3 + 1 + 4) / 5)
        assert metrics["metric_mean_after"] == pytest.approx(3.5)
    # include_zero=False still drops zero reward-spread groups, whatever the metric
    mask, _ = filter_groups(SCORES, INDEX, "top_k", 5, False, metric="length", sample_values=values)
    assert kept_groups(mask) == [1, 2, 4]


def test_filter_metric_validation():
    with pytest.raises(ValueError, match="sample_values"):
        filter_groups(SCORES, INDEX, "top_p", 0.5, metric="entropy")
    with pytest.raises(ValueError, match="reward_std"):
        filter_groups(SCORES, INDEX, "top_p", 0.5, metric="variance")
    with pytest.raises(ValueError, match="non-negative"):
        filter_groups(SCORES - 3.0, INDEX, "nucleus", 0.5, metric="reward")
    with pytest.raises(ValueError, match="min_p"):
        filter_groups(SCORES, INDEX, "min_p", 1.5)
    with pytest.raises(ValueError, match="threshold"):
        filter_groups(SCORES, INDEX, "min_std", 0.5, metric="reward")
    # no mass at all: nucleus keeps every group (nothing to prefer)
    mask, _ = filter_groups([1.0, 1.0, 2.0, 2.0], [0, 0, 1, 1], "nucleus", 0.5)
    assert mask.all()
