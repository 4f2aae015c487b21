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
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

from ragen.agent.rollout import RolloutConfig
from ragen.cli_utils import nest_dotted, parse_value, split_key_value
from ragen.errors import ConfigError, check_choice
from ragen.trainer.collapse import CollapseConfig

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"

__all__ = [
    "ConfigError",
    "LoraConfig",
    "ModelConfig",
    "EnvSection",
    "RolloutConfig",
    "FilterConfig",
    "CollapseConfig",
    "AlgoConfig",
    "TrainerSection",
    "TrainConfig",
    "load_config",
    "validate",
    "check_env_options",
    "preset_names",
    "to_yaml",
    "to_dict",
]


@dataclass
class LoraConfig:
    rank: int = 0  # 0 = full fine-tuning; > 0 trains LoRA adapters of this rank
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )


@dataclass
class ModelConfig:
    path: str = (
        "tiny"  # hub id, local HF folder, .gguf file, or tiny[:size] (built offline on first use)
    )
    tokenizer_path: str | None = None  # defaults to path
    critic_path: str | None = (
        None  # defaults to the policy's weights (+ a zero-initialized value head)
    )
    dtype: str = (
        "auto"  # auto (float32 weights, bf16 autocast on CUDA) | float32 | bfloat16 | float16
    )
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # generation engine (ragen.engines.compiled): eager | static (faster decode step, same
    # samples) | compiled (static + torch.compile, a one-off compile of seconds to minutes)
    # | static-bf16 (static with bf16 matmuls and K/V: faster, NOT exact; docs/MODELS.md)
    engine: str = "static"
    actor_lr: float = 1e-6
    critic_lr: float = 1e-5
    weight_decay: float = 0.0
    warmup_steps: int = 0
    gradient_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class CurriculumConfig:
    """Train on initial states no harder than a level that rises with measured success
    (``Env.difficulty``: Sokoban's optimal solution length, FrozenLake's 1 - the
    solver's discounted chance). Off while ``start`` is null."""

    start: float | None = None  # the first level (e.g. 3 moves); null: no curriculum
    step: float = 1.0  # how much the level rises each time it advances
    stop: float | None = None  # the highest level; past it every state is drawn
    # advance once the mean training success of the last ``window`` steps reaches this
    advance_at: float = 0.6
    window: int = 3


@dataclass
class EnvSection:
    name: str = "sokoban"  # a registered environment (``ragen envs``)
    config: dict[str, Any] = field(
        default_factory=dict
    )  # the env's own knobs, e.g. {dim_room: [8, 8]}
    val_config: dict[str, Any] = field(default_factory=dict)  # overrides for validation envs only
    # 0: a fresh training state per group and step; N: draw groups from a fixed pool of N
    # distinct training states (prompt diversity; validation states stay held out)
    train_states: int = 0
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)


@dataclass
class FilterConfig:
    # top_p | top_k | nucleus | min_p | threshold | min_std (ragen.algo.filtering)
    strategy: str = "top_p"
    value: float = 1.0  # top_p: fraction of groups kept (1.0 = no filtering)
    include_zero: bool = True  # keep zero-variance groups when they rank high enough
    # what groups are ranked by: reward_std | reward_var | reward | entropy | length
    # (entropy: mean surprisal of the sampled tokens; length: response tokens)
    metric: str = "reward_std"


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling: drop the groups whose episodes all agree (every one
    succeeds, or every one fails: no advantage under a group baseline) and roll out fresh
    initial states until ``rollout.env_groups`` informative groups are kept or
    ``max_rounds`` refills are spent (``ragen.trainer.dynamic_sampling``)."""

    enabled: bool = False
    # what must differ within a group: success (solved or not) | reward (episode reward)
    on: str = "success"
    max_rounds: int = 3  # refill rollouts per step, each of rollout.env_groups groups


@dataclass
class AlgoConfig:
    name: str = "starpo"  # preset name, informational
    # see ragen.algo: gae masked_gae grpo drgrpo rloo reinforce_plus_plus bi_level_gae
    # vagen_bi_level_gae turn_gae
    adv_estimator: str = "gae"
    use_critic: bool = True
    reward_placement: str = "trajectory"  # trajectory: episode reward at the last token; turn: per-turn rewards at turn ends
    norm_grouping: str = "none"  # reward normalization before advantages: none | state | batch
    norm_method: str = "identity"  # identity | mean_std | mean | asym_clip
    whiten_advantages: bool = False
    # windowed turns: baseline from the same turn index of the group's episodes (turn) or
    # from every turn that saw the same observation (state); see trainer.batching
    turn_baseline: str = "turn"
    gamma: float = 1.0
    lam: float = 1.0
    gamma_turn: float = 0.95
    lam_turn: float = 1.0
    gamma_token: float = 1.0
    lam_token: float = 1.0
    # windowed samples (rollout.context_window set): the discount of later turns' rewards
    # in a turn's reward-to-go, its score. 1 = the undiscounted rest of the episode; 0 =
    # the turn's own reward only (with rollout.progress_reward: the move's own progress)
    window_gamma: float = 1.0
    filter: FilterConfig = field(default_factory=FilterConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    kl_coef: float = 0.001
    kl_type: str = "low_var_kl"  # k1 | abs | k2 | low_var_kl
    kl_in_reward: bool = False  # True: subtract coef*KL from token rewards; False: KL loss term
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    value_clip: float = 0.5
    entropy_coef: float = 0.001
    loss_agg_mode: str = "token-mean"
    ppo_epochs: int = 1
    ppo_mini_batch_size: int = 32  # trajectories per optimizer step
    # padded tokens per forward/backward micro-batch; 0 (auto): 8192, or what fits in the
    # free memory when less (ragen.models.memory); too many to fit is an error at start
    micro_token_budget: int = 0
    grad_clip: float = 1.0
    skip_grad_norm_above: float | None = (
        None  # skip the optimizer step when the grad norm exceeds this
    )
    # seq-mean-token-sum-norm (Dr.GRPO) divides by this constant; None: the response
    # budget of one sample (rollout.max_new_tokens x turns per sample)
    loss_norm_constant: int | None = None
    # critic estimators bootstrap V(s_end) where the return continues; the turn and action
    # budgets count as termination when true (our prompts show what is left of them, so
    # the budget is part of the state)
    budget_is_terminal: bool = True
    # tokens the GAE recursion of masked_gae runs over (M_adv): response | response_and_turn_end
    advantage_tokens: str = "response"
    # policy gradient only on "forking" tokens: a response token whose entropy under the
    # behaviour policy (the model before the update, at the rollout temperature) is
    # below this many nats gets advantage 0 (its entropy bonus and KL still apply).
    # 0 = every token. Near-certain template tokens then take no push from the
    # advantages (cf. Wang et al. 2025, "Beyond the 80/20 rule"; docs/ALGORITHMS.md)
    pg_min_entropy: float = 0.0
    # advantages below this floor are raised to it before the update; 0 keeps only the
    # better-than-baseline samples' push (their tokens go up, nothing is pushed down, as
    # in filtered behaviour cloning / RAFT). null = off. Why: in a reply that names its
    # move twice (the thought, then the answer copying it), negative advantages on the
    # copied answer token teach the answer to differ from the thought (docs/ALGORITHMS.md)
    advantage_floor: float | None = None


@dataclass
class TrainerSection:
    total_steps: int = 200
    # wall-clock budget: stop after the step that reaches this many minutes of training,
    # validating and saving as at the last step (null: no limit). For time-boxed jobs
    # (a lent GPU, a queue's time limit), where a killed run would lose its last steps
    max_minutes: float | None = None
    seed: int = 0
    run_name: str | None = None  # default: <env>-<algo>
    run_dir: str | None = None  # default: runs/<run_name>
    resume: str = "never"  # never | auto | path to a checkpoint folder
    save_every: int = 50
    keep_last: int | None = None
    val_every: int = 10  # 0 disables periodic validation
    val_groups: int = 32  # validation episodes (fixed, disjoint seeds)
    val_temperature: float = 0.5
    save_trajectories: bool = True  # trajectories/step_N.jsonl (and val_step_N.jsonl)
    # write the training trajectories of step 1, every N-th step and the last step (0: none)
    log_trajectories_every: int = 1
    # episodes written per step (whole groups, the first groups first); null: all of them
    log_trajectories_max: int | None = 128
    # stop with an error after this many consecutive steps that trained nothing (context
    # overflow on every episode, or a filter that keeps no group); 0 never stops
    max_consecutive_skipped_steps: int = 3
    # echo-trap early warning (ragen.trainer.collapse): what a warning does
    on_collapse: str = "warn"  # warn | stop | rollback
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    # rollback: the change applied after restoring the last checkpoint before the warning,
    # "key=value" overrides; "key=*0.5" scales the current value (e.g. model.actor_lr=*0.5)
    rollback_change: list[str] = field(default_factory=lambda: ["model.actor_lr=*0.5"])
    max_rollbacks: int = 2  # after this many, a warning only warns
    # which checkpoint a rollback restores: the last one saved before the warning step
    # (warning), or before the step the warned signal began to decline (onset)
    rollback_to: str = "warning"
    # reasoning/cond_entropy and reasoning/mutual_info from n x n cross-prompt scoring of
    # this many groups per step (0 disables; ragen.trainer.reasoning_stats)
    reasoning_samples: int = 8
    console: bool = True
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "ragen"
    wandb_mode: str = "offline"  # offline (works without a network) | online | disabled
    bf16: bool = True  # autocast to bf16 where the device supports it (CUDA); CPU: bf16_cpu
    # the same on a CPU with bf16 instructions (avx512_bf16 / AMX): log-probs, values and the
    # update under bf16 autocast; generation stays float32 (docs/RESULTS.md, "Rollout and
    # update speed", measured the speed and the effect on learning)
    bf16_cpu: bool = False
    # scale-out (ragen.distributed, docs/SCALING.md; needs `pip install ragen[scale]`):
    # 0: rollouts in this process; N: N Ray actors, each playing a shard of the groups
    # (sampling seeded per episode, so 0, 1 or N workers give the same trajectories)
    rollout_workers: int = 0
    # at most this many groups in one generate batch on a worker (0: its whole shard);
    # bounds a worker's KV-cache memory, does not change the samples
    worker_batch_groups: int = 0
    train_ranks: int = 1  # > 1: the actor/critic update data-parallel on torch.distributed
    # with train_ranks > 1: replicate (every rank a full copy of weights, gradients and
    # optimizer state) | fsdp (FSDP2: all three sharded over the ranks per decoder layer;
    # needs rollout_workers >= 1, which hold the whole weights for generation)
    train_sharding: str = "replicate"
    ray_address: str | None = None  # null: $RAY_ADDRESS when set, else a local Ray instance
    worker_cpus: float = 1.0  # Ray CPUs reserved per rollout worker / training rank
    worker_gpus: float | None = None  # Ray GPUs per worker/rank; null: 1 on CUDA, else 0


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


def _merge(base: DictConfig, other: Any, source: str) -> DictConfig:
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
        if not Path(path).exists():
            raise ConfigError(f"config: file {path!r} does not exist. Fix: check the path")
        cfg = _merge(cfg, OmegaConf.load(path), path)
    if dotted:
        cfg = _merge(cfg, nest_dotted(dotted), "command line")
    typed: TrainConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    validate(typed)
    return typed


def _fail(key: str, problem: str, fix: str) -> None:
    raise ConfigError(f"{key}: {problem}. Fix: {fix}")


def validate(cfg: TrainConfig, rollback_dry_run: bool = True) -> None:
    """Reject a config that cannot run, naming the full key, the problem and the fix.

    Order: unknown values of enumerated keys, then ranges of single values (including
    ``rollout.*`` via :meth:`RolloutConfig.validate`), then combinations, so the most
    basic problem is the one reported.
    """
    _check_choices(cfg)
    _check_ranges(cfg)
    cfg.rollout.validate(prefix="rollout.")
    _check_combinations(cfg)
    t = cfg.trainer
    if t.resume not in ("never", "auto") and not Path(t.resume).exists():
        _fail(
            "trainer.resume",
            f"checkpoint {t.resume!r} does not exist",
            "use auto, never, or an existing checkpoint folder",
        )
    if rollback_dry_run and t.on_collapse == "rollback" and t.rollback_change:
        # a change that makes the config invalid must fail now, not at the first warning
        try:
            apply_rollback_change(cfg, list(t.rollback_change))
        except ConfigError as err:
            raise ConfigError(
                f"trainer.rollback_change {list(t.rollback_change)} would make the config "
                f"invalid: {err}"
            ) from None


def _check_choices(cfg: TrainConfig) -> None:
    """Every enumerated key, against the names its consumer accepts."""
    from ragen import envs
    from ragen.algo.filtering import FILTER_METRICS, FILTER_STRATEGIES
    from ragen.algo.kl import KL_KINDS
    from ragen.algo.losses import LOSS_AGG_MODES
    from ragen.algo.normalize import GROUPINGS, METHODS
    from ragen.algo.registry import list_advantage_estimators
    from ragen.models.loading import DTYPE_CHOICES, check_device_spec
    from ragen.trainer.batching import ADVANTAGE_TOKENS, REWARD_PLACEMENTS, TURN_BASELINES
    from ragen.trainer.collapse import ON_COLLAPSE, SIGNALS
    from ragen.trainer.metrics_logger import WANDB_MODES

    a = cfg.algo
    check_choice("env.name", cfg.env.name, envs.names())
    _check_env_keys(cfg.env)
    check_choice("algo.adv_estimator", a.adv_estimator, list_advantage_estimators())
    check_choice("algo.loss_agg_mode", a.loss_agg_mode, LOSS_AGG_MODES)
    check_choice("algo.norm_method", a.norm_method, METHODS)
    check_choice("algo.norm_grouping", a.norm_grouping, GROUPINGS)
    check_choice("algo.kl_type", a.kl_type, KL_KINDS)
    check_choice("algo.filter.strategy", a.filter.strategy, FILTER_STRATEGIES)
    check_choice("algo.filter.metric", a.filter.metric, FILTER_METRICS)
    check_choice("trainer.on_collapse", cfg.trainer.on_collapse, ON_COLLAPSE)
    check_choice("trainer.rollback_to", cfg.trainer.rollback_to, ("warning", "onset"))
    for name in cfg.trainer.collapse.signals:
        check_choice("trainer.collapse.signals", name, list(SIGNALS))
    check_choice("algo.turn_baseline", a.turn_baseline, TURN_BASELINES)
    check_choice("algo.advantage_tokens", a.advantage_tokens, ADVANTAGE_TOKENS)
    check_choice("algo.reward_placement", a.reward_placement, REWARD_PLACEMENTS)
    check_choice("model.dtype", cfg.model.dtype, DTYPE_CHOICES)
    from ragen.engines.base import ENGINE_CHOICES

    check_choice("model.engine", cfg.model.engine, ENGINE_CHOICES)
    check_device_spec(cfg.model.device, key="model.device")
    check_choice("trainer.wandb_mode", cfg.trainer.wandb_mode, WANDB_MODES)


def _check_env_keys(env: EnvSection) -> None:
    check_env_options(env.name, env.config, "env.config")
    check_env_options(env.name, env.val_config, "env.val_config")
    if env.train_states < 0:
        raise ConfigError(
            f"env.train_states must be >= 0 (0 = a fresh state per group and step), got "
            f"{env.train_states}. Fix: env.train_states=0 or a pool size such as 64"
        )
    c = env.curriculum
    if c.start is None:
        return
    from ragen import envs

    if not getattr(envs.spec(env.name).load_class(), "difficulty_meaning", ""):
        _fail("env.curriculum.start", f"env {env.name!r} cannot rank its states by "
              "difficulty (Env.difficulty)", "env.curriculum.start=null")  # fmt: skip
    if env.train_states:
        _fail("env.curriculum.start", "a curriculum draws fresh states; it cannot use the "
              "fixed pool of env.train_states", "env.train_states=0")  # fmt: skip
    if not c.step > 0:
        _fail("env.curriculum.step", f"must be > 0, got {c.step}", "e.g. 1")
    if c.stop is not None and not c.stop >= c.start:
        _fail("env.curriculum.stop", f"must be >= start ({c.start}), got {c.stop}", "or null")
    if not 0 < c.advance_at <= 1:
        _fail(
            "env.curriculum.advance_at", f"a success rate in (0, 1], got {c.advance_at}", "e.g. 0.6"
        )
    if c.window < 1:
        _fail("env.curriculum.window", f"must be >= 1, got {c.window}", "e.g. 3")


def check_env_options(name: str, options: dict[str, Any], key: str = "env.config") -> None:
    """Raise :class:`ConfigError` (naming ``<key>.<option>``) unless environment ``name``
    accepts every option in ``options``; an unknown ``name`` raises ``UnknownEnvError``."""
    import inspect

    from ragen import envs

    params = inspect.signature(envs.registry.spec(name).load_class().__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = list(envs.config_keys(name))
    for option in options:
        if option not in accepted:
            close = difflib.get_close_matches(str(option), accepted, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{key}.{option}: environment {name!r} has no option {option!r}.{hint} "
                f"Valid: {', '.join(accepted)}"
            )


def _check_finite(node: Any, prefix: str = "") -> None:
    """Every float key of the config tree is a finite number: NaN passes every ``value <= 0``
    style check below, and an inf learning rate trains weights into NaN (issue 36)."""
    import dataclasses

    for f in dataclasses.fields(node):
        value, key = getattr(node, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            _check_finite(value, f"{key}.")
        elif isinstance(value, float) and not math.isfinite(value):
            default = f.default if f.default is not dataclasses.MISSING else None
            example = "null (off)" if default is None else f"the default {default}"
            _fail(key, f"must be a finite number, got {value}", f"give a number, e.g. {example}")


def _check_ranges(cfg: TrainConfig) -> None:
    """Single values, each on its own (positivity, intervals)."""
    a, m, t = cfg.algo, cfg.model, cfg.trainer
    _check_finite(cfg)
    for key, value in (
        ("trainer.total_steps", t.total_steps),
        ("algo.ppo_epochs", a.ppo_epochs),
        ("algo.ppo_mini_batch_size", a.ppo_mini_batch_size),
        ("trainer.val_groups", t.val_groups),
    ):
        if value < 1:
            _fail(key, f"must be >= 1, got {value}", "use a positive integer")
    for key, value in (
        ("trainer.save_every", t.save_every),
        ("trainer.val_every", t.val_every),
        ("trainer.max_consecutive_skipped_steps", t.max_consecutive_skipped_steps),
        ("trainer.log_trajectories_every", t.log_trajectories_every),
        ("trainer.max_rollbacks", t.max_rollbacks),
        ("trainer.reasoning_samples", t.reasoning_samples),
        ("trainer.collapse.min_steps", t.collapse.min_steps),
        ("model.warmup_steps", m.warmup_steps),
        ("model.lora.rank", m.lora.rank),
    ):
        if value < 0:
            _fail(key, f"must be >= 0, got {value}", "use 0 to turn it off, or a positive integer")
    if a.loss_norm_constant is not None and a.loss_norm_constant < 1:
        _fail(
            "algo.loss_norm_constant",
            f"must be null or >= 1, got {a.loss_norm_constant}",
            "null uses the response budget of one sample (rollout.max_new_tokens x turns)",
        )
    if t.max_minutes is not None and not 0 < t.max_minutes < float("inf"):
        _fail(
            "trainer.max_minutes",
            f"must be null or a number > 0, got {t.max_minutes}",
            "null trains all trainer.total_steps; e.g. 30 stops after the step that passes 30 minutes",
        )
    if t.log_trajectories_max is not None and t.log_trajectories_max < 1:
        _fail(
            "trainer.log_trajectories_max",
            f"must be null or >= 1, got {t.log_trajectories_max}",
            "null writes every episode; trainer.save_trajectories=false writes none",
        )
    if t.rollout_workers < 0:
        _fail("trainer.rollout_workers", f"must be >= 0, got {t.rollout_workers}",
              "0 plays rollouts in this process; N >= 1 uses N Ray actors")  # fmt: skip
    if t.worker_batch_groups < 0:
        _fail("trainer.worker_batch_groups", f"must be >= 0, got {t.worker_batch_groups}",
              "0 plays a worker's whole shard in one batch; e.g. 4 caps it at 4 groups")  # fmt: skip
    if t.train_ranks < 1:
        _fail("trainer.train_ranks", f"must be >= 1, got {t.train_ranks}",
              "1 updates in this process; M >= 2 updates data-parallel on M ranks")  # fmt: skip
    from ragen.distributed.sharding import TRAIN_SHARDINGS

    if t.train_sharding not in TRAIN_SHARDINGS:
        _fail("trainer.train_sharding", f"unknown value {t.train_sharding!r}",
              f"one of {', '.join(TRAIN_SHARDINGS)}")  # fmt: skip
    if t.train_sharding == "fsdp" and t.train_ranks > 1 and t.rollout_workers < 1:
        _fail("trainer.train_sharding",
              "fsdp keeps no whole copy of the weights in the trainer, so it cannot generate "
              "rollouts in this process (trainer.rollout_workers=0)",
              "trainer.rollout_workers=1 or more (the workers hold the whole weights), or "
              "trainer.train_sharding=replicate")  # fmt: skip
    if t.rollout_workers > 0 or t.train_ranks > 1:
        from ragen.distributed.ray_setup import INSTALL_HINT, ray_installed

        if not ray_installed():
            key = "trainer.rollout_workers" if t.rollout_workers > 0 else "trainer.train_ranks"
            _fail(key, "needs Ray, which is not installed",
                  f"{INSTALL_HINT}, or trainer.rollout_workers=0 trainer.train_ranks=1 "
                  "to run in one process")  # fmt: skip
    for key, value in (
        ("trainer.worker_cpus", t.worker_cpus),
        ("trainer.worker_gpus", t.worker_gpus),
    ):
        if value is not None and not 0 <= value < float("inf"):
            _fail(key, f"must be a number >= 0, got {value}", "e.g. 1 (fractions share a device)")
    if t.keep_last is not None and t.keep_last < 1:
        _fail("trainer.keep_last", f"must be null or >= 1, got {t.keep_last}", "null keeps all")
    for key, value in (("model.actor_lr", m.actor_lr), ("model.critic_lr", m.critic_lr)):
        if value <= 0:
            _fail(key, f"learning rate must be > 0, got {value}", "e.g. 1e-6 for a 0.5B model")
    for key in (
        "gamma",
        "lam",
        "gamma_turn",
        "lam_turn",
        "gamma_token",
        "lam_token",
        "window_gamma",
    ):
        value = getattr(a, key)
        if not 0 <= value <= 1:
            _fail(f"algo.{key}", f"must be in [0, 1], got {value}", "1.0 is no discounting")
    if not 0 <= a.pg_min_entropy < float("inf"):  # also NaN
        _fail(
            "algo.pg_min_entropy",
            f"must be a finite number >= 0 (nats), got {a.pg_min_entropy}",
            "0 trains every token; e.g. 0.1 leaves near-certain template tokens out",
        )
    if a.advantage_floor is not None and not math.isfinite(a.advantage_floor):
        _fail(
            "algo.advantage_floor",
            f"must be null or a finite number, got {a.advantage_floor}",
            "null leaves advantages as they are; 0 drops the negative ones",
        )
    for key in ("kl_coef", "entropy_coef", "clip_ratio_low", "clip_ratio_high", "value_clip"):
        value = getattr(a, key)
        if value < 0:
            _fail(f"algo.{key}", f"must be >= 0, got {value}", "0 turns it off")
    if a.clip_ratio_c <= 1:
        _fail("algo.clip_ratio_c", "dual-clip constant must exceed 1", "use 3.0 (default)")
    if a.grad_clip <= 0:
        _fail("algo.grad_clip", f"the gradient-norm clip must be > 0, got {a.grad_clip}",
              "e.g. 1.0 (default); a huge value such as 1e9 leaves gradients unclipped")  # fmt: skip
    if a.skip_grad_norm_above is not None and a.skip_grad_norm_above <= 0:
        _fail("algo.skip_grad_norm_above", f"must be null or > 0, got {a.skip_grad_norm_above}",
              "null never skips; e.g. 10 skips optimizer steps whose grad norm exceeds 10")  # fmt: skip
    if t.val_temperature < 0:
        _fail("trainer.val_temperature", f"must be >= 0, got {t.val_temperature}", "0 is greedy")
    if a.micro_token_budget < 0:
        _fail("algo.micro_token_budget", f"must be >= 0, got {a.micro_token_budget}",
              "0 picks what fits in memory; e.g. 8192")  # fmt: skip
    d = a.dynamic_sampling
    check_choice("algo.dynamic_sampling.on", d.on, ("success", "reward"))
    if d.max_rounds < 0:
        _fail("algo.dynamic_sampling.max_rounds", f"must be >= 0, got {d.max_rounds}", "e.g. 3")
    if d.enabled and cfg.env.train_states:
        _fail("algo.dynamic_sampling.enabled", "refills draw fresh states; they cannot use "
              "the fixed pool of env.train_states", "env.train_states=0")  # fmt: skip
    if a.filter.strategy == "top_p" and not 0 < a.filter.value <= 1:
        _fail(
            "algo.filter.value",
            f"top_p keeps a fraction in (0, 1], got {a.filter.value}",
            "e.g. 0.25 (1.0 keeps every group)",
        )
    if a.filter.strategy in ("nucleus", "min_p") and not (
        0 < a.filter.value <= 1 if a.filter.strategy == "nucleus" else 0 <= a.filter.value <= 1
    ):
        _fail(
            "algo.filter.value",
            f"{a.filter.strategy} takes a share of the metric in (0, 1], got {a.filter.value}",
            "e.g. algo.filter.value=0.5",
        )
    _check_collapse(t)
    if a.filter.strategy == "top_k" and a.filter.value < 1:
        _fail(
            "algo.filter.value",
            f"top_k keeps a number of groups >= 1, got {a.filter.value}",
            "e.g. algo.filter.value=4",
        )


def _check_collapse(t: TrainerSection) -> None:
    c = t.collapse
    if c.window < 1 or c.grad_norm_history < 1:
        _fail("trainer.collapse.window", "windows must be >= 1", "e.g. window=3")
    for key in ("group_std_ratio", "entropy_ratio", "thought_diversity_ratio", "mutual_info_ratio"):
        value = getattr(c, key)
        if not 0 < value < 1:
            _fail(
                f"trainer.collapse.{key}",
                f"a drop ratio must be in (0, 1), got {value}",
                "e.g. 0.5 (fire at half the peak); drop the signal from trainer.collapse.signals to turn it off",
            )
    if c.grad_norm_spike <= 1:
        _fail(
            "trainer.collapse.grad_norm_spike", f"must exceed 1, got {c.grad_norm_spike}", "e.g. 8"
        )
    if c.format_error_rise <= 0 or c.min_drop < 0:
        _fail(
            "trainer.collapse",
            "format_error_rise must be > 0 and min_drop >= 0",
            "see docs/TRAINING.md",
        )
    parse_rollback_change(t.rollback_change)


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
    import copy

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
    """Keys that are each valid but cannot go together."""

    from ragen.algo.registry import get_advantage_estimator, needs_critic

    a, r = cfg.algo, cfg.rollout
    if a.advantage_tokens != "response":
        takes_mask = "advantage_mask" in get_advantage_estimator(a.adv_estimator).data_params
        if not takes_mask:
            _fail(
                "algo.advantage_tokens",
                f"{a.advantage_tokens!r} needs an estimator that takes an advantage mask "
                f"(M_adv), and {a.adv_estimator!r} does not",
                "set algo.adv_estimator=masked_gae, or algo.advantage_tokens=response",
            )
    if needs_critic(a.adv_estimator) and not a.use_critic:
        _fail(
            "algo.use_critic",
            f"estimator {a.adv_estimator!r} needs a critic (value baseline) but use_critic=false",
            "set algo.use_critic=true or use a critic-free estimator (grpo, drgrpo, rloo, reinforce_plus_plus)",
        )
    if (
        a.adv_estimator in ("bi_level_gae", "vagen_bi_level_gae", "turn_gae")
        and a.reward_placement != "turn"
    ):
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
    group_based = a.adv_estimator in ("grpo", "drgrpo", "rloo") or a.norm_grouping == "state"
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
