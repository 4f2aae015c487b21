"""Critic-free, outcome-based advantage estimators: GRPO, Dr.GRPO, RLOO, REINFORCE++.

Each sample's *score* is the sum of its token rewards over response tokens
(rewards on non-response positions are ignored, as in the GAE family). Group-relative
estimators compare a sample's score with the other samples of its group (same initial
state, ``index``) and broadcast the resulting scalar advantage over the response.

A group of size 1 has no baseline to compare against: its advantage is 0 (rather than
the raw score, which would silently turn GRPO into plain REINFORCE for that sample). If
*every* group has size 1 (e.g. unique per-sample ids were passed by mistake), these
estimators raise ``ValueError`` instead of returning all zeros.

Outputs are detached float32 ``(B, T)``, 0 at non-response positions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragen.algo.groups import as_group_ids, group_stats
from ragen.algo.registry import register_advantage_estimator
from ragen.algo.scan import discounted_reverse_cumsum, pack_by_mask
from ragen.algo.utils import (
    as_bool_mask,
    as_float,
    check_fraction,
    check_tensor,
    masked_whiten,
)

__all__ = [
    "sequence_scores",
    "compute_grpo",
    "compute_drgrpo",
    "compute_rloo",
    "compute_reinforce_plus_plus",
]


def sequence_scores(token_level_rewards: Tensor, response_mask: Tensor) -> Tensor:
    """score_i = sum_t r_{i,t} * mask_{i,t}.  ``(B, T), (B, T) -> (B,)`` float32."""
    check_tensor("token_level_rewards", token_level_rewards, ndim=2)
    mask = as_bool_mask("response_mask", response_mask, token_level_rewards.shape)
    return (as_float(token_level_rewards) * mask).sum(-1)


def require_real_groups(count: Tensor, who: str) -> None:
    """Raise if every group has one member (group ids unique per sample)."""
    if count.numel() > 1 and bool((count <= 1).all()):
        raise ValueError(
            f"{who}: every sample has its own group id, so every group-relative advantage "
            "would be 0; pass the initial-state group id of each sample as index"
        )


def _broadcast(per_sample: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
    advantages = per_sample.unsqueeze(-1) * (response_mask != 0)
    return advantages, advantages.clone()


@register_advantage_estimator("grpo")
@torch.no_grad()
def compute_grpo(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """GRPO: A_i = (s_i - mean_g) / (std_g + epsilon), broadcast over sample i's response.

    mean_g, std_g: mean and sample (n-1) std of the scores of sample i's group g.
    ``norm_by_std=False`` gives Dr.GRPO, A_i = s_i - mean_g. A group of size 1 gets 0.
    Advantages sum to zero per group (before the std division, which is per group too).

    Args:
        token_level_rewards, response_mask: ``(B, T)``.
        index: ``(B,)`` group ids (tensor, numpy array or list of ints/strings).
    Returns:
        ``(advantages, returns)``, both ``(B, T)`` and equal (there is no critic).
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    ids, num_groups = as_group_ids(index, scores.shape[0], scores.device)
    count, mean, std = group_stats(scores, ids, num_groups)
    require_real_groups(count, "grpo")
    adv = scores - mean[ids]
    if norm_by_std:
        adv = adv / (std[ids] + epsilon)
    adv = torch.where(count[ids] > 1, adv, torch.zeros_like(adv))
    return _broadcast(adv, response_mask)


@register_advantage_estimator("drgrpo")
@torch.no_grad()
def compute_drgrpo(
    token_level_rewards: Tensor, response_mask: Tensor, index
) -> tuple[Tensor, Tensor]:
    """Dr.GRPO ("GRPO done right"): A_i = s_i - mean_g, no std division.

    Pair it with ``loss_agg_mode="seq-mean-token-sum-norm"`` to also drop GRPO's length
    normalization, as the Dr.GRPO paper does. Shapes as ``compute_grpo``.
    """
    return compute_grpo(token_level_rewards, response_mask, index, norm_by_std=False)


@register_advantage_estimator("rloo")
@torch.no_grad()
def compute_rloo(
    token_level_rewards: Tensor, response_mask: Tensor, index
) -> tuple[Tensor, Tensor]:
    """RLOO: leave-one-out baseline, A_i = s_i - (sum_{j in g, j != i} s_j) / (n_g - 1).

    Equivalently A_i = n_g / (n_g - 1) * (s_i - mean_g). A group of size 1 gets 0.
    Shapes as ``compute_grpo``.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    ids, num_groups = as_group_ids(index, scores.shape[0], scores.device)
    count, mean, _ = group_stats(scores, ids, num_groups)
    require_real_groups(count, "rloo")
    n = count[ids]
    baseline = (mean[ids] * n - scores) / (n - 1).clamp_min(1)
    adv = torch.where(n > 1, scores - baseline, torch.zeros_like(scores))
    return _broadcast(adv, response_mask)


@register_advantage_estimator("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus(
    token_level_rewards: Tensor, response_mask: Tensor, gamma: float = 1.0
) -> tuple[Tensor, Tensor]:
    """REINFORCE++: discounted reward-to-go over response tokens, whitened over the batch.

        G_t = r_t + gamma * G_{t'}     (t' = next response token; observation tokens skipped)
        A   = masked_whiten(G, response_mask)   (mean/std over all response tokens of the batch)

    Returns ``(A, G)``, each ``(B, T)`` float32, 0 at non-response positions.
    """
    gamma = check_fraction("gamma", gamma)
    check_tensor("token_level_rewards", token_level_rewards, ndim=2)
    mask = as_bool_mask("response_mask", response_mask, token_level_rewards.shape)
    packing = pack_by_mask(mask)
    returns = packing.unpack(
        discounted_reverse_cumsum(packing.pack(as_float(token_level_rewards)), gamma)
    )
    return masked_whiten(returns, mask), returns
