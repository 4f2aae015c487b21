"""Episodes per update at accelerator scale: does RL add on the grids once each update
averages over many more episodes than the demo's 64?

    python -m experiments.grid_scale.run          # config.yaml: the H200 sweep below
    python -m experiments.grid_scale.run --out runs/grid_scale --env frozen_lake --env sokoban \\
        --seeds 0 1 2 --eval-episodes 512 --jobs 6 --finish-by 480 \\
        --extra trainer.bf16=false --extra algo.micro_token_budget=32768 \\
        --variant demo: \\
        --variant x16-all:groups=64,group_size=16,algo.filter.value=1.0,algo.ppo_mini_batch_size=768
    python -m experiments.grid_scale.run --out runs/grid_scale --report-only   # table + curves.png

``bench/gpu_session.sh`` runs it on a lent GPU. What it measured on an H200 was withdrawn
from docs/RESULTS.md ("FrozenLake"): its runs are gone and their results were never
committed (docs/notebook/2026-11-28-report-rebuild.md); commit a session's
``results.json`` under ``experiments/grid_scale/results/`` to report it again.

Two phases, each a pool of single-threaded processes (``--jobs`` at a time; on a GPU
they share the card, which a 1M-parameter model leaves mostly idle):

1. **Warm starts**, one per (env, seed): the demo's pipeline (``ragen.demo``, budget
   ``full``): a tiny:nano model per seed, SFT on 2,048 noisy expert episodes (``--size``,
   ``--sft-episodes``, ``--sft-epochs``, ... change that; use a new ``--out``), then the
   warm start's success on ``--eval-episodes`` held-out validation states (one episode
   each, temperature 0.5, the demo's rollout settings, float32; the same states and
   sampling seed for every model of an env and seed, so gains are paired state by state).
2. **RL**, one run per (env, seed, variant), from that warm start: the demo's StarPO-S
   stage (actor lr 1e-4, critic, top 25% of groups, one optimizer step per training
   step) with the variant's changes, then the same held-out evaluation. A variant is
   ``NAME:ITEM,ITEM`` as in :mod:`experiments.rl_levers.run`: ``groups=N`` / ``group_size=N``
   / ``steps=N`` change the demo's budget (the mini-batch follows the batch: a quarter
   of its episodes' turns, so still one optimizer step per training step), every other
   item is a ``ragen train`` override. ``NAME@ENV:ITEM,...`` runs the variant on that
   env alone (``--env`` still lists every env whose warm starts are built), so one call
   can pair, say, Sokoban's ``x16-all`` with another FrozenLake variant.

**Time-boxed.** ``--finish-by S`` (seconds from the start of this command) gives every
RL run the same wall-clock budget, ``trainer.max_minutes`` = what is left after the
warm starts minus ``--eval-reserve``, so the runs end (validated and saved) instead of
being killed, and the whole sweep fits a lent machine's time. Steps reached, episodes
trained on and seconds per step are recorded with each result. Without ``--finish-by``
each run trains its ``steps`` (default 40, the demo's).

Results go to ``<out>/results.json`` (written after every job, so an interrupted sweep
keeps what finished) and the table to ``<out>/scale.md``.
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
    GridRun,
    add_warm_start_arguments,
    cli,
    fmt_stats,
    metric_curves,
    paired_columns,
    parse_study_args,
    parse_variant,
    play_heldout,
    rl_from_warm_start,
    variant_budget,
    warm_start_budget,
)
from ragen.models.tiny import create_tiny
from ragen.parent_watch import exit_with_parent
from ragen.recipes import Budget

FORMAT = "free_think"  # the demo's reply format


def heldout_success(run: GridRun, env: str, model: str, episodes: int) -> dict[str, float]:
    """``model``'s metrics on ``episodes`` held-out validation states of ``env`` (the
    same states and sampling seed for every model of ``run``'s seed)."""
    metrics = play_heldout(
        model,
        env,
        episodes,
        temperature=0.5,
        fmt=run.budget.reasoning,
        seed=run.seed,
        batch_groups=episodes,  # one generate call per turn: the accelerator's batch
        dtype="float32",  # the CPU figures' arithmetic, not bf16
        budget=run.budget,
    ).metrics
    keys = ("success_rate", "format_error_rate", "reward/consistency", "thought_words")
    return {k: float(metrics[k]) for k in keys if k in metrics}


def scoped_variant(text: str, envs: list[str]) -> tuple[str, list[str]]:
    """``NAME@ENV:ITEMS`` -> (``NAME:ITEMS``, [ENV]); ``NAME:ITEMS`` -> (itself, ``envs``)."""
    head, colon, rest = text.partition(":")
    name, at, env = head.partition("@")
    if not at:
        return text, list(envs)
    if env not in envs:
        raise SystemExit(f"--variant {text!r}: {env!r} is not among --env {envs}; add it")
    return name + colon + rest, [env]


def _warm_run(out: Path, budget: Budget, env: str, seed: int) -> GridRun:
    return GridRun(out / env / f"seed{seed}", budget, env, seed, out / "tiny" / f"seed{seed}", "x")


def warm_job(out: Path, budget: Budget, env: str, seed: int, episodes: int) -> dict[str, Any]:
    """SFT warm start of (env, seed) unless present, and its held-out success."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    tic = time.perf_counter()
    run = _warm_run(out, budget, env, seed)
    if not (run.sft_dir(env) / "config.json").exists():
        run.stage_sft(env)
    sft_s = time.perf_counter() - tic
    result = heldout_success(run, env, str(run.sft_dir(env)), episodes)
    return {
        "env": env,
        "seed": seed,
        "warm start": result,
        "sft_seconds": sft_s,
        "seconds": time.perf_counter() - tic,
    }


def rl_job(
    out: Path,
    budget: Budget,
    env: str,
    seed: int,
    variant: str,
    episodes: int,
    minutes: float | None,
) -> dict[str, Any]:
    """RL of ``variant`` from the (env, seed) warm start, then its held-out success."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    tic = time.perf_counter()
    name, changes, overrides = parse_variant(variant)
    timed = [f"trainer.max_minutes={minutes:.3f}"] if minutes else []
    b = variant_budget(budget, env, changes, overrides, extra=timed)
    source = _warm_run(out, budget, env, seed)
    run = rl_from_warm_start(source, out / env / f"seed{seed}", b, env, name)
    rl_s = time.perf_counter() - tic
    actor = run.final_actor(env)
    curves = metric_curves(run.rl_dir(env), CURVE_KEYS)
    done = len(curves["rollout/success_rate"])
    result = {
        **heldout_success(run, env, str(actor), episodes),
        "overrides": overrides,
        "budget": changes,
        "steps": done,
        "episodes_per_step": b.env_groups * b.group_size,
        "rl_seconds": rl_s,
        "seconds_per_step": rl_s / max(done, 1),
        "curves": curves,
        "timing": _timing(run.rl_dir(env)),
    }
    return {"env": env, "seed": seed, "variant": name, name: result}


def _timing(run_dir: Path) -> dict[str, float]:
    """Mean seconds per step of each ``timing/*`` metric in ``metrics.jsonl``."""
    path = run_dir / "metrics.jsonl"
    sums: dict[str, list[float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            for k, v in row.items():
                if k.startswith("timing/") and isinstance(v, (int, float)):
                    sums.setdefault(k, []).append(float(v))
    return {k: statistics.mean(v) for k, v in sums.items()}


def _warm_worker(out, budget, env, seed, episodes, parent):
    exit_with_parent(parent)
    return warm_job(out, budget, env, seed, episodes)


def _rl_worker(out, budget, env, seed, variant, episodes, minutes, parent):
    exit_with_parent(parent)
    return rl_job(out, budget, env, seed, variant, episodes, minutes)


def table(results: dict[str, Any]) -> str:
    """Markdown: per env x variant, warm start, after RL, the paired gain, per seed, and
    the steps / episodes / seconds each run had."""
    lines = [
        "| env | variant | episodes per step | steps reached | warm start | after RL | RL gain (paired) | per seed (warm -> RL) | s per step | train success, first 3 -> last 3 steps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs = [r for r in results.values() if "variant" in r]
    for env, variant in sorted({(r["env"], r["variant"]) for r in runs}):
        rows = sorted(
            (r for r in runs if (r["env"], r["variant"]) == (env, variant)),
            key=lambda r: r["seed"],
        )
        rows = [r for r in rows if f"{env}/seed{r['seed']}" in results]
        if not rows:
            continue
        base = [results[f"{env}/seed{r['seed']}"]["warm start"]["success_rate"] for r in rows]
        after, per_seed, train = paired_columns(rows, variant, base, head=3, tail=3)
        steps = "/".join(str(r[variant]["steps"]) for r in rows)
        per_step = statistics.mean(r[variant]["seconds_per_step"] for r in rows)
        lines.append(
            f"| {env} | {variant} | {rows[0][variant]['episodes_per_step']} | {steps} | "
            f"{fmt_stats(base)} | {fmt_stats(after)} | "
            f"{fmt_stats([a - w for a, w in zip(after, base)], unit=' pts', signed=True)} | "
            f"{per_seed} | {per_step:.1f} | {train} |"
        )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> Path:
    """Training success per RL step (mean over seeds, up to the last step every seed
    reached), one panel per env, one line per variant; the warm starts' held-out success
    as a dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in results.values() if "variant" in r]
    envs = sorted({r["env"] for r in runs})
    fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs), 4), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for k, variant in enumerate(sorted({r["variant"] for r in runs if r["env"] == env})):
            series = [
                dict(r[variant]["curves"].get("rollout/success_rate", []))
                for r in runs
                if (r["env"], r["variant"]) == (env, variant)
            ]
            # the steps every seed reached: a mean over fewer seeds where a time-boxed
            # run stopped early would jump to those seeds' level
            steps = sorted(set.intersection(*[set(s) for s in series]))
            ys = [statistics.mean(s[t] for s in series) for t in steps]
            ax.plot(steps, ys, label=f"{variant} ({len(series)} seeds)", color=f"C{k}")
        warm = [
            r["warm start"]["success_rate"]
            for r in results.values()
            if "warm start" in r and r["env"] == env
        ]
        ax.axhline(statistics.mean(warm), ls=":", color="grey", label="warm start (held-out)")
        ax.set_title(f"{env}: training success (T = 1), mean over seeds")
        ax.set_xlabel("RL step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _pool(jobs: int):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))


def main(argv: list[str] | None = None) -> int:
    from concurrent.futures import as_completed

    start = time.perf_counter()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/grid_scale")
    p.add_argument("--env", action="append", choices=("frozen_lake", "sokoban"))
    p.add_argument("--variant", action="append", default=[], help="NAME[@ENV]:ITEM,ITEM,...")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--eval-episodes", type=int, default=512)
    p.add_argument("--jobs", type=int, default=2, help="processes side by side, one thread each")
    add_warm_start_arguments(p)  # --size, --sft-episodes, ...: a warm start per --out
    p.add_argument(
        "--finish-by",
        type=float,
        default=None,
        help="seconds from now by which the RL runs must be done: each gets "
        "trainer.max_minutes = what is left after the warm starts minus --eval-reserve",
    )
    p.add_argument(
        "--eval-reserve",
        type=float,
        default=90.0,
        help="seconds kept for the last step, validation, saving and the evaluation",
    )
    p.add_argument("--extra", action="append", default=[], help="override for every RL run")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="only write scale.md and curves.png from <out>/results.json (no runs)",
    )
    args = parse_study_args(p, argv, __file__)
    if not args.variant and not args.report_only:
        p.error("give at least one --variant NAME:ITEM,... (e.g. x16:groups=64,group_size=16)")
    envs = args.env or ["frozen_lake", "sokoban"]
    scoped = [scoped_variant(v, envs) for v in args.variant]
    for v, _ in scoped:
        parse_variant(v)  # fail before any job starts
    base = warm_start_budget(args.budget, args)
    budget = dataclasses.replace(base.playing(FORMAT), extra=[*base.extra, *args.extra])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}

    def record(key: str, res: dict[str, Any]) -> None:
        results[key] = res
        tmp = results_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
        os.replace(tmp, results_path)
        (out / "scale.md").write_text(table(results) + "\n")

    if args.report_only:
        (out / "scale.md").write_text(table(results) + "\n")
        print(table(results))
        print(f"curves: {plot(results, out / 'curves.png')}")
        return 0

    def elapsed() -> str:
        return f"{time.perf_counter() - start:.0f}s"

    for seed in args.seeds:  # one tiny model per seed, built before the workers start
        tiny = out / "tiny" / f"seed{seed}"
        if not (tiny / "config.json").exists():
            create_tiny(tiny, size=budget.tiny_size, seed=seed)
    parent = os.getpid()
    warm_todo = [(e, s) for s in args.seeds for e in envs if f"{e}/seed{s}" not in results]
    print(f"[{elapsed()}] {len(warm_todo)} warm start(s), {args.jobs} at a time", flush=True)
    if warm_todo:
        with _pool(min(args.jobs, len(warm_todo))) as pool:
            futures = {
                pool.submit(_warm_worker, out, budget, e, s, args.eval_episodes, parent): (e, s)
                for e, s in warm_todo
            }
            for future in as_completed(futures):
                env, seed = futures[future]
                try:
                    res = future.result()
                except Exception as err:  # keep the other jobs going and their numbers
                    print(f"[{env}/seed{seed}] FAILED: {type(err).__name__}: {err}", flush=True)
                    continue
                record(f"{env}/seed{seed}", res)
                print(
                    f"[{elapsed()}] {env}/seed{seed} warm start "
                    f"{res['warm start']['success_rate']:.1%} (SFT {res['sft_seconds']:.0f}s)",
                    flush=True,
                )
    minutes = None
    if args.finish_by is not None:
        left = args.finish_by - (time.perf_counter() - start) - args.eval_reserve
        if left < 30:
            print(f"[{elapsed()}] only {left:.0f}s left for RL: stopping here", flush=True)
            print(table(results))
            return 1
        minutes = left / 60
        print(f"[{elapsed()}] every RL run gets trainer.max_minutes={minutes:.2f}", flush=True)
    rl_todo = [
        (e, s, v)
        for v, v_envs in scoped
        for s in args.seeds
        for e in v_envs
        if f"{e}/seed{s}" in results and f"{e}/seed{s}/{parse_variant(v)[0]}" not in results
    ]
    print(f"[{elapsed()}] {len(rl_todo)} RL run(s), {args.jobs} at a time", flush=True)
    if rl_todo:
        with _pool(min(args.jobs, len(rl_todo))) as pool:
            futures = {
                pool.submit(
                    _rl_worker, out, budget, e, s, v, args.eval_episodes, minutes, parent
                ): (e, s, v)
                for e, s, v in rl_todo
            }
            for future in as_completed(futures):
                env, seed, variant = futures[future]
                try:
                    res = future.result()
                except Exception as err:
                    print(f"[{env}/seed{seed}/{variant}] FAILED: {type(err).__name__}: {err}")
                    continue
                name = res["variant"]
                record(f"{env}/seed{seed}/{name}", res)
                r = res[name]
                print(
                    f"[{elapsed()}] {env}/seed{seed}/{name}: {r['success_rate']:.1%} after "
                    f"{r['steps']} steps ({r['seconds_per_step']:.1f}s/step)",
                    flush=True,
                )
    print(table(results))
    print(f"curves: {plot(results, out / 'curves.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(cli(main))
