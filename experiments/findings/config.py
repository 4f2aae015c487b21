"""A finding's configuration: one YAML file per finding, ``key=value`` overrides.

    cfg = load_finding("echo_trap", budget="cpu", overrides=["seeds=[0]"])

A finding is a sweep: ``variants`` x ``seeds`` RL runs of ``ragen train``, each from a
warm start (a tiny model built per seed, then SFT on the env's expert), with the
curves of ``curves`` drawn per variant (every seed, their mean and spread) and the
metrics of ``table`` summarised. ``collapse`` adds the early-warning study (calibration
seeds, then scored seeds run with the thresholds chosen on the first;
``experiments.findings.prediction``). A file's ``budgets`` section names other sizes of
the same sweep (``--budget gpu``): dotted overrides applied on top of the file.

``python -m experiments.findings.run --help-config`` prints every key with its help.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ragen.errors import ConfigError

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass
class WarmStart:
    """SFT on the env's solver (``ragen.sft``) from a tiny model built per seed."""

    episodes: int = 512  # expert episodes (training states only)
    epsilon: float = 1.0  # share of the expert's moves replaced by random ones
    labels: str = "played"  # played: the move made is the target; expert: the solver's move
    epochs: int = 3
    lr: float = 3e-3
    batch_size: int = 16  # samples (turns) per optimizer step
    # the grid study's recipe that leaves the SFT loss plateau on every seed
    # (docs/RESULTS.md, "A warm start that fits"): lr warm-up, AdamW beta2, and an
    # auxiliary reply format (grounding: the facts of the grid first) on more episodes
    warmup_frac: float = 0.0
    adam_beta2: float = 0.999
    aux_reasoning: str | None = None
    aux_episodes: int = 0


@dataclass
class Variant:
    """One arm of the sweep: ``ragen train`` overrides plus the shape it is played in
    (an unset shape key keeps the finding's)."""

    overrides: list[str] = field(default_factory=list)  # ragen train key=value
    label: str | None = None  # legend text; default: the variant's name
    algo: str | None = None  # an algo preset (ragen/configs/algo)
    reasoning: str | None = None  # reply format, in the warm start and RL alike
    actions_per_turn: int | None = None  # expert actions per turn = rollout.max_actions_per_turn
    env_groups: int | None = None  # initial states per step
    group_size: int | None = None  # episodes per initial state
    actor_lr: float | None = None


@dataclass
class CollapseStudy:
    """Early warning done properly (``experiments.findings.prediction``): thresholds are
    chosen on the runs of ``calibrate_seeds`` only, then the ``score_seeds`` runs train
    with them (``trainer.collapse.*``: the viewer draws them) and are scored."""

    calibrate_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    score_seeds: list[int] = field(default_factory=lambda: [3, 4, 5])
    signals: list[str] = field(
        default_factory=lambda: ["group_reward_std", "entropy", "grad_norm", "mutual_info"]
    )
    # a drop signal's threshold = drop_margin x the lowest diagnostic (a_t / peak) any
    # healthy calibration run reached; a spike's = spike_margin x the highest
    drop_margin: float = 0.9
    spike_margin: float = 1.25
    # a run collapses at the first step whose window-mean success is below
    # onset_fraction x its mean over the first window steps (none: it does not collapse)
    success_key: str = "rollout/success_rate"
    onset_window: int = 3
    onset_fraction: float = 0.5


@dataclass
class FindingConfig:
    """One finding's sweep (module docstring)."""

    title: str = ""  # the figure's title
    claim: str = ""  # the paper's claim this sweep tests (written into the table)
    env: str = "bandit"
    env_config: dict[str, Any] = field(default_factory=dict)  # the env's own options
    model: str = "tiny:nano"  # tiny[:size] built per seed, or a model folder / hub id / preset
    # the ragen model preset RL starts from (its learning rates and lengths); the warm
    # start replaces its path
    model_preset: str = "tiny"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 40  # RL steps per run
    algo: str = "starpo-s"  # the algo preset of every variant that names none
    actor_lr: float | None = None  # null: the tiny model preset's 3e-4
    env_groups: int = 16
    group_size: int = 4
    max_turns: int = 1
    actions_per_turn: int = 1  # the expert's actions per turn = rollout.max_actions_per_turn
    max_actions_per_trajectory: int = 10
    context_window: int | None = None  # null: the whole history; 0: the current state only
    max_new_tokens: int = 48  # per turn (structured reasoning formats: structured_tokens)
    structured_tokens: int = 96  # per turn for grounding / world_modeling formats
    prompt_style: str = "compact"
    reasoning: str = "free_think"
    overrides: list[str] = field(default_factory=list)  # ragen train key=value, every run
    variants: dict[str, Variant] = field(default_factory=dict)  # none: one "base" variant
    warm: WarmStart = field(default_factory=WarmStart)
    val_every: int = 4  # the trainer's held-out validation every this many steps
    val_groups: int = 64  # held-out validation episodes
    # after RL, the warm start and the final policy on this many held-out states, paired
    # (0: the trainer's last validation is the outcome)
    eval_episodes: int = 0
    outcome: str = "val/success_rate"  # the table's headline metric (last value)
    # metrics drawn, one panel each: "key", "key|title" or "key|title|episodes" (x: env
    # episodes sampled instead of x_axis)
    curves: list[str] = field(
        default_factory=lambda: [
            "val/success_rate|validation success",
            "rollout/success_rate|train success",
            "rollout/group_reward_std|in-group reward std",
            "actor/entropy|entropy",
        ]
    )
    # metrics summarised in the table: mean of each run's last `table_last` values
    table: list[str] = field(
        default_factory=lambda: ["rollout/success_rate", "rollout/group_reward_std"]
    )
    table_last: int = 5
    x_axis: str = "step"  # step | episodes (env episodes sampled so far: rollout freshness)
    collapse: CollapseStudy | None = None
    device: str = "cpu"  # cpu | cuda | auto
    threads: int = 1  # torch threads (one process at a time)
    budgets: dict[str, list[str]] = field(default_factory=dict)  # name -> dotted overrides


def config_path(name: str | Path) -> Path:
    """A YAML file, or the name of one in ``configs/``."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    path = CONFIG_DIR / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"no finding {name!r}; findings: {', '.join(finding_names())}")
    return path


def finding_names() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def load_finding(
    name: str | Path, budget: str | None = None, overrides: list[str] = ()
) -> FindingConfig:
    """The finding's YAML, then its ``budgets[budget]`` overrides, then ``overrides``."""
    path = config_path(name)
    base = OmegaConf.structured(FindingConfig)
    try:
        base = OmegaConf.merge(base, OmegaConf.load(path))
        if budget is not None:
            budgets = OmegaConf.to_container(base.budgets)
            if budget not in budgets:
                known = ", ".join(sorted(budgets)) or "none"
                raise ConfigError(f"{path.name} has no budget {budget!r} (budgets: {known})")
            base = OmegaConf.merge(base, OmegaConf.from_dotlist(list(budgets[budget])))
        base = OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides)))
    except ConfigError:
        raise
    except Exception as err:  # omegaconf's own errors name the key
        raise ConfigError(f"finding {path.stem}: {err}") from None
    cfg: FindingConfig = OmegaConf.to_object(base)  # type: ignore[assignment]
    cfg.variants = cfg.variants or {"base": Variant()}
    _check(cfg)
    return cfg


def _check(cfg: FindingConfig) -> None:
    if not cfg.seeds or not cfg.variants:
        raise ConfigError("seeds and variants must each hold at least one entry")
    if cfg.x_axis not in ("step", "episodes"):
        raise ConfigError(f"x_axis must be step or episodes, got {cfg.x_axis!r}")
    if cfg.steps < 1 or cfg.val_every < 0:
        raise ConfigError("steps must be >= 1 and val_every >= 0")
    c = cfg.collapse
    if c is not None:
        if set(c.calibrate_seeds) & set(c.score_seeds):
            both = sorted(set(c.calibrate_seeds) & set(c.score_seeds))
            raise ConfigError(
                f"collapse: seeds {both} are both calibrated on and scored; thresholds "
                "must be chosen on seeds that are not scored. Fix: make the lists disjoint"
            )
        from ragen.trainer.collapse import SIGNALS

        unknown = sorted(set(c.signals) - set(SIGNALS))
        if unknown:
            raise ConfigError(f"collapse.signals: unknown {unknown}; choose from {sorted(SIGNALS)}")


def describe_config() -> str:
    """Every key with its default and the comment beside it in this file."""
    import inspect
    import re

    lines = []
    sections = (
        (FindingConfig, ""),
        (Variant, "variants.<name>."),
        (WarmStart, "warm."),
        (CollapseStudy, "collapse."),
    )
    for cls, prefix in sections:
        for line in inspect.getsource(cls).splitlines():
            m = re.match(r"    (\w+): [^=]+= (.+?)(?:\s+#\s*(.*))?$", line)
            if m and m.group(1) not in ("warm", "collapse", "variants"):
                lines.append(f"{prefix}{m.group(1)} = {m.group(2)}  {m.group(3) or ''}".rstrip())
    return "\n".join(lines)
