"""The echo trap at small scale: vanilla StarPO / GRPO vs StarPO-S from one warm start.

    .venv/bin/python -m experiments.echo_trap.run --env frozen_lake --steps 40 --seeds 0 1 2
    .venv/bin/python -m experiments.echo_trap.run --env bandit --steps 2 --seeds 0 --config toy  # smoke

Every algorithm starts from the same SFT warm start (built once per seed, as in the
demo) and gets the same rollout budget (``env_groups x group_size`` per step, same
steps). StarPO-S trains on the 25% most uncertain groups, the others on all groups.
Writes ``<out>/curves_seed<k>.png`` with success rate, in-group reward std, entropy and
grad norm side by side, and prints per algorithm: best and final validation success,
and the in-group reward std and entropy at the start and the end of training.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from experiments.common import cli, parse_study_args
from ragen.demo import Demo
from ragen.recipes import ENV_SHAPE, rollout_overrides
from ragen.trainer.config import load_config
from ragen.trainer.metrics_logger import read_metrics
from ragen.trainer.starpo import StarPOTrainer
from ragen.viz.report import plot_runs

CURVES = [
    ("val/success_rate", "validation success rate"),
    ("rollout/success_rate", "train success rate"),
    ("rollout/group_reward_std", "in-group reward std"),
    ("actor/entropy", "entropy"),
    ("actor/grad_norm_max", "grad norm (max)"),
    ("rollout/response_length", "response length"),
]


def _first_last(rows, key):
    xs = [r[key] for r in rows if r.get(key) is not None]
    return (xs[0], xs[-1]) if xs else (float("nan"), float("nan"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="frozen_lake")
    p.add_argument("--algos", nargs="+", default=["starpo", "grpo", "starpo-s"])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", default="runs/echo_trap")
    args = parse_study_args(p, argv, __file__)
    budget = args.budget
    summary: dict[str, list[dict]] = {a: [] for a in args.algos}
    for seed in args.seeds:
        root = Path(args.out) / f"seed{seed}"
        demo = Demo(root, budget, [args.env], seed=seed)
        if not (demo.sft_dir(args.env) / "config.json").exists():
            demo.run(["tiny", "sft"])
        runs = {}
        for algo in args.algos:
            run_dir = root / args.env / f"rl-{algo}"
            if not (run_dir / "metrics.jsonl").exists():
                groups, size = budget.env_groups, budget.group_size
                kept = groups * size // 4 if algo == "starpo-s" else groups * size
                kept *= ENV_SHAPE[args.env].samples_per_episode  # windowed: one per turn
                cfg = load_config(
                    [
                        *rollout_overrides(args.env),
                        f"algo={algo}",
                        "model=tiny",
                        f"model.path={demo.sft_dir(args.env)}",
                        f"rollout.env_groups={groups}",
                        f"rollout.group_size={size}",
                        f"rollout.max_new_tokens={budget.max_new_tokens}",
                        f"rollout.prompt_style={budget.prompt_style}",
                        # same number of optimizer steps per training step for every algorithm
                        f"algo.ppo_mini_batch_size={max(1, kept)}",
                        f"trainer.total_steps={args.steps}",
                        f"trainer.val_every={max(1, args.steps // 10)}",
                        f"trainer.val_groups={budget.val_groups}",
                        f"trainer.save_every={args.steps}",
                        f"trainer.seed={seed}",
                        f"trainer.run_dir={run_dir}",
                        *budget.extra,
                    ]
                )
                StarPOTrainer(cfg).train()
            runs[algo] = run_dir
            rows = read_metrics(run_dir)
            val = [r["val/success_rate"] for r in rows if r.get("val/success_rate") is not None]
            summary[algo].append(
                {
                    "best_val": max(val) if val else float("nan"),
                    "final_val": val[-1] if val else float("nan"),
                    "std": _first_last(rows, "rollout/group_reward_std"),
                    "entropy": _first_last(rows, "actor/entropy"),
                }
            )
        plot_runs(runs, root / f"curves_seed{seed}.png", keys=CURVES)
    print(f"env {args.env}, {args.steps} steps, seeds {args.seeds}")
    print(
        f"{'algo':<10} {'best val':>9} {'final val':>9} {'group std start->end':>22} {'entropy start->end':>20}"
    )
    for algo, rows in summary.items():
        mean = lambda xs: statistics.mean(xs) if xs else float("nan")  # noqa: E731
        print(
            f"{algo:<10} {mean([r['best_val'] for r in rows]):>9.3f} {mean([r['final_val'] for r in rows]):>9.3f} "
            f"{mean([r['std'][0] for r in rows]):>10.3f} -> {mean([r['std'][1] for r in rows]):<9.3f} "
            f"{mean([r['entropy'][0] for r in rows]):>8.3f} -> {mean([r['entropy'][1] for r in rows]):<8.3f}"
        )


if __name__ == "__main__":
    raise SystemExit(cli(main))
