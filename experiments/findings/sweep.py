"""The shared machinery of the findings: warm starts, RL runs, their curves and summaries.

Public helpers the run script and the analyses use (nothing here is private to one
finding):

* :func:`warm_start` -- a tiny model built per seed, SFT on the env's expert, cached
  under ``<root>/warm/<key>/seed<k>`` and shared by every finding that plays the env
  the same way;
* :func:`train_overrides` / :func:`run_rl` -- one ``ragen train`` run of a variant and
  seed (skipped when its folder already holds a finished run);
* :func:`read_curves`, :func:`summarize`, :func:`mean_std` -- what the figure and the
  table are made of.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.findings.config import FindingConfig, Variant, WarmStart

DONE = "done"  # written into a run folder once its training returned


# -- the shape a variant is played in -------------------------------------------------
def variant_shape(cfg: FindingConfig, variant: Variant) -> dict[str, Any]:
    """The finding's shape with the variant's own settings on top."""
    shape = {
        "algo": cfg.algo,
        "reasoning": cfg.reasoning,
        "actions_per_turn": cfg.actions_per_turn,
        "env_groups": cfg.env_groups,
        "group_size": cfg.group_size,
        "actor_lr": cfg.actor_lr,
    }
    for key in shape:
        value = getattr(variant, key)
        if value is not None:
            shape[key] = value
    return shape


def new_tokens(cfg: FindingConfig, reasoning: str) -> int:
    """Per-turn token budget: structured formats (sections to fill) get more."""
    from ragen.agent.reasoning import SECTIONS

    return cfg.structured_tokens if SECTIONS[reasoning] else cfg.max_new_tokens


def rollout_config(cfg: FindingConfig, reasoning: str, actions_per_turn: int):
    """The :class:`~ragen.agent.rollout.RolloutConfig` the warm start's data is played in
    (RL gets the same knobs from :func:`train_overrides`)."""
    from ragen.agent.rollout import RolloutConfig

    return RolloutConfig(
        max_turns=cfg.max_turns,
        max_actions_per_turn=actions_per_turn,
        max_actions_per_trajectory=cfg.max_actions_per_trajectory,
        context_window=cfg.context_window,
        max_new_tokens=new_tokens(cfg, reasoning),
        max_model_len=2048,
        prompt_style=cfg.prompt_style,
        reasoning=reasoning,
    )


# -- warm starts ----------------------------------------------------------------------
def warm_key(cfg: FindingConfig, reasoning: str, actions_per_turn: int) -> str:
    """A folder name for a warm start: readable, plus a hash of everything SFT reads."""
    # keys added to WarmStart later count only when set (not at their defaults), so that
    # the warm starts built before them keep their folders
    later = ("warmup_frac", "adam_beta2", "aux_reasoning", "aux_episodes")
    default = asdict(WarmStart())
    warm = {k: v for k, v in asdict(cfg.warm).items() if k not in later or v != default[k]}
    facts = {
        "env": cfg.env,
        "env_config": cfg.env_config,
        "model": cfg.model,
        "warm": warm,
        "rollout": asdict(rollout_config(cfg, reasoning, actions_per_turn)),
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:8]
    return f"{cfg.env}-{reasoning}-a{actions_per_turn}-{digest}"


def base_model(root: Path, cfg: FindingConfig, seed: int) -> str:
    """The model SFT starts from: a tiny model built for ``seed``, or ``cfg.model``."""
    if not cfg.model.startswith("tiny"):
        return cfg.model
    from ragen.models.tiny import create_tiny

    size = cfg.model.partition(":")[2] or "nano"
    folder = root / "warm" / f"tiny-{size}" / f"seed{seed}"
    if not (folder / "config.json").exists():
        create_tiny(folder, size=size, seed=seed)
    return str(folder)


def warm_dir(root: Path, cfg: FindingConfig, variant: Variant, seed: int) -> Path:
    """Where the warm start of ``variant`` on ``seed`` lives (built or not)."""
    shape = variant_shape(cfg, variant)
    key = warm_key(cfg, shape["reasoning"], shape["actions_per_turn"])
    return root / "warm" / key / f"seed{seed}"


def warm_start(root: Path, cfg: FindingConfig, variant: Variant, seed: int, log=print) -> Path:
    """The SFT warm start ``variant`` starts from on ``seed`` (built once, then reused)."""
    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft

    shape = variant_shape(cfg, variant)
    reasoning, actions = shape["reasoning"], shape["actions_per_turn"]
    folder = warm_dir(root, cfg, variant, seed)
    if (folder / "config.json").exists():
        return folder
    w = cfg.warm
    sft = SFTConfig(
        env=cfg.env,
        env_config=dict(cfg.env_config),
        rollout=rollout_config(cfg, reasoning, actions),
        episodes=w.episodes,
        epsilon=w.epsilon,
        labels=w.labels,
        epochs=w.epochs,
        lr=w.lr,
        batch_size=w.batch_size,
        warmup_frac=w.warmup_frac,
        adam_beta2=w.adam_beta2,
        aux_reasoning=w.aux_reasoning,
        aux_episodes=w.aux_episodes,
        actions_per_turn=actions,
        seed=seed,
    )
    device = None if cfg.device == "auto" else cfg.device
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    aux = f" (+ {w.aux_episodes} in the {w.aux_reasoning} format)" if w.aux_reasoning else ""
    log(f"warm start {folder.parent.name} seed {seed}: SFT on {w.episodes} expert episodes{aux}")
    run_sft(base_model(root, cfg, seed), tmp, sft, log=log, device=device)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)  # a folder with config.json is always a finished warm start
    return folder


# -- RL runs --------------------------------------------------------------------------
def all_seeds(cfg: FindingConfig) -> list[int]:
    """The seeds a finding runs: ``seeds``, or with a collapse study its calibration and
    scored seeds."""
    if cfg.collapse is not None:
        return [*cfg.collapse.calibrate_seeds, *cfg.collapse.score_seeds]
    return list(cfg.seeds)


def samples_per_episode(cfg: FindingConfig) -> int:
    """Training samples one episode can give: one per turn when windowed."""
    return cfg.max_turns if cfg.context_window is not None else 1


def train_overrides(
    cfg: FindingConfig, variant: Variant, seed: int, warm: Path, run_dir: Path
) -> list[str]:
    """The ``ragen train`` overrides of one run: the finding's shape, the variant's
    overrides, and one optimizer step per training step (the minibatch holds every
    sample the filter can keep, so filter settings do not change the step count)."""
    from ragen.trainer.config import load_config

    shape = variant_shape(cfg, variant)
    reasoning = shape["reasoning"]
    items = [
        f"env={cfg.env}",
        f"algo={shape['algo']}",
        f"model={cfg.model_preset}",  # the preset's lengths and learning rates ...
        f"model.path={warm}",  # ... for this warm start
        f"model.device={cfg.device}",
        *([f"model.actor_lr={shape['actor_lr']}"] if shape["actor_lr"] is not None else []),
        f"rollout.max_turns={cfg.max_turns}",
        f"rollout.max_actions_per_turn={shape['actions_per_turn']}",
        f"rollout.max_actions_per_trajectory={cfg.max_actions_per_trajectory}",
        f"rollout.max_new_tokens={new_tokens(cfg, reasoning)}",
        f"rollout.prompt_style={cfg.prompt_style}",
        f"rollout.reasoning={reasoning}",
        f"rollout.env_groups={shape['env_groups']}",
        f"rollout.group_size={shape['group_size']}",
        *(
            [f"rollout.context_window={cfg.context_window}"]
            if cfg.context_window is not None
            else []
        ),
        *[f"env.config.{k}={json.dumps(v)}" for k, v in cfg.env_config.items()],
        f"trainer.total_steps={cfg.steps}",
        f"trainer.val_every={cfg.val_every}",
        f"trainer.val_groups={cfg.val_groups}",
        f"trainer.save_every={cfg.steps}",
        f"trainer.seed={seed}",
        f"trainer.run_dir={run_dir}",
        "trainer.console=false",
        "trainer.tensorboard=false",
        "trainer.log_trajectories_every=10",
        *cfg.overrides,
        *variant.overrides,
    ]
    typed = load_config([*items, "algo.ppo_mini_batch_size=1"])  # the real size: below
    items.append(f"algo.ppo_mini_batch_size={max_kept_samples(cfg, typed)}")
    return items


def max_kept_samples(cfg: FindingConfig, train_cfg) -> int:
    """The most samples a step can keep after the filter (its minibatch size)."""
    r, f = train_cfg.rollout, train_cfg.algo.filter
    groups = r.env_groups
    if f.strategy == "top_p":
        groups = max(1, math.ceil(f.value * r.env_groups - 1e-9))
    elif f.strategy == "top_k":
        groups = min(int(f.value), r.env_groups)
    return max(1, groups * r.group_size * samples_per_episode(cfg))


def run_dir(out: Path, name: str, seed: int) -> Path:
    return out / "runs" / name / f"seed{seed}"


def run_rl(
    root: Path,
    out: Path,
    cfg: FindingConfig,
    name: str,
    seed: int,
    extra: list[str] = (),
    log=print,
) -> Path:
    """Train variant ``name`` on ``seed`` unless its folder holds a finished run of the
    same overrides; ``extra``: more overrides (the collapse study's thresholds). A run
    whose settings changed since is trained again. Returns the folder."""
    import torch

    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    folder = run_dir(out, name, seed)
    variant = cfg.variants[name]
    items = [*train_overrides(cfg, variant, seed, warm_dir(root, cfg, variant, seed), folder),
             *extra]  # fmt: skip
    if (folder / DONE).exists():
        if json.loads((folder / DONE).read_text()).get("overrides") == items:
            return folder
        log(f"RL {name} seed {seed}: its settings changed since it ran; training it again")
    warm_start(root, cfg, variant, seed, log=log)
    shutil.rmtree(folder, ignore_errors=True)  # an unfinished run starts over
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(seed)
    tic = time.perf_counter()
    log(f"RL {name} seed {seed}: {cfg.steps} steps")
    StarPOTrainer(load_config(items)).train()
    seconds = time.perf_counter() - tic
    (folder / DONE).write_text(json.dumps({"seconds": seconds, "overrides": items}, indent=1))
    log(f"RL {name} seed {seed}: done in {seconds:.0f}s")
    return folder


def heldout(cfg: FindingConfig, variant: Variant, model: str, n: int) -> dict[str, Any]:
    """``model`` on ``n`` held-out validation states (one episode each, temperature 0.5,
    the same states and sampling seed for every model: evaluations pair state by state),
    with the per-state outcomes in state order (the pairs behind a gain's interval,
    ``ragen.stats``)."""
    from ragen.agent.evaluate import run_evaluation
    from ragen.agent.metrics import success_by_state

    shape = variant_shape(cfg, variant)
    played = run_evaluation(
        model,
        env=cfg.env,
        n=n,
        temperature=0.5,
        max_turns=cfg.max_turns,
        seed=0,
        config=rollout_config(cfg, shape["reasoning"], shape["actions_per_turn"]),
        env_config=dict(cfg.env_config),
        batch_groups=min(n, 256),
        device=None if cfg.device == "auto" else cfg.device,
    )
    out: dict[str, Any] = {
        k: float(v) for k, v in played.metrics.items() if isinstance(v, (int, float))
    }
    wins = success_by_state(played.trajectories)
    out["per_state"] = [wins[s] for s in sorted(wins)]
    return out


def final_actor(folder: Path) -> Path:
    ckpts = sorted((folder / "checkpoints").glob("step_*[0-9]"), key=lambda p: int(p.name[5:]))
    if not ckpts:
        raise RuntimeError(f"{folder} saved no checkpoint")
    return ckpts[-1] / "actor"


# -- curves and summaries ---------------------------------------------------------------
def read_curves(
    folder: Path, keys: list[str], x_axis: str = "step", per_rollout: int = 0
) -> dict[str, list]:
    """``{key: [(x, value), ...]}`` of a finished run; x is the step, or (``x_axis=
    "episodes"``) the env episodes sampled up to and including that step,
    ``per_rollout`` per fresh rollout (a step that trained on an earlier rollout again,
    ``rollout/reuse_age > 0``, samples none)."""
    from ragen.trainer.metrics_logger import read_metrics

    out: dict[str, list] = {k: [] for k in keys}
    episodes = 0
    for row in read_metrics(folder):
        if not row.get("rollout/reuse_age"):
            episodes += per_rollout
        x = row["step"] if x_axis == "step" else episodes
        for k in keys:
            v = row.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[k].append((x, float(v)))
    return out


def episodes_per_rollout(cfg: FindingConfig, variant: Variant) -> int:
    shape = variant_shape(cfg, variant)
    return shape["env_groups"] * shape["group_size"]


def last_mean(points: list, n: int) -> float:
    """Mean of the last ``n`` values of a curve (NaN for an empty one)."""
    values = [v for _, v in points[-n:]]
    return statistics.mean(values) if values else float("nan")


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation over seeds (std 0 for one seed)."""
    values = [v for v in values if v == v]
    if not values:
        return float("nan"), float("nan")
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(folder: Path, cfg: FindingConfig) -> dict[str, Any]:
    """One run's numbers for the table: the outcome's last and best value, and the mean
    of the last ``table_last`` values of every ``table`` metric."""
    keys = [cfg.outcome, *cfg.table]
    curves = read_curves(folder, keys)
    outcome = curves[cfg.outcome]
    done = json.loads((folder / DONE).read_text()) if (folder / DONE).exists() else {}
    return {
        "outcome_last": outcome[-1][1] if outcome else float("nan"),
        "outcome_best": max(v for _, v in outcome) if outcome else float("nan"),
        "outcome_first": outcome[0][1] if outcome else float("nan"),
        **{k: last_mean(curves[k], cfg.table_last) for k in cfg.table},
        "seconds": done.get("seconds"),
    }
