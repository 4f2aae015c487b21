"""Does a warm start play, or recall? Success on rooms it was trained on vs rooms it never saw.

    python -m experiments.seen_rooms.run --run runs/learning/seed0 --env sokoban --seed 0

Takes a demo run folder (``python -m ragen.demo`` or ``experiments.learning.run``) and
evaluates its SFT model (and the RL actor, when present) with the demo's rollout
settings at temperature 0.5 on three sets of initial states of ``--n`` episodes each:

* ``sft rooms``: states of the SFT expert data (the first ``--n`` of its episodes);
* ``unseen training rooms``: training-split states from RL steps the demo did not run,
  with any state that is also in the SFT data removed;
* ``validation rooms``: the held-out validation states (``validation_seeds``).

A model that learned to play scores about the same on all three; one that memorized
rooms scores far higher on ``sft rooms``. Before validation was split on states (not
seeds), 34 of the first 256 Sokoban validation rooms were also SFT rooms.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _states(env_name: str, env_config: dict, seeds: list[int]) -> list[str | None]:
    from ragen.envs import make

    env = make(env_name, **env_config)
    keys = []
    for seed in seeds:
        env.reset(seed)
        keys.append(env.state_key())
    return keys


def room_sets(env_name: str, seed: int, sft_episodes: int, n: int) -> dict[str, list[int]]:
    """Seeds of the three room sets (see the module docstring)."""
    from ragen.agent.env_manager import EnvStateManager
    from ragen.sft.expert_data import SFT_SEED_STEP

    sft = EnvStateManager(env_name, env_groups=sft_episodes, group_size=1, seed=seed)
    sft_seeds = sft.seeds_for_step(SFT_SEED_STEP)
    sft_states = set(_states(env_name, {}, sft_seeds))
    fresh = EnvStateManager(env_name, env_groups=n, group_size=1, seed=seed)
    unseen: list[int] = []
    step = 1_000_000  # far past any demo RL step
    while len(unseen) < n:
        candidates = fresh.seeds_for_step(step)
        for s, key in zip(candidates, _states(env_name, {}, candidates)):
            if key not in sft_states and len(unseen) < n:
                unseen.append(s)
        step += 1
    return {
        "sft rooms": sft_seeds[:n],
        "unseen training rooms": unseen,
        "validation rooms": fresh.validation_seeds(n),
    }


def success_on(model: str, env_name: str, seeds: list[int], seed: int, rollout) -> float:
    from dataclasses import replace

    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.evaluate import build_policy
    from ragen.agent.metrics import rollout_metrics
    from ragen.agent.rollout import run_rollout

    policy = build_policy(model, None, None, "cpu", "auto", 0.0, 1, seed)
    manager = EnvStateManager(env_name, env_groups=len(seeds), group_size=1, seed=seed)
    result = run_rollout(policy, manager, replace(rollout, temperature=0.5, seed=seed), seeds)
    return rollout_metrics(result.trajectories, 1)["success_rate"]


def main(argv: list[str] | None = None) -> None:
    from ragen.recipes import BUDGETS, ENV_SHAPE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a demo run folder")
    p.add_argument("--env", default="sokoban", choices=["sokoban", "frozen_lake"])
    p.add_argument("--seed", type=int, default=0, help="the demo run's --seed")
    p.add_argument("--n", type=int, default=128, help="episodes per room set")
    p.add_argument("--budget", default="full", help="the demo run's budget")
    args = p.parse_args(argv)
    budget = BUDGETS[args.budget]
    rollout = ENV_SHAPE[args.env].rollout(budget)
    sets = room_sets(args.env, args.seed, budget.sft_episodes[args.env], args.n)
    run = Path(args.run) / args.env
    models = {"warm start (SFT)": run / "sft"}
    actors = sorted((run / "rl" / "checkpoints").glob("step_*[0-9]"))
    if actors:
        models["after RL"] = actors[-1] / "actor"
    print(f"{args.env}, {args.n} episodes per set, temperature 0.5, run {args.run}")
    print(f"| model | {' | '.join(sets)} |")
    print("|---|" + "---|" * len(sets))
    for name, folder in models.items():
        rates = [success_on(str(folder), args.env, s, args.seed, rollout) for s in sets.values()]
        print(f"| {name} | " + " | ".join(f"{r:.1%}" for r in rates) + " |", flush=True)


if __name__ == "__main__":
    main()
