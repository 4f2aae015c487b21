"""Evaluate any policy on validation seeds: ``evaluate(model, env, n=...) -> metrics``.

``model`` may be

* ``"oracle"`` / ``"random"`` -- the reference policies (``OraclePolicy``/``RandomPolicy``);
* a path, hub id or ``.gguf`` file -- loaded with ``ragen.models.load_policy``;
* a model name served by an OpenAI-compatible API when ``api_base`` is given;
* an already-loaded causal LM (``torch.nn.Module``) together with ``tokenizer=``;
* any :class:`~ragen.agent.policies.Policy`.

Episodes start from the fixed validation seeds (``EnvStateManager.validation_seeds``,
disjoint from training seeds): ``n // group_size`` groups of ``group_size`` episodes.
With ``out_dir`` it writes ``trajectories.jsonl`` (one episode per line: every turn's
observation, raw response, parsed thought/actions, executed actions, reward),
``metrics.json`` (metrics, generation stats and the exact settings) and ``results.md``
(the summary table, the budget and the command, for a reader).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from ragen.cli_utils import write_error, written_whole
from ragen.engines.hf_vlm import engine_for  # HFEngine, or HFVLMEngine for a VLM
from ragen.engines.openai_api import OpenAIChatEngine
from ragen.errors import UsageError
from ragen.models import load_policy
from ragen.models.memory import rows_that_fit
from ragen.run_layout import CHECKPOINTS, TRAIN_CONFIG, checkpoint_dirs

from .env_manager import EnvStateManager
from .metrics import episodes_of, rollout_metrics
from .policies import ChatPolicy, ModelPolicy, OraclePolicy, Policy, RandomPolicy
from .rollout import RolloutConfig, run_rollout
from .trajectory import Trajectory

REFERENCE_POLICIES = ("oracle", "random")
# a training run's rollout settings that eval reuses for its checkpoints (not sampling:
# temperature/top_p/top_k are the evaluator's choice, nor the batch shape or seed)
RUN_ROLLOUT_KEYS = (
    "max_turns",
    "max_actions_per_turn",
    "max_actions_per_trajectory",
    "max_new_tokens",
    "max_model_len",
    "reasoning",
    "separator",
    "format_penalty",
    "format_reward",
    "context_window",
    "template_strategy",
    "prompt_style",
)
#: the presets ``ragen train env=NAME model=NAME`` reads (ragen/configs/{env,model}/NAME.yaml);
#: ``ragen eval`` takes the same budgets from them
PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"
# --seed-offset + n groups stay below this. Finding validation seed k resets about 8k
# candidate states (1 in 8 is held out): at the limit, ~800,000 resets, 80-90 s on
# Sokoban 6x6 (docs/RELIABILITY.md), reported by Progress.seeds as it goes
MAX_VALIDATION_SEEDS = 100_000


@dataclass
class TrainingRun:
    """Where a model given to ``ragen eval`` came from: the actor folder to load and the
    ``train_config.json`` of its checkpoint."""

    model: str
    train_config: Path


def find_training_run(model: str) -> TrainingRun | None:
    """The training run behind ``model``, or None when it is not a checkpoint.

    Accepted: a checkpoint's actor folder (``RUN/checkpoints/step_N/actor``), a checkpoint
    folder (``RUN/checkpoints/step_N``) or a run folder (``RUN``: its newest checkpoint).
    A run folder without checkpoints raises :class:`UsageError`.
    """
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    if (path / "config.json").is_file() and (path.parent / TRAIN_CONFIG).is_file():
        return TrainingRun(str(path), path.parent / TRAIN_CONFIG)
    if (path / TRAIN_CONFIG).is_file() and (path / "actor").is_dir():
        return TrainingRun(str(path / "actor"), path / TRAIN_CONFIG)
    if (path / "checkpoints").is_dir() and not (path / "config.json").is_file():
        steps = checkpoint_dirs(path / CHECKPOINTS)
        if not steps:
            raise UsageError(
                f"run folder {path} has no checkpoints yet. Fix: pass a model folder, or "
                "train with trainer.save_every > 0"
            )
        return find_training_run(str(steps[-1]))
    return None


def run_rollout_settings(train_config: str | Path) -> dict[str, Any]:
    """The :data:`RUN_ROLLOUT_KEYS` of a checkpoint's ``train_config.json``."""
    path = Path(train_config)
    try:
        rollout = json.loads(path.read_text(encoding="utf-8")).get("rollout") or {}
    except (OSError, ValueError, AttributeError) as err:
        raise UsageError(
            f"cannot read the run's settings from {path} ({err}). Fix: pass the rollout "
            "flags yourself, or point --model at the actor folder's copy"
        ) from err
    if "reasoning" not in rollout and "think" in rollout:  # a run from before rollout.reasoning
        rollout = {**rollout, "reasoning": "free_think" if rollout["think"] else "no_think"}
    return {k: rollout[k] for k in RUN_ROLLOUT_KEYS if k in rollout}


def preset_settings(kind: str, name: str) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """``(rollout settings, env options, path)`` of the preset ``name`` of ``kind``
    (``"env"`` or ``"model"``: ``ragen/configs/KIND/NAME.yaml``), as ``ragen train
    KIND=NAME`` would apply them: the :data:`RUN_ROLLOUT_KEYS` of its ``rollout``
    section (an env's turn budget, a model's token budget) and, for an env preset, its
    ``env.config``. ``({}, {}, None)`` when there is no such preset."""
    folder = PRESET_DIR / kind
    if name not in {p.stem for p in folder.glob("*.yaml")}:  # only a preset's own name
        return {}, {}, None
    path = folder / f"{name}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    rollout = data.get("rollout") or {}
    env_config = (data.get("env") or {}).get("config") or {} if kind == "env" else {}
    shown = str(path.relative_to(PRESET_DIR.parent.parent))
    return {k: rollout[k] for k in RUN_ROLLOUT_KEYS if k in rollout}, dict(env_config), shown


def budget_text(config: RolloutConfig, model: str, actions_per_turn: int | None = None) -> str:
    """One line: the budget an evaluation played (``budget: 5 turns x up to 5 actions,
    at most 10 per episode; 400 new tokens per turn``)."""
    text = (
        f"budget: {config.max_turns} turn{'s' if config.max_turns != 1 else ''} x up to "
        f"{config.max_actions_per_turn} action{'s' if config.max_actions_per_turn != 1 else ''}"
        f", at most {config.max_actions_per_trajectory} per episode"
    )
    if model in REFERENCE_POLICIES:
        return text + f"; {model} plays {actions_per_turn} per turn"
    return text + f"; {config.max_new_tokens} new tokens per turn"


def check_seed_offset(seed_offset: int, n_groups: int) -> None:
    """Raise one-line :class:`UsageError` unless ``seed_offset`` is usable for
    ``n_groups`` validation groups (non-negative, within :data:`MAX_VALIDATION_SEEDS`)."""
    if seed_offset < 0:
        raise UsageError(f"--seed-offset must be >= 0, got {seed_offset}. Fix: --seed-offset 0")
    if seed_offset + n_groups > MAX_VALIDATION_SEEDS:
        raise UsageError(
            f"--seed-offset {seed_offset} with {n_groups} groups runs past the "
            f"{MAX_VALIDATION_SEEDS} validation seeds eval plays. Fix: --seed-offset at most "
            f"{max(0, MAX_VALIDATION_SEEDS - n_groups)} (finding that many validation states "
            "first resets about 8 times as many: 1-2 minutes on Sokoban, with progress lines)"
        )


@dataclass
class Progress:
    """A progress line on stderr after each batch of a long evaluation; silent while the
    run is younger than ``min_seconds`` and after the last batch (the table follows).
    :meth:`seeds` reports the search for validation seeds (long for a large
    ``--seed-offset``) at most every ``every_seconds``."""

    min_seconds: float = 5.0
    stream: Any = None
    clock: Callable[[], float] = time.perf_counter
    start: float = field(default=0.0)
    every_seconds: float = 10.0
    _last_seed_line: float = field(default=float("-inf"), init=False, repr=False)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def seeds(self, found: int, wanted: int) -> str | None:
        """Report ``found`` of the ``wanted`` validation seeds; returns the line written."""
        now = self.clock()
        elapsed = now - self.start
        if (
            found >= wanted
            or elapsed < self.min_seconds
            or now - self._last_seed_line < (self.every_seconds)
        ):
            return None
        self._last_seed_line = now
        eta = f"eta {_clock(elapsed / found * (wanted - found))}" if found else "eta -"
        line = (
            f"eval: finding validation states (--seed-offset + groups): {found:,}/{wanted:,}"
            f"  elapsed {_clock(elapsed)}  {eta}"
        )
        print(line, file=self.stream or sys.stderr, flush=True)
        return line

    def __call__(self, done: int, total: int) -> str | None:
        """Report ``done`` of ``total`` episodes; returns the line written, if any."""
        elapsed = self.clock() - self.start
        if done >= total or elapsed < self.min_seconds or done <= 0:
            return None
        eta = elapsed / done * (total - done)
        line = f"eval: {done}/{total} episodes  elapsed {_clock(elapsed)}  eta {_clock(eta)}"

        print(line, file=self.stream or sys.stderr, flush=True)
        return line


def _clock(seconds: float) -> str:
    """``75.2 -> "1:15"``, ``3725 -> "1:02:05"``."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def build_policy(
    model: Any,
    tokenizer: Any = None,
    api_base: str | None = None,
    device: Any = None,
    dtype: Any = None,
    epsilon: float = 0.0,
    actions_per_turn: int = 1,
    seed: int = 0,
) -> Policy:
    """Turn the ``model`` argument of :func:`evaluate` into a :class:`Policy`."""
    if isinstance(model, Policy):
        return model
    if isinstance(model, str):
        if api_base:
            return ChatPolicy(OpenAIChatEngine(api_base, model), tokenizer)
        if model == "oracle":
            return OraclePolicy(actions_per_turn, epsilon, seed, tokenizer)
        if model == "random":
            return RandomPolicy(actions_per_turn, seed, tokenizer)

        lm, tokenizer = load_policy(model, device=device, dtype=dtype)
        model = lm
    if tokenizer is None:
        raise UsageError(
            f"evaluate got a {type(model).__name__} without tokenizer=; pass the model's "
            "tokenizer (or a path / 'oracle' / 'random' as model)"
        )

    return ModelPolicy(engine_for(model, tokenizer), tokenizer)


def groups_that_fit(policy: Policy, cfg: RolloutConfig, group_size: int) -> int | None:
    """Groups a rollout call may play at once for the model behind ``policy``: their
    K/V caches at ``cfg.max_model_len`` tokens each within the share of free memory a
    micro-batch may take (:func:`ragen.models.memory.rows_that_fit`); None (all at once)
    for a policy without a local model, or where the model's size cannot be told.

    Why not a fixed cap: each decode step costs a fixed overhead plus matmuls over the
    batch's rows, so splitting episodes that fit into several calls pays the steps and
    the prefills again for fewer rows each."""
    model = getattr(getattr(policy, "engine", None), "model", None)
    if model is None:
        return None
    rows = rows_that_fit(model, getattr(model, "device", "cpu"), cfg.max_model_len)
    return None if rows is None else max(1, rows // group_size)


@dataclass
class EvalResult:
    metrics: dict[str, float]
    trajectories: list[Trajectory] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


def evaluate(
    model: Any,
    env: str | Callable[..., Any],
    n: int = 256,
    group_size: int = 1,
    temperature: float = 0.5,
    max_turns: int = 5,
    **kwargs: Any,
) -> dict[str, float]:
    """Play ``n`` validation episodes; return :func:`rollout_metrics` plus generation stats.

    Keyword arguments are those of :func:`run_evaluation`.

    >>> evaluate("oracle", "sokoban", n=16)["success_rate"]
    """
    return run_evaluation(model, env, n, group_size, temperature, max_turns, **kwargs).metrics


def run_evaluation(
    model: Any,
    env: str | Callable[..., Any],
    n: int = 256,
    group_size: int = 1,
    temperature: float = 0.5,
    max_turns: int = 5,
    *,
    tokenizer: Any = None,
    env_config: dict[str, Any] | None = None,
    out_dir: str | Path | None = None,
    api_base: str | None = None,
    config: RolloutConfig | None = None,
    seed: int = 0,
    seed_offset: int = 0,
    batch_groups: int | None = None,
    device: Any = None,
    dtype: Any = None,
    epsilon: float = 0.0,
    actions_per_turn: int = 1,
    progress: Callable[[int, int], Any] | None = None,
    command: list[str] | None = None,
) -> EvalResult:
    """:func:`evaluate` returning the trajectories and settings too.

    ``config`` supplies the remaining rollout knobs (``temperature``, ``max_turns`` and
    ``seed`` given here override it). ``seed_offset`` shifts the validation seeds.
    ``batch_groups`` caps the groups played per rollout call (memory); default (None):
    as many as fit in memory (:func:`groups_that_fit`), 0: all at once.
    ``epsilon``/``actions_per_turn`` configure the reference policies.
    ``progress(done_episodes, n)`` is called after each batch (e.g. :class:`Progress`),
    and ``progress.seeds(found, wanted)``, when it has one, while the validation seeds
    are searched (long for a large ``seed_offset``). ``command``, the command line that
    ran it, is kept in the settings (and ``results.md``).
    """
    if n < 1 or group_size < 1:
        raise UsageError(f"n and group_size must be >= 1, got n={n}, group_size={group_size}")
    if n % group_size:
        raise UsageError(f"n ({n}) must be a multiple of group_size ({group_size})")
    cfg = replace(
        config or RolloutConfig(), temperature=temperature, max_turns=max_turns, seed=seed
    )
    cfg.validate()
    check_seed_offset(seed_offset, n // group_size)
    policy = build_policy(
        model, tokenizer, api_base, device, dtype, epsilon, actions_per_turn, seed
    )
    n_groups = n // group_size
    if batch_groups is None:
        batch_groups = groups_that_fit(policy, cfg, group_size)
    chunk = min(n_groups, batch_groups or n_groups)
    played: list[Trajectory] = []
    stats: dict[str, float] = {}
    tic = time.perf_counter()
    all_seeds: list[int] | None = None
    for start in range(0, n_groups, chunk):
        groups = min(chunk, n_groups - start)
        manager = EnvStateManager(
            env, env_config, env_groups=groups, group_size=group_size, seed=seed
        )
        if all_seeds is None:  # searched once, not again for every batch
            scan = getattr(progress, "seeds", None)
            all_seeds = manager.validation_seeds(n_groups, offset=seed_offset, progress=scan)
        seeds = all_seeds[start : start + groups]
        result = run_rollout(policy, manager, cfg, seeds)
        for t in result.trajectories:  # ids unique across chunks
            t.group_id += start
            t.episode_id += start * group_size
        played.extend(result.trajectories)
        for k, v in result.stats.items():
            stats[k] = stats.get(k, 0.0) + float(v)
        manager.close()
        if progress is not None:
            progress((start + groups) * group_size, n)
    metrics = rollout_metrics(played, group_size)
    metrics["eval_seconds"] = time.perf_counter() - tic
    if stats.get("generated_tokens", 0.0) > 0:  # only token policies generate
        metrics["generated_tokens"] = stats["generated_tokens"]
        metrics["tokens_per_s"] = stats["generated_tokens"] / max(stats["generation_seconds"], 1e-9)
    metrics["context_fallbacks"] = stats.get("context_fallbacks", 0.0)
    settings = {
        "model": model if isinstance(model, str) else type(model).__name__,
        "policy": policy.name,
        "env": env if isinstance(env, str) else getattr(env, "__name__", repr(env)),
        "env_config": dict(env_config or {}),
        "n": n,
        "group_size": group_size,
        "api_base": api_base,
        "rollout": asdict(cfg),
        "actions_per_turn": actions_per_turn,
        "command": shlex.join(command) if command else None,
    }
    if out_dir is not None:
        write_results(out_dir, played, metrics, settings)
    return EvalResult(metrics, played, settings)


def write_results(
    out_dir: str | Path,
    trajectories: list[Trajectory],
    metrics: dict[str, float],
    settings: dict[str, Any],
) -> Path:
    """``trajectories.jsonl`` (one episode per line) and ``metrics.json`` in ``out_dir``."""
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder. Fix: choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise write_error(err, out, "the folder") from None
    # each file whole or not at all: a full or read-only disk is one line, never a 0-byte
    # trajectories.jsonl left behind (cli_utils.written_whole)
    with written_whole(out / "trajectories.jsonl") as f:
        for samples in episodes_of(trajectories):
            record = samples[0].to_json()
            record.pop("turn_rewards", None)  # per sample; the episode's are in turns[*].reward
            record.pop("turn_ends", None)
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    payload = {"metrics": metrics, "settings": settings}
    with written_whole(out / "metrics.json") as f:
        f.write(json.dumps(payload, indent=2, default=str) + "\n")
    with written_whole(out / "results.md") as f:
        f.write(results_markdown(metrics, settings))
    return out


def results_markdown(metrics: dict[str, float], settings: dict[str, Any]) -> str:
    """``results.md``: what was evaluated, on what budget, by which command, and the
    summary table (the console's rows, and a game's wins / draws / losses)."""
    model, env = settings.get("model", "?"), settings.get("env", "?")
    lines = [f"# ragen eval: {model} on {env}", ""]
    if settings.get("command"):
        lines += [f"`{settings['command']}`", ""]
    rollout = settings.get("rollout") or {}
    if rollout:
        try:
            cfg = RolloutConfig(**rollout)
        except TypeError:  # settings from another version: show what there is
            cfg = None
        if cfg is not None:
            lines += [budget_text(cfg, str(model), settings.get("actions_per_turn")) + ".", ""]
    n, k = settings.get("n"), settings.get("group_size")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if n:
        lines += [
            f"{n} episodes on held-out validation states ({n // (k or 1)} x {k}); {when}.",
            "",
        ]
    lines += ["| metric | value |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in table_rows(metrics)]
    return "\n".join(lines) + "\n"


_TABLE_ROWS = [
    ("success_rate", "success rate", "{:.1%}"),
    ("reward_mean", "mean reward", "{:.3f}"),
    ("reward_std", "reward std", "{:.3f}"),
    ("pass_at_k", "pass@k ({k})", "{:.1%}"),
    ("valid_action_rate", "valid action rate", "{:.1%}"),
    ("effective_action_rate", "effective action rate", "{:.1%}"),
    ("mean_turns", "mean turns", "{:.2f}"),
    ("mean_actions", "mean actions", "{:.2f}"),
    ("response_length", "response length (tokens)", "{:.1f}"),
    ("format_error_rate", "format error rate", "{:.1%}"),
    ("truncation_rate", "context overflow rate", "{:.1%}"),
    ("env_truncation_rate", "env truncation rate", "{:.1%}"),
    ("tokens_per_s", "generated tokens/s", "{:.1f}"),
]


def table_rows(metrics: dict[str, float]) -> list[tuple[str, str]]:
    """``(label, value)`` of the summary: the main metrics (missing ones ``-``), and a
    game's wins / draws / losses right under the success rate when the env reports them."""
    k = int(metrics.get("group_size", 1))
    rows = [
        (label.format(k=k), fmt.format(metrics[key]) if key in metrics else "-")
        for key, label, fmt in _TABLE_ROWS
    ]
    if "win_rate" in metrics:
        split = " / ".join(f"{metrics[f'{o}_rate']:.1%}" for o in ("win", "draw", "loss"))
        games = [("wins / draws / losses", split)]
        if metrics.get("unfinished_rate", 0.0) > 0:
            games.append(("unfinished games", f"{metrics['unfinished_rate']:.1%}"))
        rows[1:1] = games
    return rows


def format_table(metrics: dict[str, float], title: str = "") -> str:
    """A two-column text table of the main metrics (missing ones shown as ``-``)."""
    rows = table_rows(metrics)
    width = max(len(label) for label, _ in rows)
    lines = [title] if title else []
    value_width = max(10, *(len(value) for _, value in rows))
    lines += [f"{label:<{width}}  {value:>{value_width}}" for label, value in rows]
    return "\n".join(lines)
