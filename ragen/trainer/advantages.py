"""Advantages: the step's scored batch in, ``advantages`` and ``returns`` out.

:func:`advantage_phase` is the phase: the in-reward KL penalty (``algo.kl_in_reward``),
the registered estimator by name (``algo.adv_estimator``), whitening, the masks (the
policy trains on M_loss, the critic fits M_adv), then the optional advantage floor and
forking-token mask (:func:`floor_advantages`, :func:`mask_certain_tokens`), with their
metrics. Only config and
tensors: no model runs here, so it is the same on any number of ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ragen import algo
from ragen.batching import TrainingBatch

if TYPE_CHECKING:
    from .config import AlgoConfig


def advantage_phase(
    a: AlgoConfig, batch: TrainingBatch, metrics: dict[str, float], estimated: bool = False
) -> None:
    """:func:`compute_advantages`, then ``algo.advantage_floor`` and ``algo.pg_min_entropy``."""
    compute_advantages(a, batch, metrics, estimated=estimated)
    if a.advantage_floor is not None:
        metrics.update(floor_advantages(batch, a.advantage_floor))
    if a.pg_min_entropy > 0:
        metrics.update(mask_certain_tokens(batch, a.pg_min_entropy))


def compute_advantages(
    a: AlgoConfig, batch: TrainingBatch, metrics: dict[str, float], estimated: bool = False
) -> None:
    """Advantages and returns by the configured estimator, then whitening, the masks
    and their metrics. ``estimated``: ``batch.advantages``/``returns`` already hold
    the estimator's output (the critic's one-pass update ran it per micro-batch)."""
    rewards = batch.token_level_scores
    mask = batch.response_mask
    if a.kl_coef > 0 and a.kl_in_reward:
        kl = algo.kl_penalty(batch.old_log_prob, batch.ref_log_prob, a.kl_type)
        rewards = algo.apply_kl_to_rewards(rewards, kl, mask, a.kl_coef)
        metrics["actor/reward_kl"] = float(algo.masked_mean(kl, mask))
    batch.token_level_rewards = rewards
    if estimated:
        advantages, returns = batch.advantages, batch.returns
    else:
        advantages, returns = estimate(a, batch, rewards)
    if a.whiten_advantages:
        advantages = algo.masked_whiten(advantages, mask)
    # the policy trains on sampled ids (M_loss); the critic fits returns wherever the
    # recursion ran (M_adv), so turn-close values are learned, not left at init
    batch.advantages = advantages * mask
    batch.returns = returns * batch.advantage_mask
    metrics["actor/advantage_mean"] = float(algo.masked_mean(advantages, mask))
    metrics["actor/advantage_abs_max"] = float((advantages.abs() * mask).max())
    metrics["actor/bootstrapped_frac"] = float(batch.bootstrap_mask.mean())
    if batch.values is not None:
        metrics["critic/explained_variance"] = float(
            algo.explained_variance(batch.values, batch.returns, batch.advantage_mask)
        )
        metrics["critic/value_mean"] = float(algo.masked_mean(batch.values, mask))


def estimate(
    a: AlgoConfig, batch: TrainingBatch, rewards: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of the configured estimator on ``batch`` (rewards:
    its token-level rewards, default the scores)."""
    estimator = algo.get_advantage_estimator(a.adv_estimator)
    return estimator(
        token_level_rewards=batch.token_level_scores if rewards is None else rewards,
        response_mask=batch.response_mask,
        values=batch.values,
        index=batch.index,
        turn_end_mask=batch.turn_end_mask,
        advantage_mask=batch.advantage_mask,
        bootstrap_value=(
            None if batch.final_values is None else batch.final_values * batch.bootstrap_mask
        ),
        gamma=a.gamma,
        lam=a.lam,
        gamma_turn=a.gamma_turn,
        lam_turn=a.lam_turn,
        gamma_token=a.gamma_token,
        lam_token=a.lam_token,
    )


def mask_certain_tokens(batch: TrainingBatch, min_entropy: float) -> dict[str, float]:
    """Zero the advantages of response tokens the behaviour policy was nearly certain of.

    ``batch.advantages`` (B, T) *= ``old_entropy >= min_entropy`` on the response tokens
    (``algo.pg_min_entropy``). Why: a reply template's tokens (tags, the words around the
    decision) have p ~ 1 and entropy ~ 0; in a batch of mostly failed episodes they carry
    negative advantages, and although each gradient ``(1 - p)`` is tiny, Adam scales small
    consistent gradients up to full steps, until the template breaks.
    Only the "forking" tokens, where the policy actually chooses, take the policy
    gradient. Returns ``actor/pg_token_frac``, the share of response tokens kept.
    """
    if batch.old_entropy is None or batch.advantages is None:
        raise ValueError("mask_certain_tokens needs old_entropy and advantages on the batch")
    mask = batch.response_mask > 0
    keep = (batch.old_entropy >= min_entropy) & mask
    batch.advantages = batch.advantages * keep.to(batch.advantages.dtype)
    kept = float(keep.sum()) / max(float(mask.sum()), 1.0)
    return {"actor/pg_token_frac": kept}


def floor_advantages(batch: TrainingBatch, floor: float) -> dict[str, float]:
    """Raise the response tokens' advantages below ``floor`` to it (``algo.advantage_floor``).

    ``batch.advantages`` (B, T) = ``max(A, floor)`` on the response tokens. With floor 0
    the update only raises the probability of samples that did better than their
    baseline and never pushes a sampled token down: the policy-gradient form of filtered
    behaviour cloning (RAFT, ReST), with the group or critic baseline as the filter.
    Why: when a reply names its move twice (the thought, then the answer copying it), a
    negative advantage on the copied answer token teaches the answer to differ from the
    thought, and the copy breaks before the decision improves. The
    expected gradient is no longer unbiased; it still moves probability from worse to
    better moves, since raising a token lowers its alternatives.
    Returns ``actor/floored_frac``, the share of response tokens raised.
    """
    if batch.advantages is None:
        raise ValueError("floor_advantages needs advantages on the batch")
    mask = batch.response_mask > 0
    below = (batch.advantages < floor) & mask
    batch.advantages = torch.where(mask, batch.advantages.clamp(min=floor), batch.advantages)
    return {"actor/floored_frac": float(below.sum()) / max(float(mask.sum()), 1.0)}
