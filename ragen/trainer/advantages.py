"""Advantages: the step's scored batch in, ``advantages`` and ``returns`` out.

:func:`advantage_phase` is the phase: the in-reward KL penalty (``algo.kl_in_reward``),
the registered estimator by name (``algo.adv_estimator``), whitening, the masks (the
policy trains on M_loss, the critic fits M_adv), then the optional advantage floor and
forking-token mask (``ragen.trainer.batching``), with their metrics. Only config and
tensors: no model runs here, so it is the same on any number of ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ragen import algo

from .batching import TrainingBatch, floor_advantages, mask_certain_tokens

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
