"""The RL core of ragen: pure, vectorized tensor functions (no I/O, no trainer, no envs).

Tensors are ``(batch, seq)`` over the full multi-turn training sequence; names and
``loss_agg_mode`` strings follow verl's ``core_algos``. Formulas and design choices are
collected in docs/ALGORITHMS.md.

Modules, one job each:
  utils       masked_sum / masked_mean / masked_var / masked_whiten
  groups      group ids (index) and per-group statistics
  scan        packing of response tokens and the blocked discounted scan behind GAE
  gae         compute_gae, compute_masked_gae, compute_bi_level_gae, compute_turn_gae
  outcome     compute_grpo, compute_drgrpo, compute_rloo, compute_reinforce_plus_plus
  registry    get_advantage_estimator / register_advantage_estimator / needs_critic ...
  normalize   normalize_scores (ARPO / BRPO / GRPO score normalization)
  filtering   filter_groups (StarPO-S uncertainty filtering)
  losses      agg_loss, ppo_policy_loss, value_loss, explained_variance
  kl          kl_penalty, apply_kl_to_rewards, kl_loss
  logits      logprobs_from_logits, entropy_from_logits (memory-lean)
"""

from ragen.algo.advantages import (
    AdvantageEstimator,
    compute_bi_level_gae,
    compute_drgrpo,
    compute_gae,
    compute_grpo,
    compute_masked_gae,
    compute_reinforce_plus_plus,
    compute_rloo,
    compute_turn_gae,
    get_advantage_estimator,
    list_advantage_estimators,
    needs_critic,
    needs_index,
    needs_turn_ends,
    register_advantage_estimator,
    sequence_scores,
)
from ragen.algo.filtering import FILTER_STRATEGIES, filter_groups
from ragen.algo.groups import as_group_ids, group_reward_std, group_stats
from ragen.algo.kl import KL_KINDS, apply_kl_to_rewards, kl_loss, kl_penalty
from ragen.algo.logits import entropy_from_logits, logprobs_from_logits
from ragen.algo.losses import (
    LOSS_AGG_MODES,
    agg_denominator,
    agg_loss,
    explained_variance,
    ppo_policy_loss,
    value_loss,
)
from ragen.algo.normalize import GROUPINGS, METHODS, normalize_scores
from ragen.algo.scan import discounted_reverse_cumsum
from ragen.algo.utils import masked_mean, masked_sum, masked_var, masked_whiten

# verl-style aliases, so code written against verl's core_algos reads naturally.
compute_gae_advantage_return = compute_gae
compute_grpo_outcome_advantage = compute_grpo
compute_rloo_outcome_advantage = compute_rloo
compute_policy_loss = ppo_policy_loss
compute_value_loss = value_loss

__all__ = [
    # advantages
    "compute_gae",
    "compute_masked_gae",
    "compute_bi_level_gae",
    "compute_turn_gae",
    "compute_grpo",
    "compute_drgrpo",
    "compute_rloo",
    "compute_reinforce_plus_plus",
    "sequence_scores",
    "discounted_reverse_cumsum",
    # registry
    "AdvantageEstimator",
    "register_advantage_estimator",
    "get_advantage_estimator",
    "list_advantage_estimators",
    "needs_critic",
    "needs_turn_ends",
    "needs_index",
    # normalization and filtering
    "normalize_scores",
    "GROUPINGS",
    "METHODS",
    "filter_groups",
    "FILTER_STRATEGIES",
    "as_group_ids",
    "group_stats",
    "group_reward_std",
    # losses
    "LOSS_AGG_MODES",
    "agg_denominator",
    "agg_loss",
    "ppo_policy_loss",
    "value_loss",
    "explained_variance",
    "KL_KINDS",
    "kl_penalty",
    "apply_kl_to_rewards",
    "kl_loss",
    "logprobs_from_logits",
    "entropy_from_logits",
    # statistics
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    # verl aliases
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_policy_loss",
    "compute_value_loss",
]
