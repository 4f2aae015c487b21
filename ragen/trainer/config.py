"""Typed training configuration with composable presets and dotted CLI overrides.

    ragen train env=sokoban algo=starpo-s model=tiny trainer.total_steps=200 rollout.group_size=16

Resolution order (later wins):

1. the defaults of the dataclasses below (paper defaults, docs/ARCHITECTURE.md "Paper defaults");
2. the ``model`` preset (``ragen/configs/model/<name>.yaml``; any other value is a
   model path or hub id and sets ``model.path``);
3. the ``env`` preset (``ragen/configs/env/<name>.yaml`` if present, otherwise any
   registered environment name, which sets ``env.name``);
4. the ``algo`` preset (``ragen/configs/algo/<name>.yaml``);
5. ``config=path.yaml`` files, then dotted overrides ``section.key=value``.

:func:`load_config` returns a typed :class:`TrainConfig` (plain dataclasses; the
``rollout`` section is :class:`ragen.agent.rollout.RolloutConfig`). Unknown keys, wrong
types, unknown values of enumerated keys (checked against the modules that consume
them) and impossible combinations raise a one-line :class:`~ragen.errors.ConfigError`
naming the full key, the problem and the fix, before anything expensive happens.

Each key's help, type, choices and range live on its field (``option(default, help,
choices=..., ge=...)``, ``ragen.config_fields``): validation reads them, and so do
``ragen train --help-config``, ``--print-config`` and docs/CONFIG.md
(``ragen.trainer.config_help``). The module is long because its ~125 keys carry their
documentation here, next to their defaults, which is the point.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

from ragen import envs
from ragen.agent.env_manager import VAL_SEED_START
from ragen.agent.rollout import RolloutConfig
from ragen.algo.filtering import FILTER_METRICS, FILTER_STRATEGIES
from ragen.algo.kl import KL_KINDS
from ragen.algo.losses import LOSS_AGG_MODES
from ragen.algo.normalize import GROUPINGS, METHODS
from ragen.algo.registry import (
    critic_free_estimators,
    get_advantage_estimator,
    list_advantage_estimators,
    list_policy_losses,
)
from ragen.cli_utils import nest_dotted, parse_value, split_key_value
from ragen.config_fields import check_section, default_of, option, walk_fields
from ragen.engines.base import ENGINE_CHOICES
from ragen.errors import ConfigError
from ragen.models.loading import DTYPE_CHOICES, check_device_spec
from ragen.trainer.batching import ADVANTAGE_TOKENS, REWARD_PLACEMENTS, TURN_BASELINES
from ragen.trainer.collapse import ON_COLLAPSE, CollapseConfig
from ragen.trainer.metrics_logger import WANDB_MODES

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"

__all__ = [
    "ConfigError",
    "LoraConfig",
    "ModelConfig",
    "CurriculumConfig",
    "EnvSection",
    "RolloutConfig",
    "FilterConfig",
    "DynamicSamplingConfig",
    "CollapseConfig",
    "AlgoConfig",
    "TrainerSection",
    "TrainConfig",
    "load_config",
    "validate",
    "preset_names",
    "to_yaml",
    "to_dict",
]


def _check_resume(value: str, key: str) -> None:
    if value not in ("never", "auto") and not Path(value).exists():
        _fail(
            key,
            f"checkpoint {value!r} does not exist",
            "use auto, never, or an existing checkpoint folder",
        )


def _check_rollback_change(value: list[str], key: str) -> None:
    parse_rollback_change(value)


def _fail(key: str, problem: str, fix: str) -> None:
    raise ConfigError(f"{key}: {problem}. Fix: {fix}")


# The sections. Each key's help, choices and range are its field's metadata
# (ragen.config_fields.option); a check that involves two keys is in validate() below.


@dataclass
class LoraConfig:
    rank: int = option(0, "0 = full fine-tuning; > 0 trains LoRA adapters of this rank", ge=0)
    alpha: int = option(16, "LoRA scaling: the adapter's update is scaled by alpha / rank", gt=0)
    dropout: float = option(0.0, "dropout on the LoRA adapters' input", ge=0, lt=1)
    target_modules: list[str] = option(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        help="the modules that get adapters (the attention and MLP projections of "
        "Llama/Qwen-style models)",
    )


@dataclass
class ModelConfig:
    path: str = option(
        "tiny",
        "the policy: a hub id, a local HF folder, a .gguf file, or tiny[:SIZE] (built "
        "offline on first use)",
    )
    critic_path: str | None = option(
        None,
        "the critic's starting weights; null: the policy's weights plus a "
        "zero-initialized value head",
    )
    dtype: str = option(
        "auto",
        "weight dtype: auto (float32 weights, bf16 autocast on CUDA), float32, bfloat16 or float16",
        choices=DTYPE_CHOICES,
    )
    device: str = option(
        "auto",
        "where the models run: auto (CUDA when available, else CPU), cpu, cuda or cuda:N",
        check=check_device_spec,
    )
    engine: str = option(
        "static",
        "generation engine (ragen.engines.compiled): eager; static (a faster decode "
        "step, the same samples); compiled (static + torch.compile, a one-off compile of "
        "seconds to minutes); static-bf16 (static with bf16 matmuls and K/V: faster, NOT "
        "exact; docs/MODELS.md); static-graphs (static replayed as CUDA graphs on a GPU; "
        "docs/SPEED.md)",
        choices=ENGINE_CHOICES,
    )
    actor_lr: float = option(
        1e-6, "the policy's learning rate (AdamW)", gt=0, fix="e.g. 1e-6 for a 0.5B model"
    )
    critic_lr: float = option(
        1e-5, "the critic's learning rate (AdamW)", gt=0, fix="e.g. 1e-5 for a 0.5B model"
    )
    weight_decay: float = option(
        0.0, "AdamW weight decay of the policy and the critic", ge=0, fix="0 turns it off"
    )
    warmup_steps: int = option(
        0,
        "linear learning-rate warm-up over this many updates (RL steps: every optimizer step "
        "of update k runs at k / warmup_steps of the lr), then constant (0 = none)",
        ge=0,
        fix="0 turns it off",
    )
    gradient_checkpointing: bool = option(
        False, "recompute activations in the backward pass: less memory, slower updates"
    )
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class CurriculumConfig:
    """Train on initial states no harder than a level that rises with measured success
    (``Env.difficulty``: Sokoban's optimal solution length, FrozenLake's 1 - the
    solver's discounted chance). Off while ``start`` is null."""

    start: float | None = option(
        None, "the first difficulty level (e.g. 3 moves); null: no curriculum"
    )
    step: float = option(1.0, "how much the level rises each time it advances", gt=0)
    stop: float | None = option(None, "the highest level; past it every state is drawn")
    advance_at: float = option(
        0.6,
        "advance once the mean training success of the last `window` steps reaches this",
        gt=0,
        le=1,
    )
    window: int = option(3, "steps of training success averaged to decide an advance", ge=1)


@dataclass
class EnvSection:
    name: str = option(
        "sokoban",
        "a registered environment (`ragen envs` lists them), or your own Env class: "
        "package.module:Class, path/to/file.py:Class or an installed `ragen.envs` entry "
        "point (docs/ENVIRONMENTS.md)",
        check=envs.check_name,
    )
    config: dict[str, Any] = option(
        default_factory=dict,
        help="the env's own options, e.g. {dim_room: [8, 8]} (`ragen envs` lists each "
        "env's options)",
    )
    val_config: dict[str, Any] = option(
        default_factory=dict, help="options of the validation envs only, over env.config"
    )
    train_states: int = option(
        0,
        "0: a fresh training state per group and step; N: draw groups from a fixed pool "
        "of N distinct training states (validation states stay held out)",
        ge=0,
        fix="env.train_states=0 or a pool size such as 64",
    )
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)


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


@dataclass
class TrainerSection:
    total_steps: int = option(200, "training steps (rollout + update)", ge=1)
    max_minutes: float | None = option(
        None,
        "wall-clock budget: stop after the step that reaches this many minutes, "
        "validating and saving as at the last step (null: no limit)",
        gt=0,
        fix="null trains all trainer.total_steps; e.g. 30 stops after the step that passes "
        "30 minutes",
    )
    seed: int = option(0, "the run's seed: initial states, sampling, model init")
    run_name: str | None = option(None, "the run's name; null: <env>-<algo>")
    run_dir: str | None = option(None, "the run folder; null: runs/<run_name>")
    resume: str = option(
        "never",
        "never, auto (the run folder's last checkpoint, if any), or a checkpoint folder",
        check=_check_resume,
    )
    save_every: int = option(
        50,
        "save a checkpoint every N steps (0: only at the end)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    keep_last: int | None = option(
        None, "keep only the newest N checkpoints; null: keep all", ge=1, fix="null keeps all"
    )
    val_every: int = option(
        10,
        "validate every N steps (0: never)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    val_groups: int = option(32, "validation episodes (fixed seeds, disjoint from training)", ge=1)
    val_temperature: float = option(
        0.5, "sampling temperature of validation", ge=0, fix="0 is greedy"
    )
    save_trajectories: bool = option(
        True, "write trajectories/step_N.jsonl (and val_step_N.jsonl) for `ragen view`"
    )
    log_trajectories_every: int = option(
        1,
        "write the training trajectories of step 1, every N-th step and the last (0: none)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    log_trajectories_max: int | None = option(
        128,
        "episodes written per step (whole groups, the first groups first); null: all",
        ge=1,
        fix="null writes every episode; trainer.save_trajectories=false writes none",
    )
    max_consecutive_skipped_steps: int = option(
        3,
        "stop with an error after this many consecutive steps that trained nothing "
        "(context overflow on every episode, or a filter that keeps no group); 0: never",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    on_collapse: str = option(
        "warn",
        "what an echo-trap warning (ragen.trainer.collapse) does: warn, stop, or "
        "rollback to a checkpoint with trainer.rollback_change applied",
        choices=ON_COLLAPSE,
    )
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    rollback_change: list[str] = option(
        default_factory=lambda: ["model.actor_lr=*0.5"],
        help="rollback: the change applied after restoring the checkpoint, as key=value "
        "overrides; key=*0.5 scales the current value",
        check=_check_rollback_change,
    )
    max_rollbacks: int = option(
        2,
        "after this many rollbacks a warning only warns",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    rollback_to: str = option(
        "warning",
        "the checkpoint a rollback restores: the last one saved before the warning "
        "step (warning), or before the step the warned signal began to decline (onset)",
        choices=("warning", "onset"),
    )
    critic_warmup: int = option(
        0,
        "the first this many steps train the critic alone (the actor waits, its lr "
        "schedule too), so the value baseline has learned the states' values before it "
        "weighs a policy update (verl's trainer.critic_warmup); needs a critic",
        ge=0,
        fix="0 (the actor trains from the first step) or a positive integer",
    )
    rollout_reuse: int = option(
        1,
        "rollout freshness (the RAGEN paper's finding 5): each rollout's batch trains this "
        "many consecutive steps; 1: a fresh rollout every step; N: steps s+1..s+N-1 update "
        "again on step s's kept samples, advantages and behaviour log-probs (PPO's ratio "
        "and clip stay relative to the policy that sampled them)",
        ge=1,
        fix="1 (a fresh rollout every step) or a larger integer",
    )
    reasoning_samples: int = option(
        16,
        "reasoning/mutual_info (per sequence and per token), cond_entropy, retrieval_acc: "
        "every sample of the step scored under every distinct prompt, at most this many "
        "samples (drawn at random beyond it; 0: off; ragen.trainer.reasoning_stats)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    fuse_passes: bool = option(
        True,
        "one forward per model where the step allows it (one PPO epoch over one "
        "minibatch): the update's forward gives the old log-probs, the critic's update "
        "forward the values (ragen.trainer.onepass, docs/SPEED.md); false: separate "
        "scoring passes, the same numbers",
    )
    console: bool = option(True, "print one line per step")
    tensorboard: bool = option(True, "write TensorBoard events to the run folder")
    wandb: bool = option(False, "log to Weights & Biases")
    wandb_project: str = option("ragen", "the W&B project")
    wandb_mode: str = option(
        "offline",
        "the W&B mode: offline (works without a network), online or disabled",
        choices=WANDB_MODES,
    )
    bf16: bool = option(True, "autocast to bf16 where the device supports it (CUDA)")
    bf16_cpu: bool = option(
        False,
        "bf16 autocast on a CPU with bf16 instructions (avx512_bf16 / AMX) for the "
        "log-probs, values and update; generation stays float32",
    )
    rollout_workers: int = option(
        0,
        "scale-out (docs/SCALING.md; pip install ragen[scale]): 0 plays rollouts in this "
        "process; N uses N Ray actors, each a shard of the groups (sampling is seeded per "
        "episode: any N gives the same trajectories)",
        ge=0,
        fix="0 plays rollouts in this process; N >= 1 uses N Ray actors",
    )
    worker_batch_groups: int = option(
        0,
        "at most this many groups in one generate batch on a rollout worker (0: its whole "
        "shard); bounds a worker's KV-cache memory, does not change the samples (sampling "
        "is seeded per episode, so 0, 1 or N workers give the same trajectories)",
        ge=0,
        fix="0 plays a worker's whole shard in one batch; e.g. 4 caps it at 4 groups",
    )
    train_ranks: int = option(
        1,
        "1 updates in this process; M >= 2 updates data-parallel on M torch.distributed ranks",
        ge=1,
    )
    train_sharding: str = option(
        "replicate",
        "with train_ranks > 1: replicate (every rank a full copy of weights, gradients and "
        "optimizer state) or fsdp (FSDP2: all three sharded over the ranks per decoder "
        "layer; needs rollout_workers >= 1, which hold the whole weights for generation)",
        choices=("replicate", "fsdp"),
    )
    ray_address: str | None = option(
        None, "the Ray cluster; null: $RAY_ADDRESS when set, else a local Ray instance"
    )
    worker_cpus: float = option(
        1.0,
        "Ray CPUs reserved per rollout worker / training rank",
        ge=0,
        fix="e.g. 1 (fractions share a device)",
    )
    worker_gpus: float | None = option(
        None,
        "Ray GPUs per worker / rank; null: 1 on CUDA, else 0",
        ge=0,
        fix="e.g. 1 (fractions share a device)",
    )


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvSection = field(default_factory=EnvSection)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerSection = field(default_factory=TrainerSection)


# ---------------------------------------------------------------------------------------
def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in (PRESET_DIR / kind).glob("*.yaml"))


def _load_preset(kind: str, name: str) -> DictConfig:
    path = PRESET_DIR / kind / f"{name}.yaml"
    if not path.exists():
        close = difflib.get_close_matches(name, preset_names(kind), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"unknown {kind} preset {name!r}.{hint} Available: {', '.join(preset_names(kind))}."
        )
    return OmegaConf.load(path)


_SECTIONS = ("model", "env", "rollout", "algo", "trainer")


def _apply_preset(cfg: DictConfig, kind: str, name: str) -> DictConfig:
    """Merge a preset. A preset file either holds the keys of its own section, or
    (when its top-level keys are all section names) a fragment of the whole config,
    so that e.g. the ``tiny`` model preset can also shorten ``rollout.max_new_tokens``."""
    preset = _load_preset(kind, name)
    keys = set(preset.keys())
    fragment = preset if keys and keys <= set(_SECTIONS) else {kind: preset}
    return _merge(cfg, fragment, f"{kind}={name} ({PRESET_DIR / kind / name}.yaml)")


def _all_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, DictConfig):
        return [prefix[:-1]]
    keys = []
    for k in node.keys():
        child = node._get_node(k)
        if isinstance(child, DictConfig) and child._metadata.object_type is not dict:
            keys += _all_keys(child, f"{prefix}{k}.")
        else:
            keys.append(f"{prefix}{k}")
    return keys


#: keys that were documented once and are gone, with why: a config that still sets one
#: is told so (its default, null, is dropped quietly: that is what it always meant)
REMOVED_KEYS = {
    "model.tokenizer_path": "it was never read: the tokenizer is always the one of "
    "model.path (a hub id, a model folder, a .gguf file or tiny)",
}


def _drop_removed(other: Any, source: str) -> Any:
    """``other`` without the :data:`REMOVED_KEYS` set to null; one set to anything else
    is a :class:`ConfigError` saying why the key is gone."""
    node = other if isinstance(other, DictConfig) else OmegaConf.create(other)
    for key, why in REMOVED_KEYS.items():
        section, leaf = key.rsplit(".", 1)
        parent = OmegaConf.select(node, section, default=None)
        if not isinstance(parent, DictConfig) or leaf not in parent:
            continue
        if parent[leaf] is not None:
            _fail(key, f"this key was removed ({why}); got {parent[leaf]!r} (from {source})",
                  f"delete {key}, and give the tokenizer's model as model.path")  # fmt: skip
        del parent[leaf]
    return node


def _check_shapes(base: DictConfig, other: Any, source: str, prefix: str = "") -> None:
    """A mapping where the config holds a list or a list where it holds a mapping, as a
    one-line :class:`ConfigError` naming the key (OmegaConf raises a bare ``TypeError``,
    "Cannot merge incompatible container types": ``trainer.rollback_change={}``)."""
    if not isinstance(other, (dict, DictConfig)):
        return
    for key, value in other.items():
        if key not in base:
            continue  # an unknown key: the merge names it
        node, full = base._get_node(key), f"{prefix}{key}"
        is_list = isinstance(value, (list, tuple, ListConfig))
        is_map = isinstance(value, (dict, DictConfig))
        if isinstance(node, ListConfig) and is_map:
            example = OmegaConf.to_container(node)[:2] or ["..."]
            _fail(full, f"must be a list, got the mapping {_shown(value)} (from {source})",
                  f"write a list, e.g. {full}=[{','.join(map(str, example))}]")  # fmt: skip
        if isinstance(node, DictConfig) and is_list:
            what = "a mapping of options, e.g. {dim_room: [8, 8]}" if node._metadata.object_type is dict else "a section"  # fmt: skip
            _fail(full, f"must be {what}, got the list {_shown(value)} (from {source})",
                  f"set its keys, e.g. {full}.KEY=VALUE")  # fmt: skip
        if isinstance(node, DictConfig) and is_map:
            _check_shapes(node, value, source, f"{full}.")


def _shown(value: Any) -> str:
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _merge(base: DictConfig, other: Any, source: str) -> DictConfig:
    other = _drop_removed(other, source)
    _check_shapes(base, other, source)
    try:
        return OmegaConf.merge(base, other)
    except (ConfigAttributeError, ConfigKeyError) as err:
        key = str(getattr(err, "full_key", "") or "")
        close = difflib.get_close_matches(key, _all_keys(base), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown config key {key!r} (from {source}).{hint}") from None
    except (ValidationError, OmegaConfBaseException) as err:
        key = str(getattr(err, "full_key", "") or "")
        msg = " ".join(str(getattr(err, "msg", err)).split())
        raise ConfigError(f"{key}: bad value (from {source}): {msg}") from None


def _load_file(path: str) -> DictConfig:
    """A ``config=FILE`` YAML file; a missing file, bad YAML or a file that is not a
    mapping of sections is a one-line :class:`ConfigError`."""
    if not Path(path).is_file():
        raise ConfigError(f"config: file {path!r} does not exist. Fix: check the path")
    try:
        node = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"config: {path} is not valid YAML{where}: {problem}. Fix: correct "
                          "the file; `ragen train --print-config` prints a valid one") from None  # fmt: skip
    if not isinstance(node, DictConfig):
        raise ConfigError(f"config: {path} holds a {type(node).__name__}, not a mapping of "
                          "sections. Fix: write it as `algo: {gamma: 0.99}` (see "
                          "`ragen train --print-config`)")  # fmt: skip
    return node


def load_config(overrides: list[str] | None = None) -> TrainConfig:
    """Resolve presets + overrides into a validated :class:`TrainConfig` (see module
    docstring); raises :class:`~ragen.errors.ConfigError`."""
    cfg: DictConfig = OmegaConf.structured(TrainConfig)
    selections: dict[str, str] = {}
    files: list[str] = []
    dotted: dict[str, Any] = {}
    for item in overrides or []:
        key, value = split_key_value(
            item, "an override (e.g. trainer.total_steps=100 or algo=starpo-s)", ConfigError
        )
        if key in ("env", "algo", "model"):
            selections[key] = value
        elif key == "config":
            files.append(value)
        else:
            dotted[key] = parse_value(value)

    model = selections.get("model")
    if model is not None:
        if (PRESET_DIR / "model" / f"{model}.yaml").exists():
            cfg = _apply_preset(cfg, "model", model)
        else:
            cfg.model.path = model
    env = selections.get("env")
    if env is not None:
        if (PRESET_DIR / "env" / f"{env}.yaml").exists():
            cfg = _apply_preset(cfg, "env", env)
        else:
            cfg.env.name = env
    algo = selections.get("algo")
    if algo is not None:
        cfg = _apply_preset(cfg, "algo", algo)
    for path in files:
        cfg = _merge(cfg, _load_file(path), path)
    if dotted:
        cfg = _merge(cfg, nest_dotted(dotted), "command line")
    typed: TrainConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    validate(typed)
    return typed


def validate(cfg: TrainConfig, rollback_dry_run: bool = True) -> None:
    """Reject a config that cannot run, naming the full key, the problem and the fix.

    Order: every key against its field's choices and custom check (the metadata of
    ``ragen.config_fields.option``) and the env's options, then every key's range, then
    the keys that must agree, so the most basic problem is the one reported.
    """
    check_section(cfg, what="choices")
    _check_lists(cfg)
    envs.check_options(cfg.env.name, cfg.env.config, "env.config")
    envs.check_options(cfg.env.name, cfg.env.val_config, "env.val_config")
    check_section(cfg, what="ranges")
    _check_sizes(cfg)
    cfg.rollout.validate(prefix="rollout.")
    _check_curriculum(cfg.env)
    _check_filter(cfg.algo.filter)
    _check_scale_out(cfg.trainer, cfg.rollout)
    if cfg.algo.dynamic_sampling.enabled and cfg.env.train_states:
        _fail("algo.dynamic_sampling.enabled", "refills draw fresh states; they cannot use "
              "the fixed pool of env.train_states", "env.train_states=0")  # fmt: skip
    _check_combinations(cfg)
    t = cfg.trainer
    if rollback_dry_run and t.on_collapse == "rollback" and t.rollback_change:
        # a change that makes the config invalid must fail now, not at the first warning
        try:
            apply_rollback_change(cfg, list(t.rollback_change))
        except ConfigError as err:
            raise ConfigError(
                f"trainer.rollback_change {list(t.rollback_change)} would make the config "
                f"invalid: {err}"
            ) from None


# -- container keys ------------------------------------------------------------------
_MODULE_NAME = re.compile(r"^[A-Za-z_][\w.]*$")


def _check_lists(cfg: TrainConfig) -> None:
    """Every list of strings holds strings (OmegaConf keeps ``[[]]`` as a list in a
    list), and LoRA's targets are module names: a bad one failed only after the model
    loaded, with a traceback from inside PEFT."""
    for key, f, value in walk_fields(cfg):
        if str(f.type).startswith("list[str]") and isinstance(value, list):
            for item in value:
                if not isinstance(item, str) or not item.strip():
                    default = default_of(f)
                    _fail(key, f"must be a list of non-empty strings, got the item {_shown(item)}",
                          f"e.g. {key}=[{','.join(map(str, default[:2]))}]" if default
                          else f"e.g. {key}=[]")  # fmt: skip
    lora = cfg.model.lora
    for name in lora.target_modules:
        if not _MODULE_NAME.match(name):
            _fail("model.lora.target_modules", f"{name!r} is not a module name (letters, "
                  "digits, _ and dots)", "e.g. model.lora.target_modules=[q_proj,v_proj]")  # fmt: skip
    if lora.rank > 0 and not lora.target_modules:
        _fail("model.lora.target_modules", f"is empty, so model.lora.rank={lora.rank} would "
              "train no adapter at all", "name the modules, e.g. "
              "model.lora.target_modules=[q_proj,v_proj], or model.lora.rank=0 (full "
              "fine-tuning)")  # fmt: skip


# -- sizes: what the machine can hold -----------------------------------------------------
#: a config integer past int64 cannot reach torch, numpy or a checkpoint's files
INT64 = (-(2**63), 2**63 - 1)
#: what one episode holds at the least, measured (tracemalloc, 500 envs reset): the
#: smallest env instance after reset (bandit 3.5 KB; Sokoban 7.9 KB), before its
#: trajectory record and prompt text are counted
EPISODE_FLOOR_BYTES = 3_000
#: a token an episode may hold costs at least its id in the batch's int64 tensor (the
#: batch is padded to its longest episode, which may reach rollout.max_model_len)
TOKEN_FLOOR_BYTES = 8
#: a rollout worker or training rank is a Python process with torch, before its model
#: copy: 270 MB resident measured with torch and transformers imported and no model yet
PROCESS_FLOOR_BYTES = 250 * 2**20


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None when the system cannot tell)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _number(value: int) -> str:
    """``value`` for a message; a huge one by its size (``str`` of an int of more than
    4,300 digits raises)."""
    digits = len(str(abs(value))) if value.bit_length() < 10_000 else int(value.bit_length() * 0.30103) + 1  # fmt: skip
    return f"{value:,}" if digits <= 30 else f"a {digits:,}-digit number"


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n < 1e15 else f"{n:.1e} bytes"


def _check_sizes(cfg: TrainConfig, memory: int | None = None) -> None:
    """Bound every size and count key by what the machine can hold, before anything is
    built: every integer fits in int64, the episodes a step holds (training and
    validation, each up to rollout.max_model_len tokens) fit in this machine's memory at
    their floor cost, as do the micro-batch's tokens and the processes of a scale-out,
    and env.train_states fits in the training seed range. A size past these ran for
    minutes before failing (``rollout.env_groups=99999999999999999999999``)."""
    for key, f, value in walk_fields(cfg):
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT64[0] <= value <= INT64[1]:
                default = default_of(f)
                _fail(key, f"{_number(value)} does not fit in 64 bits (what torch, numpy "
                      "and checkpoints hold)", f"e.g. the default {default}")  # fmt: skip
    r, t, a = cfg.rollout, cfg.trainer, cfg.algo
    if cfg.env.train_states > VAL_SEED_START:
        _fail("env.train_states", f"{_number(cfg.env.train_states)} training states cannot be "
              f"drawn from the {VAL_SEED_START:,} training seeds", "a smaller pool, e.g. "
              "env.train_states=64, or 0 for a fresh state per group")  # fmt: skip
    memory = machine_memory() if memory is None else memory
    if not memory:
        return
    train, val = r.env_groups * r.group_size, t.val_groups
    episode = EPISODE_FLOOR_BYTES + TOKEN_FLOOR_BYTES * r.max_model_len
    need = (train + val) * episode
    if need > memory:
        crowd = "rollout.env_groups" if train >= val else "trainer.val_groups"
        _fail(
            crowd if (train + val) * EPISODE_FLOOR_BYTES > memory else "rollout.max_model_len",
            f"rollout.env_groups={_number(r.env_groups)} x rollout.group_size="
            f"{_number(r.group_size)} training and trainer.val_groups={_number(val)} "
            f"validation episodes of up to rollout.max_model_len={_number(r.max_model_len)} "
            f"tokens need at least {_gb(need)} ({EPISODE_FLOOR_BYTES:,} bytes an env, "
            f"{TOKEN_FLOOR_BYTES} a token), more than this machine's {_gb(memory)} of memory",
            "fewer rollout.env_groups, rollout.group_size or trainer.val_groups, or a "
            "shorter rollout.max_model_len",
        )
    if a.micro_token_budget * TOKEN_FLOOR_BYTES > memory:
        _fail("algo.micro_token_budget", f"{_number(a.micro_token_budget)} tokens a "
              f"micro-batch need more than this machine's {_gb(memory)} of memory",
              "0 picks what fits in memory; e.g. 8192")  # fmt: skip
    processes = t.rollout_workers + (t.train_ranks if t.train_ranks > 1 else 0)
    cluster = t.ray_address or os.environ.get("RAY_ADDRESS")  # its nodes hold them, not this one
    if not cluster and processes * PROCESS_FLOOR_BYTES > memory:
        key = "trainer.rollout_workers" if t.rollout_workers else "trainer.train_ranks"
        _fail(key, f"trainer.rollout_workers={_number(t.rollout_workers)} and "
              f"trainer.train_ranks={_number(t.train_ranks)} are {_number(processes)} "
              f"processes of at least {PROCESS_FLOOR_BYTES >> 20} MB each (a Python process "
              f"with torch), more than this machine's {_gb(memory)} of memory",
              "fewer workers or ranks, or join a cluster (trainer.ray_address)")  # fmt: skip


def _check_curriculum(env: EnvSection) -> None:
    c = env.curriculum
    if c.start is None:
        return
    if not getattr(envs.spec(env.name).load_class(), "difficulty_meaning", ""):
        _fail("env.curriculum.start", f"env {env.name!r} cannot rank its states by "
              "difficulty (Env.difficulty)", "env.curriculum.start=null")  # fmt: skip
    if env.train_states:
        _fail("env.curriculum.start", "a curriculum draws fresh states; it cannot use the "
              "fixed pool of env.train_states", "env.train_states=0")  # fmt: skip
    if c.stop is not None and not c.stop >= c.start:
        _fail("env.curriculum.stop", f"must be >= start ({c.start}), got {c.stop}", "or null")


def _check_filter(f: FilterConfig) -> None:
    """``algo.filter.value``'s range depends on the strategy."""
    if f.strategy == "top_p" and not 0 < f.value <= 1:
        _fail("algo.filter.value", f"top_p keeps a fraction in (0, 1], got {f.value}",
              "e.g. 0.25 (1.0 keeps every group)")  # fmt: skip
    if f.strategy == "nucleus" and not 0 < f.value <= 1 or f.strategy == "min_p" and not 0 <= f.value <= 1:  # fmt: skip
        _fail("algo.filter.value",
              f"{f.strategy} takes a share of the metric in (0, 1], got {f.value}",
              "e.g. algo.filter.value=0.5")  # fmt: skip
    if f.strategy == "top_k" and f.value < 1:
        _fail("algo.filter.value", f"top_k keeps a number of groups >= 1, got {f.value}",
              "e.g. algo.filter.value=4")  # fmt: skip


# what installs Ray (ragen.distributed.ray_setup says it too)
INSTALL_HINT = "pip install 'ragen[scale]'"


def ray_installed() -> bool:
    """Whether ``import ray`` would work, without importing it (config validation)."""
    import importlib.util

    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    return importlib.util.find_spec("ray") is not None


def _check_scale_out(t: TrainerSection, r: RolloutConfig) -> None:
    """The scale-out keys that must agree (any worker count suits any number of groups:
    extra workers idle)."""
    if t.train_sharding == "fsdp" and t.train_ranks > 1 and t.rollout_workers < 1:
        _fail("trainer.train_sharding",
              "fsdp keeps no whole copy of the weights in the trainer, so it cannot generate "
              "rollouts in this process (trainer.rollout_workers=0)",
              "trainer.rollout_workers=1 or more (the workers hold the whole weights), or "
              "trainer.train_sharding=replicate")  # fmt: skip
    if t.rollout_workers > 0 or t.train_ranks > 1:
        if not ray_installed():
            key = "trainer.rollout_workers" if t.rollout_workers > 0 else "trainer.train_ranks"
            _fail(key, "needs Ray, which is not installed",
                  f"{INSTALL_HINT}, or trainer.rollout_workers=0 trainer.train_ranks=1 "
                  "to run in one process")  # fmt: skip


# keys a rollback may change mid-run: read afresh every step (the construction-time keys,
# e.g. algo.use_critic or rollout.group_size, would need new models or env managers)
ROLLBACK_KEYS = (
    "model.actor_lr",
    "model.critic_lr",
    "rollout.temperature",
    "algo.filter.strategy",
    "algo.filter.value",
    "algo.filter.metric",
    "algo.filter.include_zero",
    "algo.adv_estimator",
    "algo.norm_method",
    "algo.norm_grouping",
    "algo.loss_agg_mode",
    "algo.whiten_advantages",
    "algo.clip_ratio_low",
    "algo.clip_ratio_high",
    "algo.entropy_coef",
    "algo.grad_clip",
    "algo.ppo_epochs",
)


def parse_rollback_change(items: list[str]) -> list[tuple[str, str, Any]]:
    """``["model.actor_lr=*0.5", "algo.filter.value=0.25"]`` -> ``[(key, op, value)]``
    with op ``"set"`` or ``"scale"`` (a ``*F`` value multiplies the current one)."""
    out = []
    for item in items:
        key, raw = split_key_value(
            str(item), "a rollback change (e.g. model.actor_lr=*0.5)", ConfigError
        )
        if key not in ROLLBACK_KEYS:
            close = difflib.get_close_matches(key, ROLLBACK_KEYS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            _fail(
                "trainer.rollback_change",
                f"{key!r} cannot change mid-run.{hint}",
                f"use one of {', '.join(ROLLBACK_KEYS)}",
            )
        if raw.startswith("*"):
            try:
                factor = float(raw[1:])
            except ValueError:
                factor = float("nan")
            if not factor > 0:
                _fail(
                    "trainer.rollback_change",
                    f"{item!r}: a scale must be *<positive number>",
                    "e.g. *0.5",
                )
            out.append((key, "scale", factor))
        else:
            out.append((key, "set", parse_value(raw)))
    return out


def apply_rollback_change(
    cfg: TrainConfig, items: list[str]
) -> tuple[TrainConfig, dict[str, list]]:
    """A validated copy of ``cfg`` with ``items`` applied, and ``{key: [old, new]}``."""
    new = copy.deepcopy(cfg)
    changed: dict[str, list] = {}
    for key, op, value in parse_rollback_change(items):
        *path, leaf = key.split(".")
        node = new
        for part in path:
            node = getattr(node, part)
        old = getattr(node, leaf)
        if op == "scale":
            if isinstance(old, bool) or not isinstance(old, (int, float)):
                _fail(
                    "trainer.rollback_change",
                    f"{key} is not a number and cannot be scaled",
                    "use key=value",
                )
            value = type(old)(old * value)
        setattr(node, leaf, value)
        changed[key] = [old, value]
    validate(new, rollback_dry_run=False)
    return new, changed


def _check_combinations(cfg: TrainConfig) -> None:
    """Keys that are each valid but cannot go together. What an estimator needs (a
    critic, turn ends, group ids, an advantage mask) is asked of the registry."""
    a, r = cfg.algo, cfg.rollout
    estimator = get_advantage_estimator(a.adv_estimator)
    if a.advantage_tokens != "response" and "advantage_mask" not in estimator.data_params:
        takes_mask = [n for n in list_advantage_estimators()
                      if "advantage_mask" in get_advantage_estimator(n).data_params]  # fmt: skip
        _fail(
            "algo.advantage_tokens",
            f"{a.advantage_tokens!r} needs an estimator that takes an advantage mask "
            f"(M_adv), and {a.adv_estimator!r} does not",
            f"set algo.adv_estimator to {' or '.join(takes_mask)}, or "
            "algo.advantage_tokens=response",
        )
    if estimator.needs_critic and not a.use_critic:
        _fail(
            "algo.use_critic",
            f"estimator {a.adv_estimator!r} needs a critic (value baseline) but use_critic=false",
            "set algo.use_critic=true or use a critic-free estimator "
            f"({', '.join(critic_free_estimators())})",
        )
    if cfg.trainer.critic_warmup and not a.use_critic:
        _fail(
            "trainer.critic_warmup",
            f"{cfg.trainer.critic_warmup} steps of critic-only training, but there is no "
            f"critic (algo.use_critic=false, estimator {a.adv_estimator!r})",
            "set trainer.critic_warmup=0, or use a critic (algo.use_critic=true with gae)",
        )
    if estimator.needs_turn_ends and a.reward_placement != "turn":
        _fail(
            "algo.reward_placement",
            f"{a.adv_estimator} assigns credit per turn and needs turn rewards at turn ends",
            "set algo.reward_placement=turn (the trico and vagen presets do)",
        )
    if a.reward_placement == "turn" and r.context_window is not None:
        # a windowed sample holds one turn: per-turn credit inside it would never see the
        # rewards of later turns (separate samples), silently making every turn myopic
        _fail(
            "algo.reward_placement",
            "per-turn rewards need the whole episode in one sample, but rollout.context_window "
            f"={r.context_window} makes every turn its own sample",
            "drop rollout.context_window, or set algo.reward_placement=trajectory (each "
            "windowed turn is then credited with its reward-to-go)",
        )
    if a.reward_placement == "turn" and a.norm_grouping != "none":
        _fail(
            "algo.norm_grouping",
            "score normalization rescales one score per trajectory and cannot apply to per-turn rewards",
            "set algo.norm_grouping=none, or algo.reward_placement=trajectory",
        )
    group_based = estimator.needs_index or a.norm_grouping == "state"
    if group_based and r.group_size < 2:
        _fail(
            "rollout.group_size",
            "group baselines need at least 2 rollouts per initial state",
            "set rollout.group_size>=2",
        )
    kept_groups = r.env_groups
    if a.filter.strategy == "top_p":
        kept_groups = max(1, math.ceil(a.filter.value * r.env_groups))
    elif a.filter.strategy == "top_k":
        kept_groups = min(int(a.filter.value), r.env_groups)
    kept = kept_groups * r.group_size * (r.max_turns if r.context_window is not None else 1)
    if a.filter.strategy in ("top_p", "top_k") and kept < a.ppo_mini_batch_size:
        _fail(
            "algo.ppo_mini_batch_size",
            f"the filter keeps {kept} trajectories per step ({kept_groups} of {r.env_groups} groups x "
            f"{r.group_size}), fewer than one minibatch of {a.ppo_mini_batch_size}",
            f"set algo.ppo_mini_batch_size<={kept}, or keep more groups (algo.filter.value) / "
            "raise rollout.env_groups",
        )


def _as_node(cfg: TrainConfig | DictConfig) -> DictConfig:
    return cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg)


def to_yaml(cfg: TrainConfig | DictConfig) -> str:
    """The config as YAML (what ``--print-config`` prints and a run saves)."""
    return OmegaConf.to_yaml(_as_node(cfg))


def to_dict(cfg: TrainConfig | DictConfig) -> dict[str, Any]:
    """The config as plain nested dicts and lists (JSON-ready)."""
    return OmegaConf.to_container(_as_node(cfg), resolve=True)  # type: ignore[return-value]
