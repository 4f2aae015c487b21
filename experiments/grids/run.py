"""Warm start, then RL, on FrozenLake and Sokoban: success on the same held-out states
before and after, per seed.

    python -m experiments.grids.run --config tiny-cpu --out runs/grids/tiny-cpu
    python -m experiments.grids.run --config smollm2-gpu --out $OUT/grids --finish-by 560
    python -m experiments.grids.run --config smollm2-cpu seeds=[0] envs=[sokoban]
    python -m experiments.grids.run --out runs/grids/tiny-cpu --report-only

Two phases, each a pool of processes (``--jobs`` at a time; on a GPU they share it):

1. **Warm starts**, one per (env, seed) (``sft.shared``: one per env, seed 0): the model
   (a tiny model built per seed, or a pretrained one) is fine-tuned on the solver's
   moves in states visited by a noisy expert (``ragen.sft``; the noise picks the states,
   never the targets). Its fit is measured on a held-out slice of expert data after
   every epoch, then its success on ``eval_episodes`` held-out validation states.
2. **RL**, one run per (env, seed, variant), from that warm start (``ragen train``),
   evaluated on the same states with the same sampling seed, so gains pair state by
   state; with ``rl.eval_every`` every saved checkpoint is evaluated too (the report's
   gain by RL step). ``--phase eval`` evaluates runs already trained (their saved
   checkpoints) without training them again: an evaluation lost to a killed process.

``--finish-by S`` time-boxes the sweep (seconds from the start): the warm starts' SFT
gets ``sft.max_seconds`` (the config's), the RL runs ``trainer.max_minutes`` = what is
left minus ``--eval-reserve``; steps reached are recorded with each result.

Results: ``<out>/results.json`` (rewritten after every job, so an interrupted sweep keeps
what finished; read again before each write, so two sweeps run side by side into one
folder, e.g. other variants from the same warm start, keep each other's rows) and the
table ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from experiments.common import provenance
from experiments.grids.config import StudyConfig, describe_config, load_study_config

RESULTS = "results.json"


# -- shapes shared by SFT, RL and evaluation ------------------------------------------
def rollout_config(cfg: StudyConfig):
    """The rollout every phase plays: one move per turn, prompted with the current state
    alone (``context_window=0``: the grids are fully observed)."""
    from ragen.agent.rollout import RolloutConfig

    return RolloutConfig(
        max_turns=cfg.max_turns,
        max_actions_per_turn=1,
        context_window=0,
        max_new_tokens=cfg.max_new_tokens,
        max_model_len=2048,
        prompt_style=cfg.prompt_style,
        reasoning=cfg.reasoning,
    )


def env_config(cfg: StudyConfig) -> dict[str, Any]:
    return (
        {} if cfg.observation_format == "grid" else {"observation_format": cfg.observation_format}
    )


def warm_dir(out: Path, cfg: StudyConfig, env: str, seed: int) -> Path:
    return out / env / f"seed{0 if cfg.sft.shared else seed}" / "sft"


def base_model(out: Path, cfg: StudyConfig, seed: int) -> str:
    """The model SFT starts from: a tiny model built for ``seed``, or ``cfg.model``."""
    if not cfg.model.startswith("tiny"):
        return cfg.model
    from ragen.models.tiny import create_tiny

    size = cfg.model.partition(":")[2] or "nano"
    folder = out / "tiny" / f"seed{seed}"
    if not (folder / "config.json").exists():
        create_tiny(folder, size=size, seed=seed)
    return str(folder)


# -- evaluation -----------------------------------------------------------------------
def heldout_success(cfg: StudyConfig, env: str, model: str) -> dict[str, Any]:
    """``model`` on ``cfg.eval_episodes`` held-out validation states of ``env`` (one
    episode each; the same states and sampling seed for every model), at
    ``cfg.eval_temperature`` and at each of ``cfg.extra_eval_temperatures``."""
    result = _heldout_at(cfg, env, model, cfg.eval_temperature)
    if cfg.extra_eval_temperatures:
        result["at_temperature"] = {
            str(t): _heldout_at(cfg, env, model, t) for t in cfg.extra_eval_temperatures
        }
    return result


def _heldout_at(cfg: StudyConfig, env: str, model: str, temperature: float) -> dict[str, Any]:
    from ragen.agent.evaluate import run_evaluation
    from ragen.agent.metrics import success_by_state

    played = run_evaluation(
        model,
        env=env,
        n=cfg.eval_episodes,
        temperature=temperature,
        max_turns=cfg.max_turns,
        seed=0,
        config=rollout_config(cfg),
        env_config=env_config(cfg),
        batch_groups=cfg.eval_batch,
        device=None if cfg.device == "auto" else cfg.device,
    )
    metrics = played.metrics
    keys = (
        "success_rate", "format_error_rate", "valid_action_rate", "eval_seconds",
        "response_length", "mean_turns",
    )  # fmt: skip
    wins = success_by_state(played.trajectories)
    # per state, in validation-seed order (the same states for every model): the pairs
    # behind a gain's interval (ragen.stats)
    return {
        **{k: float(metrics[k]) for k in keys if k in metrics},
        "per_state": [wins[s] for s in sorted(wins)],
    }


def sft_state_success(cfg: StudyConfig, env: str, seed: int, model, tokenizer, n: int) -> float:
    """Success of the in-training ``model`` on ``n`` of its own SFT states (the first
    ``n`` episodes' initial states of the SFT data), at the evaluation temperature."""
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.evaluate import build_policy
    from ragen.agent.rollout import run_rollout
    from ragen.sft.expert_data import SFT_SEED_STEP

    # group g's state depends on (seed, step, g) alone: these are the first n SFT episodes'
    manager = EnvStateManager(env, env_config(cfg), env_groups=n, group_size=1, seed=seed)
    seeds = manager.seeds_for_step(SFT_SEED_STEP)
    policy = build_policy(model, tokenizer)
    rollout = replace(rollout_config(cfg), temperature=cfg.eval_temperature, seed=0)
    result = run_rollout(policy, manager, rollout, seeds)
    episodes = {t.episode_id: t.success for t in result.trajectories}
    return sum(episodes.values()) / max(len(episodes), 1)


# -- phase 1: warm starts -------------------------------------------------------------
def warm_job(out: Path, cfg: StudyConfig, env: str, seed: int) -> dict[str, Any]:
    """SFT warm start of (env, seed) unless present, and its held-out success."""
    import torch

    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(seed)
    folder = warm_dir(out, cfg, env, seed)
    tic = time.perf_counter()
    s = cfg.sft
    sft = SFTConfig(
        env=env,
        env_config=env_config(cfg),
        rollout=rollout_config(cfg),
        episodes=s.episodes,
        epsilon=s.epsilon,
        labels=s.labels,
        epochs=s.epochs,
        batch_size=s.batch_size,
        lr=s.lr,
        warmup_frac=s.warmup_frac,
        adam_beta2=s.adam_beta2,
        fit_check=s.fit_check,
        fit_min_reply_accuracy=s.fit_min_reply_accuracy,
        fit_restarts=s.fit_restarts,
        heldout_episodes=s.heldout_episodes,
        micro_token_budget=s.micro_token_budget,
        bf16=s.bf16,
        max_seconds=s.max_seconds,
        aux_reasoning=s.aux_reasoning,
        aux_episodes=s.aux_episodes,
        stop_at_success=s.stop_at_success,
        success_check_every=s.success_check_every,
        success_check_episodes=s.success_check_episodes,
        success_check_temperature=cfg.eval_temperature,
        seed=seed,
    )

    def on_epoch(model, tokenizer, epoch: int) -> dict[str, float]:
        if not s.fit_episodes:
            return {}
        success = sft_state_success(cfg, env, seed, model, tokenizer, s.fit_episodes)
        return {"sft_state_success": success}

    if not (folder / "config.json").exists():
        device = None if cfg.device == "auto" else cfg.device
        run_sft(base_model(out, cfg, seed), folder, sft, log=_logger(env, seed), on_epoch=on_epoch,
                device=device)  # fmt: skip
    sft_s = time.perf_counter() - tic
    history = [json.loads(line) for line in (folder / "sft_metrics.jsonl").open()]
    fit = [
        {k: v for k, v in r.items() if k.startswith(("heldout_", "train_", "sft_", "epoch"))}
        for r in history
        if "heldout_loss" in r or "sft_state_success" in r
    ]
    restarts = history[0].get("restarts", []) if history else []
    result = heldout_success(cfg, env, str(folder))
    return {
        "env": env,
        "seed": seed,
        "warm": {
            **result,
            "sft_seconds": sft_s,
            "sft_steps": len(history),
            "sft_final_loss": history[-1]["loss"] if history else None,
            "fit": fit,
            "restarts": restarts,
        },
    }


# -- phase 2: RL ----------------------------------------------------------------------
def rl_overrides(
    out: Path, cfg: StudyConfig, env: str, seed: int, variant: str, minutes: float | None
) -> list[str]:
    """The ``ragen train`` overrides of one RL run."""
    r = cfg.rl
    rollout = rollout_config(cfg)
    mini = r.mini_batch_size or r.env_groups * r.group_size * cfg.max_turns
    items = [
        f"env={env}",
        f"algo={r.algo}",
        f"model.path={warm_dir(out, cfg, env, seed)}",
        f"model.actor_lr={r.actor_lr}",
        f"model.device={cfg.device}",
        f"rollout.max_turns={rollout.max_turns}",
        f"rollout.max_actions_per_turn={rollout.max_actions_per_turn}",
        f"rollout.context_window={rollout.context_window}",
        f"rollout.max_new_tokens={rollout.max_new_tokens}",
        f"rollout.prompt_style={rollout.prompt_style}",
        f"rollout.reasoning={rollout.reasoning}",
        f"rollout.env_groups={r.env_groups}",
        f"rollout.group_size={r.group_size}",
        f"algo.ppo_mini_batch_size={mini}",
        f"trainer.total_steps={r.steps}",
        "trainer.val_every=0",  # evaluated below, on the held-out states
        f"trainer.save_every={r.eval_every or r.steps}",
        f"trainer.run_dir={rl_dir(out, env, seed, variant)}",
        f"trainer.seed={seed}",
        "trainer.console=false",
        "trainer.tensorboard=false",
        *[f"env.config.{k}={v}" for k, v in env_config(cfg).items()],
        *r.overrides,
        *r.variants[variant],
    ]
    if minutes is not None:
        items.append(f"trainer.max_minutes={minutes}")
    return items


def rl_runs(cfg: StudyConfig) -> list[tuple[str, int, str]]:
    """Every RL run of the study: ``(env, seed, variant)``."""
    return [(e, s, v) for e in cfg.envs for s in cfg.seeds for v in cfg.rl.variants]


def rl_dir(out: Path, env: str, seed: int, variant: str) -> Path:
    return out / env / f"seed{seed}" / variant


def rl_job(
    out: Path, cfg: StudyConfig, env: str, seed: int, variant: str, minutes: float | None
) -> dict[str, Any]:
    """RL of one variant from (env, seed)'s warm start, then its held-out success."""
    import shutil

    import torch

    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(seed)
    folder = rl_dir(out, env, seed, variant)
    if folder.exists():
        shutil.rmtree(folder)  # a re-run starts over
    tic = time.perf_counter()
    StarPOTrainer(load_config(rl_overrides(out, cfg, env, seed, variant, minutes))).train()
    return evaluated_run(out, cfg, env, seed, variant, time.perf_counter() - tic)


def eval_job(out: Path, cfg: StudyConfig, env: str, seed: int, variant: str) -> dict[str, Any]:
    """``--phase eval``: the held-out evaluation of an RL run that finished training but
    whose evaluation was lost (a killed process): its saved checkpoints, not trained again."""
    import torch

    torch.set_num_threads(cfg.threads)
    return evaluated_run(out, cfg, env, seed, variant, None)


def evaluated_run(
    out: Path, cfg: StudyConfig, env: str, seed: int, variant: str, rl_s: float | None
) -> dict[str, Any]:
    """One trained RL run's record: every saved checkpoint evaluated on the held-out
    states (the last one is the run's result). ``rl_s``: the run's wall seconds; None
    (evaluated after the fact) sums its steps' own ``timing/step``."""
    from ragen.trainer.metrics_logger import read_metrics

    folder = rl_dir(out, env, seed, variant)
    ckpts = sorted((folder / "checkpoints").glob("step_*[0-9]"), key=lambda p: int(p.name[5:]))
    if not ckpts:
        raise RuntimeError(f"RL run {folder} saved no checkpoint")
    records = read_metrics(folder)
    if rl_s is None:
        rl_s = sum(r.get("timing/step", 0.0) for r in records)
    train_curve = [r.get("rollout/success_rate") for r in records]
    result = heldout_success(cfg, env, str(ckpts[-1] / "actor"))
    # every saved checkpoint (rl.eval_every), by the step its name holds: held-out
    # success against RL steps; the last one is `result`
    evals = {int(c.name[5:]): heldout_success(cfg, env, str(c / "actor")) for c in ckpts[:-1]}
    evals[int(ckpts[-1].name[5:])] = result
    curve = {k: e["success_rate"] for k, e in evals.items()}
    # the whole evaluation of every step (other temperatures, per-state outcomes)
    by_step = {k: {kk: v for kk, v in e.items()} for k, e in evals.items()}
    return {
        "env": env,
        "seed": seed,
        "variant": variant,
        variant: {
            **result,
            "steps": len(records),
            "episodes_trained": len(records) * cfg.rl.env_groups * cfg.rl.group_size,
            "rl_seconds": rl_s,
            "seconds_per_step": rl_s / max(len(records), 1),
            "train_success": train_curve,
            "heldout_by_step": curve,
            "evals_by_step": by_step,
        },
    }


# -- orchestration --------------------------------------------------------------------
def _logger(env: str, seed: int):
    def log(msg: str) -> None:
        print(f"[{env} s{seed} {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    return log


def _worker(fn, parent: int, *args):
    from ragen.parent_watch import exit_with_parent

    exit_with_parent(parent)
    return fn(*args)


def run_pool(jobs: list[tuple], workers: int, on_result) -> list[str]:
    """Run ``(fn, *args)`` jobs in ``workers`` spawned processes; ``on_result`` gets each
    result as it finishes. Returns the failures' messages (the others keep going)."""
    failures = []
    if workers <= 1:
        for fn, *args in jobs:
            try:
                on_result(fn(*args))
            except Exception as err:  # noqa: BLE001 - reported, the sweep goes on
                failures.append(f"{fn.__name__}{tuple(args[2:])}: {type(err).__name__}: {err}")
        return failures
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(_worker, fn, os.getpid(), *args): (fn, args) for fn, *args in jobs}
        for future in as_completed(futures):
            fn, args = futures[future]
            try:
                on_result(future.result())
            except Exception as err:  # noqa: BLE001
                failures.append(f"{fn.__name__}{tuple(args[2:])}: {type(err).__name__}: {err}")
                print(f"FAILED {failures[-1]}", flush=True)
    return failures


class Results:
    """``results.json``: {env: {seed: {"warm": {...}, variant: {...}}}} plus the config."""

    def __init__(self, out: Path, cfg: StudyConfig):
        self.path = out / RESULTS
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.data["config"] = asdict(cfg)
        # where the figures came from (python -m experiments.report reads it); the latest
        # sweep into this folder is the one recorded
        self.data["provenance"] = provenance(
            "python -m experiments.grids.run " + " ".join(sys.argv[1:])
        )

    def share_warm_start(self, cfg: StudyConfig) -> None:
        """Seed 0's warm start as every seed's (``sft.shared``: RL seeds share it)."""
        for env in cfg.envs:
            warm = self.data.get(env, {}).get("0", {}).get("warm")
            for seed in cfg.seeds:
                if warm and seed != 0:
                    self.add({"env": env, "seed": seed, "warm": warm})

    def add(self, record: dict[str, Any]) -> None:
        # read the file again first: another sweep writing into the same folder (other
        # variants, started beside this one) has rows this process never saw
        if self.path.exists():
            on_disk = json.loads(self.path.read_text())
            on_disk["config"] = self.data["config"]
            on_disk["provenance"] = self.data["provenance"]
            self.data = on_disk
        row = self.data.setdefault(record["env"], {}).setdefault(str(record["seed"]), {})
        row.update({k: v for k, v in record.items() if k not in ("env", "seed", "variant")})
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def report(data: dict[str, Any]) -> str:
    """The table: per env and variant, warm start -> after RL, paired per seed."""
    cfg = data.get("config", {})
    lines = [
        f"model {cfg.get('model')}, {cfg.get('eval_episodes')} held-out states, "
        f"temperature {cfg.get('eval_temperature')}",
        "",
        "| env | variant | seeds | warm start | after RL | gain (paired) | per seed "
        "(warm -> RL) | RL steps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for env, rows in data.items():
        if env in ("config", "provenance"):
            continue
        seeds = sorted(rows, key=int)
        variants = sorted({k for s in seeds for k in rows[s] if k != "warm"})
        for variant in variants:
            pairs = [
                (rows[s]["warm"]["success_rate"], rows[s][variant]["success_rate"], s)
                for s in seeds
                if "warm" in rows[s] and variant in rows[s]
            ]
            if not pairs:
                continue
            warm = [100 * w for w, _, _ in pairs]
            after = [100 * a for _, a, _ in pairs]
            gain = [a - w for w, a in zip(warm, after)]
            per_seed = ", ".join(f"s{s} {100 * w:.1f} -> {100 * a:.1f}" for w, a, s in pairs)
            steps = ", ".join(str(rows[s][variant].get("steps")) for _, _, s in pairs)
            lines.append(
                f"| {env} | {variant} | {len(pairs)} | {_ms(warm)} | {_ms(after)} | "
                f"{_ms(gain, sign=True)}{_intervals(rows, variant, [s for *_, s in pairs])} | "
                f"{per_seed} | {steps} |"
            )
        warm_only = [s for s in seeds if "warm" in rows[s] and len(rows[s]) == 1]
        if warm_only and not variants:
            warm = [100 * rows[s]["warm"]["success_rate"] for s in warm_only]
            lines.append(f"| {env} | (warm start only) | {len(warm)} | {_ms(warm)} | | | | |")
    return "\n".join(lines + curve_lines(data)) + "\n"


def curve_lines(data: dict[str, Any]) -> list[str]:
    """Held-out gain over the warm start at every evaluated RL step (``rl.eval_every``),
    mean ± std over seeds, for the variants that saved more than their last step."""
    lines: list[str] = []
    for env, rows in data.items():
        if env in ("config", "provenance"):
            continue
        variants = sorted({k for s in rows for k in rows[s] if k != "warm"})
        for variant in variants:
            runs = [rows[s] for s in rows if "warm" in rows[s] and variant in rows[s]]
            # JSON keeps the steps as strings
            curves = [
                {int(k): v for k, v in r[variant].get("heldout_by_step", {}).items()} for r in runs
            ]
            steps = sorted({k for c in curves for k in c})
            if len(steps) < 2:
                continue
            cells = []
            for k in steps:
                gains = [
                    100 * (c[k] - r["warm"]["success_rate"]) for c, r in zip(curves, runs) if k in c
                ]
                cells.append(f"step {k}: {_ms(gains, sign=True)} ({len(gains)} seeds)")
            lines.append(f"| {env} | {variant} | " + "; ".join(cells) + " |")
    if lines:
        head = "Held-out gain over the warm start by RL step (mean ± std over seeds):"
        lines = ["", head, "", "| env | variant | gain by step |", "|---|---|---|", *lines]
    return lines


def _intervals(rows: dict[str, Any], variant: str, seeds: list[str]) -> str:
    """Each seed's paired gain with its 95% bootstrap interval over the held-out states,
    and the seeds pooled (stratified), where both evaluations kept their per-state
    outcomes; empty otherwise."""
    from ragen.stats import paired_bootstrap, stratified_paired_bootstrap

    diffs = []
    for s in seeds:
        before = rows[s]["warm"].get("per_state")
        after = rows[s][variant].get("per_state")
        if not before or not after or len(before) != len(after):
            return ""
        diffs.append([a - b for a, b in zip(after, before)])
    each = "; ".join(f"s{s} {paired_bootstrap(d).points().format()}" for s, d in zip(seeds, diffs))
    pooled = stratified_paired_bootstrap(diffs).points().format()
    return f" (pooled {pooled}; {each})"


def _ms(values: list[float], sign: bool = False) -> str:
    mean = statistics.mean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:+.1f} ± {spread:.1f}" if sign else f"{mean:.1f} ± {spread:.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="config overrides, key=value (dotted)")
    p.add_argument("--config", default="tiny-cpu", help="a YAML file or a preset in configs/")
    p.add_argument("--out", default=None, help="results folder (default runs/grids/<config>)")
    p.add_argument("--jobs", type=int, default=1, help="processes side by side")
    p.add_argument("--finish-by", type=float, default=None, help="seconds: time-box the sweep")
    p.add_argument("--eval-reserve", type=float, default=60.0, help="seconds kept for eval")
    p.add_argument(
        "--phase",
        choices=("warm", "rl", "eval", "all"),
        default="all",
        help="eval: evaluate RL runs already trained (their checkpoints) again, no training",
    )
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--help-config", action="store_true", help="every config key with its help")
    args = p.parse_args(argv)
    if args.help_config:
        print(describe_config())
        return 0
    started = time.perf_counter()
    cfg = load_study_config(args.config, args.overrides)
    out = Path(args.out or f"runs/grids/{Path(args.config).stem}")
    out.mkdir(parents=True, exist_ok=True)
    results = Results(out, cfg)
    failures: list[str] = []
    if not args.report_only:
        if args.phase in ("warm", "all"):
            seeds = [0] if cfg.sft.shared else cfg.seeds
            jobs = [(warm_job, out, cfg, env, seed) for env in cfg.envs for seed in seeds]
            failures += run_pool(jobs, args.jobs, results.add)
        if cfg.sft.shared:  # every RL seed pairs with the one warm start
            results.share_warm_start(cfg)
        if args.phase in ("rl", "all"):
            minutes = None
            if args.finish_by is not None:
                left = args.finish_by - (time.perf_counter() - started) - args.eval_reserve
                minutes = max(left, 30.0) / 60
                print(f"RL time box: {minutes:.1f} min per run", flush=True)
            jobs = [(rl_job, out, cfg, *run, minutes) for run in rl_runs(cfg)]
            failures += run_pool(jobs, args.jobs, results.add)
        if args.phase == "eval":
            jobs = [(eval_job, out, cfg, *run) for run in rl_runs(cfg)]
            failures += run_pool(jobs, args.jobs, results.add)
    table = report(results.data)
    (out / "results.md").write_text(table)
    print(table)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
