"""Does one RL step of a grid study repeat exactly, and does the micro-batch budget change it?

Runs the first RL step of a study's variant from its warm start once per budget given
(a budget may repeat) and prints every ``actor/`` metric side by side. Same budget: the
numbers must be equal to the last digit; another budget cuts the batch into other
micro-batches, so bf16 autocast rounds differently and the numbers part at the first
update. That is why the automatic budget is rounded to a power of two
(``ragen.models.memory.auto_token_budget``)::

    python -m experiments.grids.repeat_check --config smollm2-cpu-sk \\
        --out runs/grids/smollm2-cpu-sk --env sokoban --budgets 512,512,2048 \\
        rl.env_groups=2 rl.group_size=4 rl.actor_lr=2e-5 rl.mini_batch_size=8
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from experiments.grids.config import load_study_config
from experiments.grids.run import rl_overrides, warm_dir


def first_step_metrics(overrides: list[str], run_dir: Path, budget: int) -> dict[str, float]:
    """The ``actor/`` metrics of one RL step run with ``algo.micro_token_budget=budget``."""
    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    items = [o for o in overrides if not o.startswith(("trainer.run_dir=", "trainer.total_steps="))]
    items += [
        f"trainer.run_dir={run_dir}",
        "trainer.total_steps=1",
        "trainer.save_every=0",
        f"algo.micro_token_budget={budget}",
    ]
    StarPOTrainer(load_config(items)).train()
    with (run_dir / "metrics.jsonl").open() as f:
        first = json.loads(f.readline())
    return {k: v for k, v in first.items() if k.startswith("actor/")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="a preset name or YAML file")
    p.add_argument("--out", required=True, help="the study's folder (holds the warm start)")
    p.add_argument("--env", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variant", default=None, help="default: the config's first variant")
    p.add_argument(
        "--budgets",
        type=lambda text: [int(b) for b in text.split(",")],
        required=True,
        help="comma-separated token budgets, one run each (repeat one to check a repeat)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("overrides", nargs="*", help="study config overrides, key=value")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    cfg = load_study_config(args.config, args.overrides)
    out = Path(args.out)
    warm = warm_dir(out, cfg, args.env, args.seed)
    if not (warm / "config.json").exists():
        raise SystemExit(
            f"no warm start in {warm}. Fix: point --out at a study folder whose --phase warm "
            "has run for this --env and --seed"
        )
    variant = args.variant or next(iter(cfg.rl.variants))
    overrides = rl_overrides(out, cfg, args.env, args.seed, variant, None)
    columns = []
    with tempfile.TemporaryDirectory(prefix="repeat_check_") as tmp:
        for i, budget in enumerate(args.budgets):
            columns.append(first_step_metrics(overrides, Path(tmp) / f"run{i}", budget))
    print("metric | " + " | ".join(f"budget {b}" for b in args.budgets))
    for key in columns[0]:
        print(key + " | " + " | ".join(f"{c.get(key, float('nan')):.10g}" for c in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
