"""The ``algo`` section: the StarPO-S filter, dynamic sampling, advantages and the PPO
update. Each enumerated key's choices come from the module that consumes it (the
registries of ``ragen.algo``, the credit constants of ``ragen.trainer.credit``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragen.algo.filtering import FILTER_METRICS, FILTER_STRATEGIES
from ragen.algo.kl import KL_KINDS
from ragen.algo.losses import LOSS_AGG_MODES
from ragen.algo.normalize import GROUPINGS, METHODS
from ragen.algo.registry import list_advantage_estimators, list_policy_losses
from ragen.config_fields import option
from ragen.trainer.credit import ADVANTAGE_TOKENS, REWARD_PLACEMENTS, TURN_BASELINES


@dataclass
class FilterConfig:
    strategy: str = option(
        "top_p",
        "how many of the ranked groups to keep (ragen.algo.filtering): top_p (a "
        "fraction), top_k (a number), nucleus (a share of the metric's mass), min_p "
        "(metric >= value x the best), threshold / min_std (metric >= value)",
        choices=FILTER_STRATEGIES,
    )
    value: float = option(
        1.0,
        "the strategy's parameter; top_p: the fraction of groups kept (1.0 = no "
        "filtering; StarPO-S keeps 0.25)",
    )
    include_zero: bool = option(
        True, "keep the groups whose rewards do not vary when they rank high enough"
    )
    metric: str = option(
        "reward_std",
        "what groups are ranked by: the in-group reward_std or reward_var, the "
        "mean reward, entropy (mean surprisal of the sampled tokens) or length (response "
        "tokens)",
        choices=FILTER_METRICS,
    )


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling: drop the groups whose episodes all agree (every one
    succeeds, or every one fails: no advantage under a group baseline) and roll out fresh
    initial states until ``rollout.env_groups`` informative groups are kept or
    ``max_rounds`` refills are spent (``ragen.trainer.dynamic_sampling``)."""

    enabled: bool = option(False, "drop the groups whose episodes all agree and refill")
    on: str = option(
        "success",
        "what must differ within a group: success (solved or not) or reward (the episode reward)",
        choices=("success", "reward"),
    )
    max_rounds: int = option(3, "refill rollouts per step, each of rollout.env_groups groups", ge=0)


_DISCOUNT = dict(ge=0, le=1, fix="1.0 is no discounting")


@dataclass
class AlgoConfig:
    name: str = option("starpo", "the preset's name (informational, logged with the run)")
    adv_estimator: str = option(
        "gae",
        "the advantage estimator (ragen.algo.registry; docs/ALGORITHMS.md); what it "
        "needs (a critic, turn rewards, groups) is checked against the other keys",
        choices=list_advantage_estimators,
    )
    use_critic: bool = option(True, "train a critic (value model); critic estimators need it")
    reward_placement: str = option(
        "trajectory",
        "trajectory: the episode's reward at its last token; turn: each turn's "
        "reward at its turn end (the bi-level and turn estimators need it)",
        choices=REWARD_PLACEMENTS,
    )
    norm_grouping: str = option(
        "none",
        "which samples share statistics in the reward normalization before the "
        "advantages: none, state (a group) or the whole batch",
        choices=GROUPINGS,
    )
    norm_method: str = option(
        "identity",
        "the reward normalization before the advantages (ragen.algo.normalize): ARPO is "
        "identity, BRPO and GRPO mean_std",
        choices=METHODS,
    )
    whiten_advantages: bool = option(
        False, "standardize the advantages over the batch's response tokens"
    )
    turn_baseline: str = option(
        "turn",
        "windowed turns: the baseline comes from the same turn index of the group's "
        "episodes (turn) or from every turn that saw the same observation (state)",
        choices=TURN_BASELINES,
    )
    gamma: float = option(1.0, "discount per token", **_DISCOUNT)
    lam: float = option(1.0, "GAE lambda", **_DISCOUNT)
    gamma_turn: float = option(0.95, "discount across turns", **_DISCOUNT)
    lam_turn: float = option(1.0, "GAE lambda across turns", **_DISCOUNT)
    gamma_token: float = option(1.0, "discount between the tokens of a turn", **_DISCOUNT)
    lam_token: float = option(1.0, "GAE lambda within a turn", **_DISCOUNT)
    window_gamma: float = option(
        1.0,
        "windowed samples (rollout.context_window set): the discount of later turns' "
        "rewards in a turn's reward-to-go, its score; 1 = the undiscounted rest of the "
        "episode, 0 = the turn's own reward only",
        **_DISCOUNT,
    )
    filter: FilterConfig = field(default_factory=FilterConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    policy_loss: str = option(
        "ppo",
        "the policy loss (ragen.algo.registry): ppo is the clipped surrogate with a "
        "decoupled clip range and dual clip",
        choices=list_policy_losses,
    )
    kl_coef: float = option(
        0.001,
        "weight of the KL to the reference model (StarPO 0.001; StarPO-S 0, which "
        "needs no reference model)",
        ge=0,
        fix="0 turns it off",
    )
    kl_type: str = option(
        "low_var_kl",
        "the KL estimator: k1 (= kl), abs, k2 (= mse), or k3 (= low_var_kl)",
        choices=KL_KINDS,
    )
    kl_in_reward: bool = option(
        False, "true: subtract kl_coef x KL from the token rewards; false: a KL loss term"
    )
    clip_ratio_low: float = option(
        0.2,
        "PPO clip below: the ratio is clipped at 1 - clip_ratio_low",
        ge=0,
        lt=1,
        fix="e.g. 0.2",
    )
    clip_ratio_high: float = option(
        0.2,
        "PPO clip above: the ratio is clipped at 1 + clip_ratio_high (StarPO-S: 0.28, clip-higher)",
        ge=0,
        fix="e.g. 0.28",
    )
    clip_ratio_c: float = option(
        3.0,
        "dual clip: the loss of a negative-advantage token is capped at -A x c",
        gt=1,
        fix="use 3.0 (default)",
    )
    value_clip: float = option(
        0.5,
        "the critic's update is clipped to old value +- this (PPO value clipping)",
        ge=0,
        fix="e.g. 0.5",
    )
    entropy_coef: float = option(
        0.001, "weight of the entropy bonus in the policy loss", ge=0, fix="0 turns it off"
    )
    loss_agg_mode: str = option(
        "token-mean",
        "how token losses add up to a loss (ragen.algo.losses.agg_loss)",
        choices=LOSS_AGG_MODES,
    )
    ppo_epochs: int = option(1, "passes over the step's samples", ge=1)
    critic_epochs: int = option(
        0,
        "the critic's passes over the step's samples (minibatches as the actor's); 0: "
        "ppo_epochs. More lets a value baseline learn per-state values in few steps, "
        "the actor's update unchanged",
        ge=0,
        fix="0 (as ppo_epochs) or a positive integer",
    )
    ppo_mini_batch_size: int = option(32, "trajectories per optimizer step", ge=1)
    micro_token_budget: int = option(
        0,
        "padded tokens per forward/backward micro-batch; 0 (auto): 8192, or when less fits "
        "in the free memory the power of two below what fits (ragen.models.memory; the run "
        "prints it); too many to fit is an error at start",
        ge=0,
        fix="0 picks what fits in memory; e.g. 8192",
    )
    grad_clip: float = option(
        1.0,
        "clip the gradient norm of each optimizer step to this",
        gt=0,
        fix="e.g. 1.0 (default); a huge value such as 1e9 leaves gradients unclipped",
    )
    skip_grad_norm_above: float | None = option(
        None,
        "skip the optimizer step when the grad norm exceeds this (VAGEN); null: never",
        gt=0,
        fix="null never skips; e.g. 10 skips optimizer steps whose grad norm exceeds 10",
    )
    loss_norm_constant: int | None = option(
        None,
        "the constant seq-mean-token-sum-norm (Dr.GRPO) divides by; null: the response "
        "budget of one sample (rollout.max_new_tokens x turns per sample)",
        ge=1,
        fix="null uses the response budget of one sample (rollout.max_new_tokens x turns)",
    )
    budget_is_terminal: bool = option(
        True,
        "critic estimators bootstrap V(s_end) where the return continues; true: the "
        "turn and action budgets count as termination (our prompts show what is left of "
        "them, so the budget is part of the state)",
    )
    advantage_tokens: str = option(
        "response",
        "the tokens the GAE recursion of masked_gae runs over (M_adv): response, "
        "or response_and_turn_end (also the template tokens that close each turn)",
        choices=ADVANTAGE_TOKENS,
    )
    pg_min_entropy: float = option(
        0.0,
        "policy gradient only on forking tokens: a response token whose entropy under "
        "the behaviour policy is below this many nats gets advantage 0 (its entropy bonus "
        "and KL still apply); 0 = every token (docs/ALGORITHMS.md)",
        ge=0,
        fix="0 trains every token; e.g. 0.1 leaves near-certain template tokens out",
    )
    advantage_floor: float | None = option(
        None,
        "advantages below this floor are raised to it before the update; 0 keeps only "
        "the better-than-baseline samples' push (filtered behaviour cloning); null: off "
        "(docs/ALGORITHMS.md)",
    )
