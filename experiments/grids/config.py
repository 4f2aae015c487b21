"""The grid study's configuration: one YAML file per preset, ``key=value`` overrides.

    cfg = load_study_config("experiments/grids/configs/smollm2-gpu.yaml", ["seeds=[0]"])

Every knob has its help next to it; ``python -m experiments.grids.run --help-config``
prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from ragen.errors import ConfigError

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass
class SFTStage:
    """The warm start: SFT on solver moves (``ragen.sft``)."""

    episodes: int = 2048  # expert episodes of training states
    epsilon: float = 0.1  # share of moves played at random while the episodes run
    labels: str = "expert"  # expert: the solver's move in every visited state; played
    epochs: int = 3
    batch_size: int = 32  # samples (turns) per optimizer step
    lr: float = 3e-3
    warmup_frac: float = 0.0  # linear warm-up share of the optimizer steps
    adam_beta2: float = 0.999  # AdamW's second-moment decay (0.95: faster adaptation)
    # restart a from-scratch model still on its loss plateau at this share of the steps
    # (reply accuracy on training samples below fit_min_reply_accuracy); 0: off
    fit_check: float = 0.0
    fit_min_reply_accuracy: float = 0.5
    fit_restarts: int = 0
    heldout_episodes: int = 256  # expert episodes kept apart: loss/accuracy per epoch
    micro_token_budget: int = 16384  # padded tokens per forward/backward micro-batch
    bf16: bool = False  # bf16 autocast (CUDA; a CPU with bf16 instructions)
    # stop after this many seconds of optimizer steps (the schedule is shortened to fit,
    # measured on the first steps); null: every epoch
    max_seconds: float | None = None
    # success on this many of its own SFT states (its training data) after every epoch:
    # does the warm start solve what it was taught? 0 = not measured
    fit_episodes: int = 0
    # stop once the model solves this share of its first success_check_episodes SFT
    # states, checked every success_check_every steps (0: every epoch; SFTConfig)
    stop_at_success: float = 0.0
    success_check_every: int = 20
    success_check_episodes: int = 128
    shared: bool = False  # one warm start per env (seed 0), reused by every RL seed
    aux_reasoning: str | None = None  # an auxiliary reply format also trained on
    aux_episodes: int = 0  # its episodes


@dataclass
class RLStage:
    """RL from the warm start: ``ragen train`` overrides, per variant."""

    steps: int = 40  # training steps (trainer.total_steps)
    # variant name -> extra ``ragen train`` overrides (an empty list: the base settings);
    # a file's or a command line's whole ``rl.variants={name: [...]}`` replaces the
    # variants before it, ``rl.variants.NAME=[...]`` adds one
    variants: dict[str, list[str]] = field(default_factory=lambda: {"base": []})
    overrides: list[str] = field(default_factory=list)  # applied to every variant
    env_groups: int = 16
    group_size: int = 4
    actor_lr: float = 1e-4
    algo: str = "starpo-s"  # an algo preset (ragen/configs/algo)
    # samples per optimizer step; null: all the step's samples (one optimizer step)
    mini_batch_size: int | None = None
    # also save and evaluate (held-out states) every this many steps, for a curve of
    # held-out success against RL steps from one run; 0: the last step only
    eval_every: int = 0


@dataclass
class StudyConfig:
    """A warm start then RL per (env, seed), both evaluated on the same held-out states."""

    model: str = "tiny:nano"  # tiny[:size] (built per seed), a folder, .gguf or preset
    envs: list[str] = field(default_factory=lambda: ["frozen_lake", "sokoban"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    prompt_style: str = "compact"  # compact | full (the rules in words)
    reasoning: str = "no_think"  # the reply format (ragen.agent.reasoning)
    max_turns: int = 10
    max_new_tokens: int = 16  # per turn
    observation_format: str = "grid"  # grid | coord | grid_coord
    eval_episodes: int = 512  # held-out validation states, one episode each
    eval_temperature: float = 0.5
    # also evaluate every model at these temperatures (e.g. [1.0], the rollouts'), kept as
    # `at_temperature: {T: {success_rate, per_state}}` beside the main figures
    extra_eval_temperatures: list[float] = field(default_factory=list)
    eval_batch: int = 512  # episodes per generate call in evaluation
    device: str = "auto"  # auto | cpu | cuda
    threads: int = 1  # torch threads per job process
    sft: SFTStage = field(default_factory=SFTStage)
    rl: RLStage = field(default_factory=RLStage)


def load_study_config(path: str | Path | None, overrides: list[str] = ()) -> StudyConfig:
    """``path`` (a YAML file, or a preset name in ``configs/``) with dotted overrides."""
    base = OmegaConf.structured(StudyConfig)
    try:
        if path is not None:
            file = Path(path)
            if not file.exists():
                file = CONFIG_DIR / f"{path}.yaml"
            if not file.exists():
                names = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
                raise ConfigError(f"no study config {path!r}; presets: {names}")
            loaded = OmegaConf.load(file)
            if OmegaConf.select(loaded, "rl.variants") is not None:
                base.rl.variants = {}  # a file's variants replace the defaults, not add to them
            base = OmegaConf.merge(base, loaded)
        if any(o.split("=", 1)[0].strip() == "rl.variants" for o in overrides):
            # so does a whole rl.variants={name: [...]} on the command line (one
            # rl.variants.NAME=[...] adds a variant to the file's)
            base.rl.variants = {}
        base = OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides)))
    except ConfigError:
        raise
    except Exception as err:  # omegaconf's own errors name the key
        raise ConfigError(f"study config: {err}") from None
    cfg: StudyConfig = OmegaConf.to_object(base)  # type: ignore[assignment]
    if not cfg.envs or not cfg.seeds:
        raise ConfigError("envs and seeds must each list at least one entry")
    return cfg


def describe_config() -> str:
    """Every key with its default and the comment beside it in this file."""
    import inspect
    import re

    lines = []
    for cls, prefix in ((StudyConfig, ""), (SFTStage, "sft."), (RLStage, "rl.")):
        for line in inspect.getsource(cls).splitlines():
            m = re.match(r"    (\w+): [^=]+= (.+?)(?:\s+#\s*(.*))?$", line)
            if m and m.group(1) not in ("sft", "rl"):
                lines.append(f"{prefix}{m.group(1)} = {m.group(2)}  {m.group(3) or ''}".rstrip())
    return "\n".join(lines)
