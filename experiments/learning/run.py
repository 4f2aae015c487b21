"""Does RL add on top of the warm start? The demo pipeline over several seeds.

    .venv/bin/python -m experiments.learning.run --seeds 0 1 2 --out runs/learning
    .venv/bin/python -m experiments.learning.run --seeds 0 --envs bandit --config toy   # smoke run

For every seed: tiny model -> SFT on noisy expert data -> StarPO-S -> evaluation on
held-out validation seeds (the stages of ``ragen.demo``). Prints success rates per
environment as mean ± std over seeds for random, warm start, after RL and the oracle,
and the RL gain (after RL - warm start), and writes the same table to
``<out>/learning.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.common import cli, fmt_stats, parse_study_args
from ragen.demo import DEFAULT_ENVS, STAGES, Demo, default_jobs
from ragen.viz.report import DEMO_COLUMNS

COLUMNS = list(DEMO_COLUMNS)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    p.add_argument("--out", default="runs/learning")
    p.add_argument(
        "--jobs", type=int, default=None, help="envs side by side (default: as `make demo`)"
    )
    p.add_argument("--skip-existing", action="store_true", help="reuse seeds whose results exist")
    args = parse_study_args(p, argv, __file__)
    per_seed = {}
    for seed in args.seeds:
        out = Path(args.out) / f"seed{seed}"
        demo = Demo(out, args.budget, args.envs, seed=seed)
        if not (
            args.skip_existing
            and all(env in demo.results and COLUMNS[2] in demo.results[env] for env in args.envs)
        ):
            demo.run(list(STAGES), jobs=args.jobs or default_jobs(len(args.envs)))
        per_seed[seed] = demo.results
    lines = [
        f"seeds: {args.seeds}; config: {args.config}",
        "",
        "| environment | " + " | ".join(COLUMNS) + " | RL gain |",
        "|---" * (len(COLUMNS) + 2) + "|",
    ]
    for env in args.envs:
        cells = [
            fmt_stats([r[env][c]["success_rate"] for r in per_seed.values() if c in r.get(env, {})])
            for c in COLUMNS
        ]
        gains = [
            r[env][COLUMNS[2]]["success_rate"] - r[env][COLUMNS[1]]["success_rate"]
            for r in per_seed.values()
            if COLUMNS[1] in r.get(env, {}) and COLUMNS[2] in r.get(env, {})
        ]
        lines.append(f"| {env} | " + " | ".join(cells) + f" | {fmt_stats(gains, unit=' pts')} |")
    text = "\n".join(lines)
    print(text)
    Path(args.out, "learning.md").write_text(text + "\n")


if __name__ == "__main__":
    raise SystemExit(cli(main))
