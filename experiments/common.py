"""What the research studies under ``experiments/`` share: their YAML configs, the demo's
pipeline on a shared warm start, held-out evaluation, and the tables' number format.

A study is a folder ``experiments/<name>/`` with ``run.py`` (``python -m
experiments.<name>.run``), its ``config.yaml`` and its ``results.md``. The config holds
the defaults of the script's options, by their long names (``seeds: [0, 1, 2]`` for
``--seeds``), and under ``budget:`` the demo's work per stage (``ragen.recipes.Budget``:
``preset: classic`` (the default), ``full`` or ``toy``, then any of its fields; a
per-env field merges over the preset's). The command line overrides the config; ``--config toy`` picks
``<study>/toy.yaml``, ``--config PATH`` any file.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ragen.agent.evaluate import evaluate, run_evaluation
from ragen.demo import Demo
from ragen.envs.facts import OBSERVATION_FORMATS
from ragen.errors import ConfigError, RagenError, check_choice
from ragen.recipes import BUDGETS, ENV_SHAPE, Budget
from ragen.run_layout import CHECKPOINTS, checkpoint_dirs

__all__ = [
    "CURVE_KEYS",
    "EVAL_KEYS",
    "parse_study_args",
    "load_budget",
    "cli",
    "fmt_stats",
    "metric_curves",
    "GridRun",
    "evaluate_on_validation",
    "final_actor",
    "model_path",
    "play_heldout",
    "parse_variant",
    "variant_budget",
    "rl_from_warm_start",
    "paired_columns",
    "add_warm_start_arguments",
    "warm_start_budget",
    "provenance",
    "write_results",
]

GRID_ENVS = ("frozen_lake", "sokoban")
# what the grid studies record of each RL run, per training step ...
CURVE_KEYS = (
    "rollout/success_rate",
    "reward/grounding",
    "reward/world_model",
    "reward/consistency",
    "rollout/thought_words",
    "rollout/format_error_rate",
)
# ... and of each model on the validation episodes
EVAL_KEYS = (
    "success_rate",
    "format_error_rate",
    "reward/grounding",
    "reward/world_model",
    "reward/consistency",
    "thought_words",
)


# -- configs ----------------------------------------------------------------------------
def load_budget(section: dict[str, Any] | None, presets: dict[str, Any] | None = None) -> Any:
    """A ``budget:`` section -> a budget: ``preset`` (of ``presets``, by default the
    demo's :data:`~ragen.recipes.BUDGETS`: ``classic``, the demo the earlier studies
    measured, and the default; ``full``, what ``make demo`` runs; ``toy``, a smoke run)
    with the other keys' fields replaced; a per-env field (``sft_episodes: {sokoban:
    8192}``) merges over the preset's."""
    presets = BUDGETS if presets is None else presets
    section = dict(section or {})
    preset = section.pop("preset", "classic")
    if preset not in presets:
        raise ConfigError(f"budget.preset: unknown {preset!r}. Fix: one of {', '.join(presets)}")
    base = presets[preset]
    fields = {f.name for f in dataclasses.fields(base)}
    changes = {}
    for key, value in section.items():
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"budget.{key}: not a budget field.{hint} Valid: {', '.join(sorted(fields))}")  # fmt: skip
        current = getattr(base, key)
        changes[key] = {**current, **value} if isinstance(current, dict) else value
    return dataclasses.replace(base, **changes)


def _config_path(study: Path, name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    candidate = study / f"{name}.yaml"
    if candidate.is_file():
        return candidate
    names = sorted(p.stem for p in study.glob("*.yaml"))
    raise ConfigError(
        f"--config {name!r}: no such file, and no {candidate}. Fix: one of {', '.join(names)}, "
        "or a path to a .yaml file"
    )


def parse_study_args(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    study_file: str,
    budgets: dict[str, Any] | None = None,
) -> argparse.Namespace:
    """Parse ``argv`` over the defaults in the study's YAML config (module docstring).

    ``study_file``: the script's ``__file__``. A study whose config has a ``budget:``
    section gets ``args.budget``, one of ``budgets`` (default: the demo's
    :class:`~ragen.recipes.Budget` presets) with the section's changes. A config key that
    is no option of the script is a one-line :class:`~ragen.errors.ConfigError`.
    """
    study = Path(study_file).resolve().parent
    parser.add_argument(
        "--config",
        default="config",
        help="the study's YAML config: a name in its folder (config, toy, ...) or a path; "
        "options given here override it",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the options the config and the command line resolve to, and exit",
    )
    required = {a: a.required for a in parser._actions}
    for action in required:  # the config may give them: only --config is read here
        action.required = False
    known, _ = parser.parse_known_args(argv)
    for action, was in required.items():
        action.required = was
    path = _config_path(study, known.config)
    config = yaml.safe_load(path.read_text()) or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a study config is a mapping of option names to values")
    budget = config.pop("budget", None) if "budget" in config else False
    own = ("help", "config", "print_config")
    actions = {a.dest: a for a in parser._actions if a.dest not in own}
    appended: dict[str, Any] = {}
    for key, value in config.items():
        dest = str(key).replace("-", "_")
        if dest not in actions:
            close = difflib.get_close_matches(dest, sorted(actions), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{path}: {key!r} is not an option of this study.{hint} "
                              f"Valid: {', '.join(sorted(actions))}")  # fmt: skip
        action = actions[dest]
        action.required = False  # the config gives it
        if action.choices is not None:
            for item in value if isinstance(value, list) else [value]:
                check_choice(f"{path.name}: {key}", item, action.choices)
        if isinstance(action, argparse._AppendAction):
            # argparse would append the command line to a default list: the config's
            # list applies only when the command line gives none
            action.default = None
            appended[dest] = list(value)
        else:
            parser.set_defaults(**{dest: value})
    args = parser.parse_args(argv)
    for dest, value in appended.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)
    if budget is not False:
        args.budget = load_budget(budget, budgets)
    args.config = str(path)
    if args.print_config:
        shown = {k: v for k, v in vars(args).items() if k not in own}
        if budget is not False:
            shown["budget"] = dataclasses.asdict(args.budget)
        print(f"# {path}\n" + yaml.safe_dump(json.loads(json.dumps(shown, default=str)), sort_keys=False), end="")  # fmt: skip
        raise SystemExit(0)
    return args


def cli(main: Callable[[list[str] | None], int | None]) -> int:
    """Run a study's ``main``: a user error (a bad config or option) is one line, exit 2."""
    try:
        return int(main(None) or 0)
    except RagenError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


# -- results files ------------------------------------------------------------------------
def provenance(command: str) -> dict[str, str]:
    """What a results file records of where it came from (``python -m experiments.report``
    reads it): the command, the device, the commit checked out (``+`` when the tree had
    changes) and the date."""
    import os
    import subprocess
    import time

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+"
    device = f"CPU ({os.cpu_count()} cores)"
    try:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return {"command": command, "device": device, "commit": commit,
            "date": time.strftime("%Y-%m-%d")}  # fmt: skip


def write_results(path: Path, payload: dict[str, Any], command: str) -> Path:
    """``payload`` as JSON at ``path`` with its :func:`provenance`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**payload, **provenance(command)}, indent=1) + "\n")
    return path


# -- tables -----------------------------------------------------------------------------
def fmt_stats(values: list[float], scale: float = 100.0, unit: str = "%", signed: bool = False) -> str:  # fmt: skip
    """``mean ± std`` over seeds (the mean alone for one seed); ``signed`` shows a + on gains."""
    if not values:
        return "—"
    mean = scale * statistics.mean(values)
    text = f"{mean:+.1f}" if signed else f"{mean:.1f}"
    if len(values) == 1:
        return f"{text}{unit}"
    return f"{text} ± {scale * statistics.stdev(values):.1f}{unit}"


def metric_curves(run_dir: Path, keys: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """Per-step training metrics ``keys`` of a ``ragen train`` run (``metrics.jsonl``)."""
    out: dict[str, list[tuple[int, float]]] = {k: [] for k in keys}
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "event" in row:  # a collapse warning or other event, not a step's metrics
            continue
        for k in keys:
            if k in row:
                out[k].append((int(row["step"]), float(row[k])))
    return out


def paired_columns(
    rows: list[dict[str, Any]], variant: str, base: list[float], head: int = 5, tail: int = 10
) -> tuple[list[float], str, str]:
    """For one variant's runs (one per seed) and their warm starts' success ``base``:
    (success after RL per seed, "sS warm -> RL" per seed, the training success of the
    first ``head`` -> last ``tail`` steps per seed that ran at least ``head + tail``)."""
    after = [r[variant]["success_rate"] for r in rows]
    per_seed = ", ".join(
        f"s{r['seed']} {100 * w:.1f} -> {100 * a:.1f}" for r, w, a in zip(rows, base, after)
    )
    train = []
    for r in rows:
        curve = [v for _, v in r[variant]["curves"].get("rollout/success_rate", [])]
        if len(curve) >= head + tail:
            train.append(
                f"{statistics.mean(curve[:head]):.2f} -> {statistics.mean(curve[-tail:]):.2f}"
            )
    return after, per_seed, "; ".join(train)


# -- the demo's pipeline on a shared warm start -----------------------------------------
class GridRun(Demo):
    """The demo's stages (``ragen.demo``) for one env and seed, on a tiny model folder
    shared by several runs, with one RL folder per variant (``rl_<variant>``)."""

    def __init__(self, out: Path, budget: Budget, env: str, seed: int, tiny: Path, variant: str):
        super().__init__(out, budget, [env], seed, results={})
        self.tiny, self.variant = tiny, variant

    @property
    def tiny_dir(self) -> Path:
        return self.tiny

    def rl_dir(self, env: str) -> Path:
        return self.out / env / f"rl_{self.variant}"


def evaluate_on_validation(
    demo: Demo, env: str, model: str, keys: tuple[str, ...]
) -> dict[str, float]:
    """``model`` on the budget's ``eval_episodes`` validation episodes of ``env`` at
    temperature 0.5, with the demo's rollout settings; the metrics ``keys``."""
    shape, b = ENV_SHAPE[env], demo.budget
    metrics = evaluate(
        model,
        env=env,
        n=b.eval_episodes,
        temperature=0.5,
        max_turns=shape.max_turns,
        seed=demo.seed,
        config=shape.rollout(b, env),
        env_config=b.env_config(env),
        batch_groups=64,
    )
    return {k: float(metrics[k]) for k in keys if k in metrics}


def parse_variant(text: str) -> tuple[str, dict[str, int], list[str]]:
    """``NAME:OVERRIDE,OVERRIDE`` -> (name, budget changes, ``ragen train`` overrides).

    ``steps=N`` (RL steps), ``groups=N`` and ``group_size=N`` (env groups per step and
    episodes per group; the optimizer still takes one step per training step) change the
    demo's budget; every other item is a ``ragen train`` override."""
    name, _, rest = text.partition(":")
    if not name:
        raise ConfigError(
            f"variant {text!r}: expected NAME:OVERRIDE,... (e.g. lr3e-4:model.actor_lr=3e-4)"
        )
    budget: dict[str, int] = {}
    overrides = []
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key in ("steps", "groups", "group_size"):
            budget[key] = int(value)
        else:
            overrides.append(item)
    return name, budget, overrides


def variant_budget(
    budget: Budget, env: str, changes: dict[str, int], overrides: list[str], extra=()
) -> Budget:
    """``budget`` with a variant's ``steps`` / ``groups`` / ``group_size`` changes, and its
    ``ragen train`` overrides after ``extra`` (training trajectories every 10th step)."""
    return dataclasses.replace(
        budget,
        extra=[*budget.extra, "trainer.log_trajectories_every=10", *extra, *overrides],
        rl_steps={**budget.rl_steps, env: changes.get("steps", budget.rl_steps[env])},
        env_groups=changes.get("groups", budget.env_groups),
        group_size=changes.get("group_size", budget.group_size),
    )


def rl_from_warm_start(
    source: GridRun, folder: Path, budget: Budget, env: str, name: str
) -> GridRun:
    """The demo's RL stage of variant ``name`` in ``folder``, starting from the warm start
    ``source`` trained (its SFT folder and tiny model are shared, not copied)."""
    run = GridRun(folder, budget, env, source.seed, source.tiny, name)
    run.sft_dir = lambda _env: source.sft_dir(_env)
    run.stage_rl(env)
    return run


def add_warm_start_arguments(p: argparse.ArgumentParser) -> None:
    """The options that change the warm start (model size, SFT data and schedule,
    observation format); :func:`warm_start_budget` applies them. Warm starts are kept
    per ``--out`` folder, so each combination needs its own."""
    p.add_argument("--observation-format", default="grid", choices=OBSERVATION_FORMATS)
    p.add_argument(
        "--size",
        default=None,
        help="tiny model size (nano, micro, small, base; default: the budget's nano); "
        "use a separate --out per size, the warm starts are kept per folder",
    )
    p.add_argument(
        "--sft-episodes",
        type=int,
        default=None,
        help="expert episodes of the warm start (default: the budget's, 2,048 on the grids); "
        "use a separate --out, the warm starts are kept per folder",
    )
    p.add_argument("--sft-epochs", type=int, default=None, help="SFT epochs (default: 3)")
    p.add_argument("--sft-lr", type=float, default=None, help="SFT peak lr (default: 3e-3)")
    p.add_argument(
        "--sft-epsilon",
        type=float,
        default=None,
        help="share of the expert's moves replaced by random ones in the SFT data (default: "
        "the budget's 0.1 on the grids); use a separate --out",
    )


def warm_start_budget(budget: Budget, args: argparse.Namespace) -> Budget:
    """``budget`` with the options of :func:`add_warm_start_arguments` applied."""
    budget = dataclasses.replace(budget, observation_format=args.observation_format)
    if args.size:
        budget = dataclasses.replace(budget, tiny_size=args.size)
    if args.sft_episodes:
        episodes = {env: args.sft_episodes for env in GRID_ENVS}
        budget = dataclasses.replace(budget, sft_episodes={**budget.sft_episodes, **episodes})
    if args.sft_epochs:
        budget = dataclasses.replace(budget, sft_epochs=args.sft_epochs)
    if args.sft_lr:
        budget = dataclasses.replace(budget, sft_lr=args.sft_lr)
    if args.sft_epsilon is not None:
        eps = {env: args.sft_epsilon for env in GRID_ENVS}
        budget = dataclasses.replace(budget, sft_epsilon={**budget.sft_epsilon, **eps})
    return budget


# -- held-out evaluation of finished runs -----------------------------------------------
def final_actor(run: Path) -> Path:
    """The newest ``checkpoints/step_N/actor`` of a ``ragen train`` run."""
    steps = [p for p in checkpoint_dirs(run / CHECKPOINTS) if (p / "actor").is_dir()]
    if not steps:
        raise ConfigError(f"{run}: no checkpoints/step_N/actor. Fix: pass a finished ragen train run")  # fmt: skip
    return steps[-1] / "actor"


def model_path(path: str) -> str:
    """An HF model folder as is; a ``ragen train`` run folder: its newest actor."""
    run = Path(path)
    if (run / CHECKPOINTS).is_dir():
        return str(final_actor(run))
    return path


def play_heldout(
    model: str,
    env: str,
    episodes: int,
    temperature: float,
    fmt: str,
    seed: int,
    batch_groups: int = 64,
    dtype: str | None = None,
    budget: Budget | None = None,
):
    """The :class:`~ragen.agent.evaluate.EvalResult` of ``model`` (a folder, see
    :func:`model_path`) on ``episodes`` held-out states of ``env``, one episode each,
    with the demo's rollout settings in reply format ``fmt``. The same arguments give
    the same states and samples for every model. ``batch_groups``: episodes per
    generate call; ``dtype``: the model's (None: ``load_policy``'s default, bf16 on a
    CUDA device); ``budget``: the :class:`~ragen.recipes.Budget` whose rollout settings
    apply (default: ``classic``, the budget the earlier studies measured)."""
    budget = (budget or BUDGETS["classic"]).playing(fmt)
    shape = ENV_SHAPE[env]
    return run_evaluation(
        model_path(model),
        env,
        n=episodes,
        temperature=temperature,
        max_turns=shape.max_turns,
        seed=seed,
        config=shape.rollout(budget, env),
        env_config=budget.env_config(env),
        batch_groups=batch_groups,
        dtype=dtype,
    )
