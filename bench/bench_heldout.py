"""Success of several models on the same held-out states, with the demo's settings.

    .venv/bin/python -m bench.bench_heldout --env sokoban --episodes 512 \\
        runs/sk/sokoban/free_think/seed0/sokoban/sft \\
        runs/sk/sokoban/free_think/seed0/sokoban/rl_outcome

Every model (an HF folder, or a ``ragen train`` run folder: its newest actor) plays the
same ``--episodes`` held-out validation states, one episode each, at temperature 0.5
(``--temperature``), with the demo's rollout settings for ``--env`` in ``--format`` and
the same sampling seed, so a warm start and its RL runs are compared state by state
(about ±2.2 points of sampling noise per model at 512 episodes). 128 episodes, what
``bench_reasoning`` and ``bench_rl_levers`` evaluate on, leave about ±4 points: too
coarse for the gains at stake on the grids (docs/RESULTS.md). For FrozenLake,
``bench.bench_lake_moves`` gives the same success and grades the moves as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from ragen.envs.facts import OBSERVATION_FORMATS


def model_path(path: str) -> str:
    """An HF model folder as is; a ``ragen train`` run folder: its newest actor."""
    run = Path(path)
    if (run / "checkpoints").is_dir():
        from bench.bench_pool_rooms import final_actor

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
    budget=None,
):
    """The :class:`~ragen.agent.evaluate.EvalResult` of ``model`` (a folder, see
    :func:`model_path`) on ``episodes`` held-out states of ``env``, one episode each,
    with the demo's rollout settings in reply format ``fmt``. The same arguments give
    the same states and samples for every model. ``batch_groups``: episodes per
    generate call; ``dtype``: the model's (None: ``load_policy``'s default, bf16 on a
    CUDA device); ``budget``: the :class:`~ragen.demo.Budget` whose rollout settings
    apply (default: ``full``, the demo's)."""
    from ragen.agent.evaluate import run_evaluation
    from ragen.demo import BUDGETS, ENV_SHAPE

    budget = dataclasses.replace(budget or BUDGETS["full"], reasoning=fmt)
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
    from ragen.demo import BUDGETS

    budget = dataclasses.replace(BUDGETS["full"], observation_format=args.observation_format)
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
    raise SystemExit(main())
