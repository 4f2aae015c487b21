"""Where does RL start to add on the grids? RL variants from one existing warm start.

    .venv/bin/python -m experiments.rl_levers.run      # config.yaml: the four variants below
    .venv/bin/python -m experiments.rl_levers.run --warm runs/reasoning --out runs/rl_levers \\
        --env sokoban --format free_think --seeds 0 1 2 --jobs 2 \\
        --variant base: \\
        --variant lr3e-4:model.actor_lr=3e-4 \\
        --variant epochs4:algo.ppo_epochs=4 \\
        --variant steps200:steps=200

Each ``--variant NAME:OVERRIDE,OVERRIDE`` is the demo's StarPO-S stage (``ragen.demo``,
budget ``full``: 40 steps of 16 groups x 4, actor lr 1e-4, one optimizer step per
training step) with ``ragen train`` overrides on top; ``steps=N`` sets the number of RL
steps (and so the validation and save cadence), ``groups=N`` the env groups per step,
``group_size=N`` the episodes per group
(still one optimizer step per training step). Every variant starts from the SAME
warm start that :mod:`experiments.reasoning.run` trained (``<warm>/<env>/<format>/seedS``),
and is evaluated on the same 128 held-out validation episodes (temperature 0.5) as that
warm start, so the warm start is the frozen-policy control and the gain is paired by
seed. ``base:`` (no overrides) reproduces the reasoning study's ``outcome`` variant.

Results accumulate in ``<out>/results.json`` (a job already there is skipped, so an
interrupted sweep resumes); the table goes to ``<out>/levers.md``. Training
trajectories are written every 10th step (``trainer.log_trajectories_every``), the
validation ones at every validation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import (
    CURVE_KEYS,
    EVAL_KEYS,
    GridRun,
    cli,
    evaluate_on_validation,
    fmt_stats,
    metric_curves,
    paired_columns,
    parse_study_args,
    parse_variant,
    rl_from_warm_start,
    variant_budget,
)
from ragen.errors import ConfigError
from ragen.parent_watch import exit_with_parent
from ragen.recipes import Budget


def run_job(
    warm: Path, out: Path, budget: Budget, env: str, fmt: str, seed: int, variant: str
) -> dict[str, Any]:
    """RL of one variant from the warm start of (env, fmt, seed), then its evaluation."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    tic = time.perf_counter()
    name, changes, overrides = parse_variant(variant)
    b = variant_budget(budget.playing(fmt), env, changes, overrides)
    source = GridRun(
        warm / env / fmt / f"seed{seed}", b, env, seed, warm / "tiny" / f"seed{seed}", "x"
    )
    if not (source.sft_dir(env) / "config.json").exists():
        raise ConfigError(
            f"no warm start at {source.sft_dir(env)}. Fix: run experiments.reasoning.run first"
        )
    run = rl_from_warm_start(source, out / env / fmt / f"seed{seed}", b, env, name)
    result = {
        **evaluate_on_validation(run, env, str(run.final_actor(env)), EVAL_KEYS),
        "overrides": overrides,
        "budget": changes,
        "steps": b.rl_steps[env],
        "curves": metric_curves(run.rl_dir(env), CURVE_KEYS),
        "seconds": time.perf_counter() - tic,
    }
    return {"env": env, "format": fmt, "seed": seed, "variant": name, name: result}


def _worker(warm, out, budget, env, fmt, seed, variant, parent):
    exit_with_parent(parent)
    return run_job(warm, out, budget, env, fmt, seed, variant)


def table(results: dict[str, Any], warm: dict[str, Any]) -> str:
    """Markdown: per env x format x variant, after RL and the paired gain over the warm
    start, with per-seed values, and the last-10-step training success."""
    lines = [
        "| env | format | variant | steps | warm start | after RL | RL gain (paired) | per seed (warm -> RL) | train success, steps 1-5 -> last 10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["env"], r["format"], r["variant"]) for r in results.values()})
    for env, fmt, variant in keys:
        rows = sorted(
            (
                r
                for r in results.values()
                if (r["env"], r["format"], r["variant"]) == (env, fmt, variant)
            ),
            key=lambda r: r["seed"],
        )
        base = [warm[f"{env}/{fmt}/seed{r['seed']}"]["warm start"]["success_rate"] for r in rows]
        after, per_seed, train = paired_columns(rows, variant, base)
        lines.append(
            f"| {env} | {fmt} | {variant} | {rows[0][variant]['steps']} | {fmt_stats(base)} | {fmt_stats(after)} | "
            f"{fmt_stats([a - w for a, w in zip(after, base)], unit=' pts', signed=True)} | {per_seed} | {train} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warm", default="runs/reasoning", help="the reasoning study's output folder")
    p.add_argument("--out", default="runs/rl_levers")
    p.add_argument("--env", action="append", choices=("frozen_lake", "sokoban"))
    p.add_argument("--format", action="append")
    p.add_argument("--variant", action="append", required=True, help="NAME:OVERRIDE,OVERRIDE,...")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2, help="jobs side by side, one thread each")
    args = parse_study_args(p, argv, __file__)
    for v in args.variant:
        parse_variant(v)  # fail before any job starts
    warm, out = Path(args.warm), Path(args.out)
    warm_results = json.loads((warm / "results.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    todo = [
        (env, fmt, seed, variant)
        for variant in args.variant
        for seed in args.seeds
        for env in args.env or ["sokoban"]
        for fmt in args.format or ["free_think"]
        if f"{env}/{fmt}/seed{seed}/{parse_variant(variant)[0]}" not in results
    ]
    budget = args.budget

    def record(res: dict[str, Any]) -> None:
        key = f"{res['env']}/{res['format']}/seed{res['seed']}/{res['variant']}"
        if results_path.exists():  # another sweep may share this folder: merge, don't clobber
            results.update(json.loads(results_path.read_text()))
        results[key] = res
        results_path.write_text(json.dumps(results, indent=1))
        (out / "levers.md").write_text(table(results, warm_results) + "\n")
        r = res[res["variant"]]
        print(f"[{key}] {r['success_rate']:.1%} after {r['seconds']:.0f}s", flush=True)

    if args.jobs <= 1:
        for job in todo:
            record(run_job(warm, out, budget, *job))
    else:
        from concurrent.futures import ProcessPoolExecutor

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(_worker, warm, out, budget, *job, os.getpid()) for job in todo]
            for fut in futures:
                record(fut.result())
    print(table(results, warm_results))
    return 0


if __name__ == "__main__":
    sys.exit(cli(main))
