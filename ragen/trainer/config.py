"""Typed training configuration with composable presets and dotted CLI overrides.

    ragen train env=sokoban algo=starpo-s model=tiny trainer.total_steps=200 rollout.group_size=16

Resolution order (later wins):

1. the defaults of the dataclasses below (paper defaults, DESIGN.md section 5);
2. the ``model`` preset (``ragen/configs/model/<name>.yaml``; any other value is a
   model path or hub id and sets ``model.path``);
3. the ``env`` preset (``ragen/configs/env/<name>.yaml`` if present, otherwise any
   registered environment name, which sets ``env.name``);
4. the ``algo`` preset (``ragen/configs/algo/<name>.yaml``);
5. ``config=path.yaml`` files, then dotted overrides ``section.key=value``.

Unknown keys, wrong types and impossible combinations raise :class:`ConfigError`
naming the key and the fix, before anything expensive happens.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf  # noqa: F401
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"


class ConfigError(ValueError):
    """A configuration problem; the message names the key and the fix."""


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
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    actor_lr: float = 1e-6
    critic_lr: float = 1e-5
    weight_decay: float = 0.0
    warmup_steps: int = 0
    gradient_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class EnvSection:
    name: str = "sokoban"  # a registered environment (``ragen envs``)
    config: dict[str, Any] = field(
        default_factory=dict
    )  # the env's own knobs, e.g. {dim_room: [8, 8]}
    val_config: dict[str, Any] = field(default_factory=dict)  # overrides for validation envs only


@dataclass
class RolloutSection:
    env_groups: int = 8  # prompt groups (distinct initial states) per step
    group_size: int = 16  # rollouts per initial state
    max_turns: int = 5
    max_actions_per_turn: int = 5
    max_actions_per_trajectory: int = 10
    max_new_tokens: int = 400  # per turn
    max_model_len: int = 4096
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    think: bool = True
    separator: str = "||"
    format_penalty: float = -0.1
    format_reward: float = 0.0
    context_window: int | None = None  # None = full history; k = last k turns, one sample per turn
    prompt_style: str = (
        "full"  # full: env rules in the system prompt; compact: actions + format only
    )


@dataclass
class FilterConfig:
    strategy: str = "top_p"  # top_p | top_k | min_std
    value: float = 1.0  # top_p: fraction of groups kept (1.0 = no filtering)
    include_zero: bool = True  # keep zero-variance groups when they rank high enough


@dataclass
class AlgoConfig:
    name: str = "starpo"  # preset name, informational
    adv_estimator: str = (
        "gae"  # see ragen.algo: gae grpo drgrpo rloo reinforce_plus_plus bi_level_gae turn_gae
    )
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
    filter: FilterConfig = field(default_factory=FilterConfig)
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
    micro_token_budget: int = 8192  # padded tokens per forward/backward micro-batch
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


@dataclass
class TrainerSection:
    total_steps: int = 200
    seed: int = 0
    run_name: str | None = None  # default: <env>-<algo>
    run_dir: str | None = None  # default: runs/<run_name>
    resume: str = "never"  # never | auto | path to a checkpoint folder
    save_every: int = 50
    keep_last: int | None = None
    val_every: int = 10  # 0 disables periodic validation
    val_groups: int = 32  # validation episodes (fixed, disjoint seeds)
    val_temperature: float = 0.5
    save_trajectories: bool = True
    console: bool = True
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "ragen"
    wandb_mode: str = "offline"  # offline works without a network
    bf16: bool = True  # autocast to bf16 where the device supports it (CUDA); CPU stays float32


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvSection = field(default_factory=EnvSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)
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
    except ValidationError as err:
        key = str(getattr(err, "full_key", "") or "")
        raise ConfigError(f"bad value for {key!r} (from {source}): {err.msg}") from None


def _parse_override(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(
            f"override {item!r} is not KEY=VALUE; e.g. trainer.total_steps=100 or algo=starpo-s"
        )
    key, value = item.split("=", 1)
    return key.strip(), value


def load_config(overrides: list[str] | None = None) -> DictConfig:
    """Resolve presets + overrides into a validated config (see module docstring)."""
    cfg: DictConfig = OmegaConf.structured(TrainConfig)
    selections: dict[str, str] = {}
    files: list[str] = []
    dotted: list[str] = []
    for item in overrides or []:
        key, value = _parse_override(item)
        if key in ("env", "algo", "model"):
            selections[key] = value
        elif key == "config":
            files.append(value)
        else:
            dotted.append(f"{key}={value}")

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
            raise ConfigError(f"config file {path!r} does not exist")
        cfg = _merge(cfg, OmegaConf.load(path), path)
    if dotted:
        try:
            dot = OmegaConf.from_dotlist(dotted)
        except Exception as err:  # omegaconf grammar errors
            raise ConfigError(f"cannot parse overrides {dotted}: {err}") from None
        cfg = _merge(cfg, dot, "command line")
    validate(cfg)
    return cfg


def _fail(key: str, problem: str, fix: str) -> None:
    raise ConfigError(f"{key}: {problem}. Fix: {fix}")


def validate(cfg: DictConfig) -> None:
    """Reject impossible combinations early, naming the key and the fix."""
    from ragen import algo as algo_lib
    from ragen import envs
    from ragen.trainer.batching import TURN_BASELINES

    a, r, t = cfg.algo, cfg.rollout, cfg.trainer
    if cfg.env.name not in envs.names():
        _fail(
            "env.name", f"unknown environment {cfg.env.name!r}", f"one of {', '.join(envs.names())}"
        )
    try:
        algo_lib.get_advantage_estimator(a.adv_estimator)
    except KeyError as err:
        _fail(
            "algo.adv_estimator",
            str(err.args[0] if err.args else err),
            "pick a registered estimator",
        )
    needs_critic = algo_lib.needs_critic(a.adv_estimator)
    if needs_critic and not a.use_critic:
        _fail(
            "algo.use_critic",
            f"estimator {a.adv_estimator!r} needs a critic (value baseline) but use_critic=false",
            "set algo.use_critic=true or use a critic-free estimator (grpo, drgrpo, rloo, reinforce_plus_plus)",
        )
    if a.adv_estimator in ("bi_level_gae", "turn_gae") and a.reward_placement != "turn":
        _fail(
            "algo.reward_placement",
            f"{a.adv_estimator} assigns credit per turn and needs turn rewards at turn ends",
            "set algo.reward_placement=turn (the trico preset does)",
        )
    if a.turn_baseline not in TURN_BASELINES:
        _fail(
            "algo.turn_baseline", f"unknown value {a.turn_baseline!r}", " or ".join(TURN_BASELINES)
        )
    if a.reward_placement not in ("trajectory", "turn"):
        _fail(
            "algo.reward_placement", f"unknown value {a.reward_placement!r}", "trajectory or turn"
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
    if a.norm_grouping not in ("none", "state", "batch"):
        _fail("algo.norm_grouping", f"unknown value {a.norm_grouping!r}", "none, state or batch")
    group_based = a.adv_estimator in ("grpo", "drgrpo", "rloo") or a.norm_grouping == "state"
    if group_based and r.group_size < 2:
        _fail(
            "rollout.group_size",
            "group baselines need at least 2 rollouts per initial state",
            "set rollout.group_size>=2",
        )
    if a.filter.strategy not in ("top_p", "top_k", "min_std"):
        _fail(
            "algo.filter.strategy",
            f"unknown strategy {a.filter.strategy!r}",
            "top_p, top_k or min_std",
        )
    kept_groups = r.env_groups
    if a.filter.strategy == "top_p":
        if not 0 < a.filter.value <= 1:
            _fail(
                "algo.filter.value",
                f"top_p keeps a fraction in (0, 1], got {a.filter.value}",
                "e.g. 0.25",
            )
        import math

        kept_groups = max(1, math.ceil(a.filter.value * r.env_groups))
    elif a.filter.strategy == "top_k":
        kept_groups = min(int(a.filter.value), r.env_groups)
    kept = kept_groups * r.group_size * (r.max_turns if r.context_window is not None else 1)
    if a.filter.strategy != "min_std" and kept < a.ppo_mini_batch_size:
        _fail(
            "algo.ppo_mini_batch_size",
            f"the filter keeps {kept} trajectories per step ({kept_groups} of {r.env_groups} groups x "
            f"{r.group_size}), fewer than one minibatch of {a.ppo_mini_batch_size}",
            f"set algo.ppo_mini_batch_size<={kept}, or keep more groups (algo.filter.value) / "
            "raise rollout.env_groups",
        )
    if a.clip_ratio_c <= 1:
        _fail("algo.clip_ratio_c", "dual-clip constant must exceed 1", "use 3.0 (default)")
    if a.kl_type not in ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"):
        _fail("algo.kl_type", f"unknown KL estimator {a.kl_type!r}", "k1, abs, k2 or low_var_kl")
    for key, value in (
        ("trainer.total_steps", t.total_steps),
        ("rollout.env_groups", r.env_groups),
        ("rollout.group_size", r.group_size),
        ("rollout.max_turns", r.max_turns),
        ("algo.ppo_epochs", a.ppo_epochs),
        ("algo.ppo_mini_batch_size", a.ppo_mini_batch_size),
    ):
        if value < 1:
            _fail(key, f"must be >= 1, got {value}", "use a positive integer")
    if r.prompt_style not in ("full", "compact"):
        _fail("rollout.prompt_style", f"unknown style {r.prompt_style!r}", "full or compact")
    if r.max_new_tokens >= r.max_model_len:
        _fail(
            "rollout.max_new_tokens",
            "a single turn cannot exceed the model context",
            "lower it below rollout.max_model_len",
        )
    if t.resume not in ("never", "auto") and not Path(t.resume).exists():
        _fail(
            "trainer.resume",
            f"checkpoint {t.resume!r} does not exist",
            "use auto, never, or an existing checkpoint folder",
        )


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)


def to_dict(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
