"""GRPO / Dr.GRPO / RLOO / REINFORCE++, score normalization and group ids."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ragen.algo import (
    as_group_ids,
    compute_drgrpo,
    compute_grpo,
    compute_reinforce_plus_plus,
    compute_rloo,
    normalize_scores,
)

# Five samples, scores 1, 0 (group 7) and 1, 2, 3 (group 3), each response 2 tokens of 3.
REWARDS = torch.tensor(
    [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 1.0, 1.0], [0.0, 0.0, 3.0]]
)
MASK = torch.tensor([[0, 1, 1]] * 5)
INDEX = [7, 7, 3, 3, 3]


def test_grpo_hand_computed_example():
    # group 7: mean 0.5, std sqrt(0.5) -> +-0.5/0.70711 = +-0.70711
    # group 3: mean 2, std 1 -> -1, 0, 1 (divided by 1 + 1e-6)
    adv, ret = compute_grpo(REWARDS, MASK, INDEX)
    s = 0.5 / math.sqrt(0.5)
    expected = torch.tensor([s, -s, -1.0, 0.0, 1.0])
    torch.testing.assert_close(adv[:, 1], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(adv, expected[:, None] * MASK, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, adv)


def test_drgrpo_and_rloo_hand_computed():
    adv, _ = compute_drgrpo(REWARDS, MASK, INDEX)
    torch.testing.assert_close(adv[:, 2], torch.tensor([0.5, -0.5, -1.0, 0.0, 1.0]))
    # leave-one-out: 1-0, 0-1 ; 1-2.5, 2-2, 3-1.5
    adv, _ = compute_rloo(REWARDS, MASK, INDEX)
    torch.testing.assert_close(adv[:, 2], torch.tensor([1.0, -1.0, -1.5, 0.0, 1.5]))
    assert (adv[:, 0] == 0).all()


def test_grpo_advantages_sum_to_zero_per_group():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(64, 10, generator=gen)
    mask = torch.rand(64, 10, generator=gen) < 0.5
    index = torch.randint(0, 8, (64,), generator=gen)
    for fn in (compute_grpo, compute_drgrpo, compute_rloo):
        per_sample = fn(rewards, mask, index)[0].sum(-1) / mask.sum(-1).clamp_min(1)
        group_sums = torch.zeros(8).index_add(0, index, per_sample * (mask.sum(-1) > 0))
        torch.testing.assert_close(group_sums, torch.zeros(8), atol=1e-4, rtol=0)


def test_singleton_group_gets_zero_and_all_singletons_raise():
    rewards = torch.tensor([[1.0], [0.0], [5.0]])
    mask = torch.ones(3, 1)
    adv, _ = compute_grpo(rewards, mask, [0, 0, 1])
    assert float(adv[2, 0]) == 0.0
    assert float(compute_rloo(rewards, mask, [0, 0, 1])[0][2, 0]) == 0.0
    with pytest.raises(ValueError, match="own group id"):
        compute_grpo(rewards, mask, [0, 1, 2])
    adv, _ = compute_grpo(rewards[:1], mask[:1], [0])  # a batch of one is allowed
    assert float(adv[0, 0]) == 0.0


def test_reinforce_plus_plus_hand_computed():
    # gamma 1: G = [[1, 1], [0, 0]]; whitened: mean 0.5, unbiased std sqrt(1/3)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    adv, ret = compute_reinforce_plus_plus(rewards, torch.ones(2, 2), gamma=1.0)
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    z = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(adv, torch.tensor([[z, z], [-z, -z]]), rtol=1e-5, atol=1e-5)
    # gamma 0.5 with an observation token in between: G = [0.5, 0, 1]
    _, ret = compute_reinforce_plus_plus(
        torch.tensor([[0.0, 9.0, 1.0]]), torch.tensor([[1, 0, 1]]), 0.5
    )
    torch.testing.assert_close(ret, torch.tensor([[0.5, 0.0, 1.0]]))


def test_group_ids_accept_tensors_arrays_strings_in_first_appearance_order():
    expected = [0, 0, 1, 2, 1]
    for index in ([9, 9, 2, 5, 2], np.array([9, 9, 2, 5, 2]), torch.tensor([9, 9, 2, 5, 2]),
                  ["b", "b", "a", "c", "a"], np.array(["b", "b", "a", "c", "a"])):  # fmt: skip
        ids, num_groups = as_group_ids(index, 5)
        assert ids.tolist() == expected and num_groups == 3
    with pytest.raises(ValueError, match="5 samples"):
        as_group_ids([0, 1], 5)
    with pytest.raises(TypeError, match="integer"):
        as_group_ids(torch.zeros(5), 5)


SCORES = torch.tensor([1.0, 0.0, 1.0, 2.0, 3.0])


def test_normalize_scores_paper_variants():
    # ARPO: raw scores
    torch.testing.assert_close(normalize_scores(SCORES, grouping="none", method="identity"), SCORES)
    # BRPO: batch mean 1.4, unbiased std sqrt(5.2/4)
    std = math.sqrt(5.2 / 4)
    brpo = normalize_scores(SCORES, grouping="batch", method="mean_std")
    torch.testing.assert_close(brpo, (SCORES - 1.4) / (std + 1e-6))
    # GRPO: per group
    s = 0.5 / math.sqrt(0.5)
    grpo = normalize_scores(SCORES, INDEX, grouping="state", method="mean_std")
    torch.testing.assert_close(grpo, torch.tensor([s, -s, -1.0, 0.0, 1.0]), rtol=1e-5, atol=1e-5)
    mean = normalize_scores(SCORES, INDEX, grouping="state", method="mean")
    torch.testing.assert_close(mean, torch.tensor([0.5, -0.5, -1.0, 0.0, 1.0]))


def test_normalize_scores_asym_clip():
    # batch: [0]*7 + [10]: mean 1.25, std sqrt(87.5/7)=3.5355 -> failures -0.354, success 2.475
    scores = torch.tensor([0.0] * 7 + [10.0])
    out = normalize_scores(scores, grouping="batch", method="asym_clip")
    torch.testing.assert_close(
        out[0], torch.tensor(-1.25 / math.sqrt(87.5 / 7)), rtol=1e-5, atol=1e-5
    )
    narrow = normalize_scores(scores, grouping="batch", method="asym_clip", clip_range=(-0.2, 2.0))
    assert narrow.tolist()[0] == pytest.approx(-0.2) and narrow.tolist()[-1] == pytest.approx(2.0)


def test_normalize_scores_errors():
    with pytest.raises(ValueError, match="grouping"):
        normalize_scores(SCORES, INDEX, grouping="group")
    with pytest.raises(ValueError, match="method"):
        normalize_scores(SCORES, INDEX, method="zscore")
    with pytest.raises(ValueError, match="needs index"):
        normalize_scores(SCORES, grouping="state")
    with pytest.raises(ValueError, match="own group id"):
        normalize_scores(SCORES, [0, 1, 2, 3, 4], grouping="state", method="mean_std")
