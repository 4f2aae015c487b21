"""No function in ragen.algo modifies its inputs in place (docs/ARCHITECTURE.md, "Pitfalls")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ragen.algo as algo

gen = torch.Generator().manual_seed(0)
B, T, V = 6, 9, 13
REWARDS = torch.randn(B, T, generator=gen)
VALUES = torch.randn(B, T, generator=gen)
MASK = torch.tensor([[0, 0, 1, 1, 1, 0, 1, 1, 0]] * B)
ENDS = torch.tensor([[0, 0, 0, 0, 1, 0, 0, 1, 0]] * B)
INDEX_T = torch.tensor([4, 4, 4, 1, 1, 1])
INDEX_NP = np.array([4, 4, 4, 1, 1, 1])
SCORES = torch.randn(B, generator=gen)
LOGP = -torch.rand(B, T, generator=gen)
LOGITS = torch.randn(B, T, V, generator=gen)
LABELS = torch.randint(0, V, (B, T), generator=gen)

CALLS = {
    "compute_gae": lambda: algo.compute_gae(REWARDS, VALUES, MASK, 0.9, 0.8),
    "compute_masked_gae": lambda: algo.compute_masked_gae(
        REWARDS, VALUES, MASK, 0.9, 0.8, advantage_mask=ENDS, bootstrap_value=SCORES
    ),
    "compute_bi_level_gae": lambda: algo.compute_bi_level_gae(
        REWARDS, VALUES, MASK, ENDS, bootstrap_value=SCORES
    ),
    "compute_turn_gae": lambda: algo.compute_turn_gae(REWARDS, VALUES, MASK, ENDS),
    "compute_grpo": lambda: algo.compute_grpo(REWARDS, MASK, INDEX_T),
    "compute_drgrpo": lambda: algo.compute_drgrpo(REWARDS, MASK, INDEX_NP),
    "compute_rloo": lambda: algo.compute_rloo(REWARDS, MASK, INDEX_T),
    "compute_reinforce_plus_plus": lambda: algo.compute_reinforce_plus_plus(REWARDS, MASK, 0.9),
    "registry": lambda: algo.get_advantage_estimator("bi_level_gae")(
        token_level_rewards=REWARDS, response_mask=MASK, values=VALUES, turn_end_mask=ENDS
    ),
    "normalize_scores": lambda: [
        algo.normalize_scores(SCORES, INDEX_T, grouping=g, method=m)
        for g in ("state", "batch")
        for m in algo.METHODS
    ],
    "filter_groups": lambda: algo.filter_groups(SCORES, INDEX_T, "top_p", 0.5, False),
    "group_reward_std": lambda: algo.group_reward_std(SCORES, INDEX_T, episode_ids=torch.arange(B)),
    "agg_loss": lambda: [
        algo.agg_loss(VALUES, MASK, m, norm_constant=T, denominator=d)
        for m in algo.LOSS_AGG_MODES
        for d in (None, algo.agg_denominator(MASK, m, norm_constant=T))
    ],
    "ppo_policy_loss": lambda: algo.ppo_policy_loss(LOGP * 0.9, LOGP, VALUES, MASK, 0.2, 0.28),
    "value_loss": lambda: algo.value_loss(VALUES, REWARDS, VALUES * 0.5, MASK, 0.2),
    "explained_variance": lambda: algo.explained_variance(VALUES, REWARDS, MASK),
    "kl_penalty": lambda: [algo.kl_penalty(LOGP, LOGP * 0.5, k) for k in algo.KL_KINDS],
    "apply_kl_to_rewards": lambda: algo.apply_kl_to_rewards(REWARDS, VALUES, MASK, 0.1),
    "logprobs_from_logits": lambda: algo.logprobs_from_logits(LOGITS, LABELS, chunk_elements=50),
    "entropy_from_logits": lambda: algo.entropy_from_logits(LOGITS, chunk_elements=50),
    "masked_stats": lambda: [
        algo.masked_mean(VALUES, MASK, dim=-1),
        algo.masked_var(VALUES, MASK),
        algo.masked_whiten(VALUES, MASK, shift_mean=False),
    ],
    "discounted_reverse_cumsum": lambda: algo.discounted_reverse_cumsum(VALUES, 0.9, 4),
    "group_ids_and_stats": lambda: algo.group_stats(SCORES, *algo.as_group_ids(INDEX_T, B)),
}
INPUTS = [REWARDS, VALUES, MASK, ENDS, INDEX_T, SCORES, LOGP, LOGITS, LABELS]


@pytest.mark.parametrize("name", sorted(CALLS))
def test_inputs_are_not_modified(name):
    before = [t.clone() for t in INPUTS]
    index_np = INDEX_NP.copy()
    CALLS[name]()
    for original, now in zip(before, INPUTS):
        assert torch.equal(original, now), name
    assert (index_np == INDEX_NP).all()


def test_outputs_do_not_alias_inputs():
    # An in-place edit of an output (e.g. normalizing advantages) must not reach the inputs.
    out = algo.normalize_scores(SCORES, method="identity", grouping="none")
    out += 1
    assert not torch.equal(out, SCORES)
    adv, ret = algo.compute_grpo(REWARDS, MASK, INDEX_T)
    adv += 1
    assert not torch.equal(adv, ret)
