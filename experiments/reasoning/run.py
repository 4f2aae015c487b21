"""Reasoning format x reasoning rewards on the grids: does RL add over the warm start?

    .venv/bin/python -m experiments.reasoning.run      # config.yaml: both grids, two formats,
                                                       # both variants, seeds 0 1 2, 2 jobs
    .venv/bin/python -m experiments.reasoning.run --config toy   # smoke run (toy.yaml)
    .venv/bin/python -m experiments.reasoning.run --size micro --out runs/reasoning_micro \
        --env sokoban --format no_think --variant outcome --seeds 0 1   # a 2.5x larger model
    .venv/bin/python -m experiments.reasoning.run --sft-episodes 8192 --out runs/reasoning_sft4x \
        --env sokoban --format no_think --variant outcome --seeds 0 1   # 4x the SFT steps

For every (env, format, seed): the demo's pipeline (``ragen.demo``, the ``budget`` of
the config: ``full``, the demo's, in config.yaml): a tiny model (one per seed, shared by the formats), an SFT warm start on
noisy expert episodes written in that format (true state facts, a plan naming the
expert's action, the true prediction), then one StarPO-S run per *variant* from that
same warm start:

* ``outcome``: the env's reward only (reasoning scores are logged, not rewarded);
* ``reasoning``: plus every reasoning reward the format earns (grounding, world model,
  consistency), each weighted ``success_reward / (max_turns * 3)`` (FrozenLake 1/30,
  Sokoban 10/30): a turn-perfect thought over a whole episode is worth one success.

Warm start and every RL run are evaluated on the same held-out validation states (128
episodes, temperature 0.5), so the warm start is the frozen-policy control of each RL
run. Jobs run ``--jobs`` at a time in separate single-threaded processes; results
accumulate in ``<out>/results.json`` (a job already there is skipped, so an
interrupted sweep resumes), and the table (mean ± std over seeds) goes to
``<out>/reasoning.md``, the curves of the reasoning scores over RL steps to
``<out>/curves_<env>.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import (
    CURVE_KEYS,
    EVAL_KEYS,
    GridRun,
    add_warm_start_arguments,
    cli,
    evaluate_on_validation,
    fmt_stats,
    metric_curves,
    parse_study_args,
    warm_start_budget,
)
from ragen.agent.reasoning import REASONING_FORMATS
from ragen.agent.reasoning_rewards import REASONING_REWARDS
from ragen.agent.rollout import format_rewards
from ragen.models.tiny import create_tiny
from ragen.parent_watch import exit_with_parent
from ragen.recipes import ENV_SHAPE, Budget

VARIANTS = ("outcome", "reasoning")
SUCCESS_REWARD = {"frozen_lake": 1.0, "sokoban": 10.0}  # the envs' reward for solving


def reward_weights(env: str, budget: Budget, fmt: str) -> dict[str, float]:
    """The ``reasoning`` variant's weights: each ``success_reward / (max_turns * 3)``."""
    weight = SUCCESS_REWARD[env] / (ENV_SHAPE[env].max_turns * len(REASONING_REWARDS))
    return {k: round(weight, 4) for k in format_rewards(fmt)}


def run_job(
    out: Path, budget: Budget, env: str, fmt: str, seed: int, variants: list[str]
) -> dict[str, Any]:
    """One (env, format, seed): SFT, warm-start eval, then RL + eval per variant."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    tic = time.perf_counter()
    folder = out / env / fmt / f"seed{seed}"
    fmt_budget = budget.playing(fmt)
    tiny = out / "tiny" / f"seed{seed}"
    demo = GridRun(folder, fmt_budget, env, seed, tiny, "outcome")
    result: dict[str, Any] = {"env": env, "format": fmt, "seed": seed}
    if not (demo.sft_dir(env) / "config.json").exists():
        demo.stage_sft(env)
    result["warm start"] = evaluate_on_validation(demo, env, str(demo.sft_dir(env)), EVAL_KEYS)
    demo.log(f"[{env}/{fmt}/seed{seed}] warm start: {result['warm start']}")
    for variant in variants:
        weights = reward_weights(env, budget, fmt) if variant == "reasoning" else {}
        if variant == "reasoning" and not weights:
            continue  # no_think earns no reasoning reward
        run = GridRun(
            folder,
            dataclasses.replace(fmt_budget, reasoning_rewards=weights),
            env,
            seed,
            tiny,
            variant,
        )
        run.stage_rl(env)
        actor = run.final_actor(env)
        result[variant] = {
            **evaluate_on_validation(run, env, str(actor), EVAL_KEYS),
            "weights": weights,
            "curves": metric_curves(run.rl_dir(env), CURVE_KEYS),
        }
        demo.log(f"[{env}/{fmt}/seed{seed}] {variant}: {result[variant]['success_rate']:.1%}")
    result["seconds"] = time.perf_counter() - tic
    return result


def table(results: dict[str, Any], variants: list[str]) -> str:
    """Markdown: per env x format, warm start, after RL and RL gain per variant, and the
    reasoning scores of the warm start and after RL."""
    lines = [
        "| env | format | warm start | "
        + " | ".join(f"after RL ({v}) | gain ({v})" for v in variants)
        + " | seeds |",
        "|---" * (3 + 2 * len(variants) + 1) + "|",
    ]
    keys = sorted({(r["env"], r["format"]) for r in results.values()})
    for env, fmt in keys:
        rows = [r for r in results.values() if r["env"] == env and r["format"] == fmt]
        cells = [fmt_stats([r["warm start"]["success_rate"] for r in rows])]
        for v in variants:
            have = [r for r in rows if v in r]
            cells.append(fmt_stats([r[v]["success_rate"] for r in have]))
            gains = [r[v]["success_rate"] - r["warm start"]["success_rate"] for r in have]
            cells.append(fmt_stats(gains, unit=" pts"))
        seeds = ",".join(str(r["seed"]) for r in sorted(rows, key=lambda r: r["seed"]))
        lines.append(f"| {env} | {fmt} | " + " | ".join(cells) + f" | {seeds} |")
    lines += ["", "Reasoning scores on the validation episodes (mean over seeds):", ""]
    lines.append(
        "| env | format | policy | grounding | world model | consistency | thought words |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for env, fmt in keys:
        rows = [r for r in results.values() if r["env"] == env and r["format"] == fmt]
        for policy in ["warm start", *variants]:
            have = [r[policy] for r in rows if policy in r]
            if not have:
                continue
            cells = []
            for k in ("reward/grounding", "reward/world_model", "reward/consistency"):
                vals = [h[k] for h in have if k in h]
                cells.append(f"{statistics.mean(vals):.2f}" if vals else "—")
            words = [h["thought_words"] for h in have if "thought_words" in h]
            cells.append(f"{statistics.mean(words):.1f}" if words else "—")
            lines.append(f"| {env} | {fmt} | {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[str, Any], out: Path, variants: list[str]) -> list[Path]:
    """Per env: the training curves of CURVE_KEYS, one line per format x variant (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for env in sorted({r["env"] for r in results.values()}):
        lines = sorted(
            {
                (r["format"], v)
                for r in results.values()
                if r["env"] == env
                for v in variants
                if v in r
            }
        )
        colour = {line: f"C{k}" for k, line in enumerate(lines)}
        fig, axes = plt.subplots(2, 3, figsize=(15, 8))
        for fmt, variant in lines:
            runs = [
                r[variant]["curves"]
                for r in results.values()
                if r["env"] == env and r["format"] == fmt and variant in r
            ]
            for ax, key in zip(axes.flat, CURVE_KEYS):
                series = [dict(c.get(key, [])) for c in runs]
                steps = sorted(set().union(*[s.keys() for s in series])) if series else []
                if not steps:
                    continue
                ys = [statistics.mean([s[t] for s in series if t in s]) for t in steps]
                # one colour per (format, variant) on every panel
                ax.plot(steps, ys, label=f"{fmt} / {variant}", color=colour[(fmt, variant)])
                ax.set_title(key)
                ax.set_xlabel("RL step")
        axes.flat[0].legend(fontsize=7)
        fig.suptitle(f"{env}: training rollouts (mean over seeds)")
        fig.tight_layout()
        path = out / f"curves_{env}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def _worker(
    out: Path, budget: Budget, env: str, fmt: str, seed: int, variants: list[str], parent: int
):
    exit_with_parent(parent)
    return run_job(out, budget, env, fmt, seed, variants)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/reasoning")
    p.add_argument("--env", action="append", choices=sorted(SUCCESS_REWARD))
    p.add_argument("--format", action="append", choices=REASONING_FORMATS)
    p.add_argument("--variant", action="append", choices=VARIANTS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    add_warm_start_arguments(p)
    p.add_argument("--jobs", type=int, default=2, help="jobs side by side, one thread each")
    p.add_argument(
        "--redo",
        action="store_true",
        help="re-run the given variants of jobs already in results.json (the warm start is "
        "reused and re-evaluated; other variants' results are kept)",
    )
    args = parse_study_args(p, argv, __file__)
    envs = args.env or ["frozen_lake", "sokoban"]
    formats = args.format or ["free_think", "grounding_world_modeling"]
    variants = args.variant or list(VARIANTS)
    budget = warm_start_budget(args.budget, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}

    for seed in args.seeds:  # one tiny model per seed, built before the workers start
        tiny = out / "tiny" / f"seed{seed}"
        if not (tiny / "config.json").exists():
            create_tiny(tiny, size=budget.tiny_size, seed=seed)
    todo = [
        (env, fmt, seed)
        for seed in args.seeds
        for env in envs
        for fmt in formats
        if args.redo or f"{env}/{fmt}/seed{seed}" not in results
    ]
    print(f"{len(todo)} job(s) to run, {args.jobs} at a time", flush=True)
    if todo:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=ctx) as pool:
            futures = {
                pool.submit(_worker, out, budget, env, fmt, seed, variants, os.getpid()): (
                    env,
                    fmt,
                    seed,
                )
                for env, fmt, seed in todo
            }
            for future in as_completed(futures):
                env, fmt, seed = futures[future]
                try:
                    done = future.result()
                except Exception as err:  # keep the other jobs and their numbers
                    print(
                        f"[{env}/{fmt}/seed{seed}] FAILED: {type(err).__name__}: {err}",
                        file=sys.stderr,
                    )
                    continue
                # re-read first: another sweep may share this folder (other envs or seeds)
                if results_path.exists():
                    results.update(json.loads(results_path.read_text()))
                key = f"{env}/{fmt}/seed{seed}"
                results[key] = {**results.get(key, {}), **done}
                tmp = results_path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
                os.replace(tmp, results_path)
    text = table(results, variants)
    (out / "reasoning.md").write_text(text + "\n")
    print(text)
    for path in plot(results, out, variants):
        print(f"curves: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli(main))
