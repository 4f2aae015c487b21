"""Success of several models on the same held-out states, with the demo's settings.

    .venv/bin/python -m experiments.heldout.run --env sokoban --episodes 512 \\
        runs/sk/sokoban/free_think/seed0/sokoban/sft \\
        runs/sk/sokoban/free_think/seed0/sokoban/rl_outcome

Every model (an HF folder, or a ``ragen train`` run folder: its newest actor) plays the
same ``--episodes`` held-out validation states, one episode each, at temperature 0.5
(``--temperature``), with the demo's rollout settings for ``--env`` in ``--format`` and
the same sampling seed, so a warm start and its RL runs are compared state by state
(about ±2.2 points of sampling noise per model at 512 episodes). 128 episodes, what
the reasoning and rl_levers studies evaluate on, leave about ±4 points: too
coarse for the gains at stake on the grids (docs/RESULTS.md). For FrozenLake,
``experiments.lake_moves.run`` gives the same success and grades the moves as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from experiments.common import cli, play_heldout
from ragen.envs.facts import OBSERVATION_FORMATS
from ragen.recipes import BUDGETS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="HF model folders or ragen train run folders")
    p.add_argument("--env", required=True, choices=["frozen_lake", "sokoban"])
    p.add_argument("--format", default="free_think", help="the models' reply format")
    p.add_argument("--episodes", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument(
        "--observation-format",
        default="grid",
        choices=OBSERVATION_FORMATS,
        help="the grids' observation format the models were trained on",
    )
    p.add_argument("--out", default=None, help="write {model: success} as JSON here")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    budget = dataclasses.replace(BUDGETS["classic"], observation_format=args.observation_format)
    results = {}
    for model in args.models:
        result = play_heldout(
            model, args.env, args.episodes, args.temperature, args.format, args.seed, budget=budget
        )
        results[model] = float(result.metrics["success_rate"])
        print(f"{100 * results[model]:5.1f}%  {model}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli(main))
