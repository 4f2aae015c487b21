"""The RL core of ragen: pure, vectorized tensor functions (no I/O, no trainer, no envs).

Tensors are ``(batch, seq)`` over the full multi-turn training sequence; names and
``loss_agg_mode`` strings follow verl's ``core_algos``. Formulas and design choices are
collected in docs/ALGORITHMS.md. This module is the public API; each name comes from the
one submodule that defines it:

  utils       masked_mean / masked_var / masked_whiten
  groups      group ids (index), per-group statistics, group_reward_std (episodes)
  scan        packing of response tokens and the blocked discounted scan behind GAE
  gae         compute_gae, compute_masked_gae, compute_bi_level_gae,
              compute_vagen_bi_level_gae, compute_turn_gae
  outcome     compute_grpo, compute_drgrpo, compute_rloo, compute_reinforce_plus_plus
  registry    advantage estimators and policy losses by name: get_advantage_estimator,
              register_advantage_estimator, needs_critic, get_policy_loss, ...
  normalize   normalize_scores (ARPO / BRPO / GRPO score normalization)
  filtering   filter_groups (StarPO-S uncertainty filtering)
  losses      agg_denominator, agg_loss, ppo_policy_loss, value_loss, explained_variance
  kl          kl_penalty, apply_kl_to_rewards
  logits      logprobs_from_logits, entropy_from_logits (memory-lean)
"""

from ragen.algo.filtering import FILTER_METRICS, FILTER_STRATEGIES, filter_groups
from ragen.algo.gae import (
    compute_bi_level_gae,
    compute_gae,
    compute_masked_gae,
    compute_turn_gae,
    compute_vagen_bi_level_gae,
)
from ragen.algo.groups import as_group_ids, group_reward_std, group_stats
from ragen.algo.kl import KL_KINDS, apply_kl_to_rewards, kl_penalty
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
from ragen.algo.outcome import (
    compute_drgrpo,
    compute_grpo,
    compute_reinforce_plus_plus,
    compute_rloo,
)
from ragen.algo.registry import (
    AdvantageEstimator,
    PolicyLoss,
    get_advantage_estimator,
    get_policy_loss,
    list_advantage_estimators,
    list_policy_losses,
    needs_critic,
    register_advantage_estimator,
    register_policy_loss,
)
from ragen.algo.scan import discounted_reverse_cumsum
from ragen.algo.utils import masked_mean, masked_var, masked_whiten

__all__ = [
    # advantage estimators
    "compute_gae",
    "compute_masked_gae",
    "compute_bi_level_gae",
    "compute_vagen_bi_level_gae",
    "compute_turn_gae",
    "compute_grpo",
    "compute_drgrpo",
    "compute_rloo",
    "compute_reinforce_plus_plus",
    "discounted_reverse_cumsum",
    # registry
    "AdvantageEstimator",
    "register_advantage_estimator",
    "get_advantage_estimator",
    "list_advantage_estimators",
    "needs_critic",
    "PolicyLoss",
    "register_policy_loss",
    "get_policy_loss",
    "list_policy_losses",
    # normalization and filtering
    "normalize_scores",
    "GROUPINGS",
    "METHODS",
    "filter_groups",
    "FILTER_STRATEGIES",
    "FILTER_METRICS",
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
    "logprobs_from_logits",
    "entropy_from_logits",
    # statistics
    "masked_mean",
    "masked_var",
    "masked_whiten",
]
