"""Does RL learn the rooms it trains on? Per-room success before and after RL on a pool.

    .venv/bin/python -m experiments.pool_rooms.run \\
        --warm runs/reasoning/sokoban/no_think/seed0/sokoban/sft \\
        --rl runs/rl_levers/sokoban/no_think/seed0/sokoban/rl_pool4-lr3e-4 \\
        --env sokoban --format no_think --pool 4 --seed 0

A run trained with ``env.train_states=N`` (:class:`~ragen.agent.env_manager.EnvStateManager`)
draws every training group from one fixed pool of N rooms. This script rebuilds that
pool from ``--pool`` and ``--seed`` (the run's ``env.train_states`` and
``trainer.seed``) and plays ``--episodes`` episodes of every pool room with the warm
start and with the RL run's final actor, at temperature 0.5 (``--temperature``) with the demo's rollout
settings, plus the same number of held-out validation episodes. It separates two
reasons RL may not add on held-out rooms: it does not learn even the rooms it trains
on (an optimization problem), or it learns them and the gain does not transfer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.common import cli, final_actor


def per_room_success(
    model: str, env: str, seeds: list[int], episodes: int, rollout, seed: int, temperature=0.5
):
    """``{seed: success rate}`` over ``episodes`` episodes of each room (one group per
    room), sampled at ``temperature``."""
    from dataclasses import replace

    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.evaluate import build_policy
    from ragen.agent.rollout import run_rollout

    policy = build_policy(model, None, None, "cpu", "auto", 0.0, 1, seed)
    manager = EnvStateManager(env, env_groups=len(seeds), group_size=episodes, seed=seed)
    result = run_rollout(
        policy, manager, replace(rollout, temperature=temperature, seed=seed), seeds
    )
    wins: dict[int, list[bool]] = {s: [] for s in seeds}
    for t in result.trajectories:
        if t.reward_from_turn is None or t.turn_index == 0:  # one record per episode
            wins[t.seed].append(bool(t.success))
    return {s: sum(w) / max(1, len(w)) for s, w in wins.items()}


def room_spread(rates) -> list[int]:
    """How many rooms are never solved, sometimes solved, always solved."""
    rates = list(rates)
    return [sum(p == 0 for p in rates), sum(0 < p < 1 for p in rates), sum(p == 1 for p in rates)]


def main(argv: list[str] | None = None) -> int:

    from ragen.agent.env_manager import EnvStateManager
    from ragen.recipes import BUDGETS, ENV_SHAPE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warm", required=True, help="the warm start (an HF model folder)")
    p.add_argument("--rl", required=True, help="the ragen train run folder trained on the pool")
    p.add_argument("--env", default="sokoban", choices=["sokoban", "frozen_lake"])
    p.add_argument("--format", default="free_think", help="the reply format of both models")
    p.add_argument("--pool", type=int, required=True, help="the run's env.train_states")
    p.add_argument("--seed", type=int, default=0, help="the run's trainer.seed")
    p.add_argument("--episodes", type=int, default=32, help="episodes per room")
    p.add_argument("--val-rooms", type=int, default=32, help="held-out validation rooms")
    p.add_argument(
        "--val-episodes",
        type=int,
        default=1,
        help="episodes per held-out room (> 1 also reports how many rooms sit at 0%%, "
        "strictly between, and at 100%%: the share RL can sharpen)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=0.5,
        help="sampling temperature (0.5: the evaluations'; 1.0: what RL rollouts explore with)",
    )
    p.add_argument("--out", default=None, help="write the result as JSON here")
    args = p.parse_args(argv)

    budget = BUDGETS["classic"].playing(args.format)
    rollout = ENV_SHAPE[args.env].rollout(budget, args.env)
    pool = EnvStateManager(
        args.env, env_groups=1, group_size=1, seed=args.seed, train_states=args.pool
    ).train_pool()
    val = EnvStateManager(args.env, env_groups=1, group_size=1, seed=args.seed).validation_seeds(
        args.val_rooms
    )
    models = {"warm start": args.warm, "after RL": str(final_actor(Path(args.rl)))}
    result: dict[str, dict] = {}
    for name, model in models.items():
        t = args.temperature
        rooms = per_room_success(model, args.env, pool, args.episodes, rollout, args.seed, t)
        held = per_room_success(model, args.env, val, args.val_episodes, rollout, args.seed, t)
        result[name] = {
            "pool rooms": {str(k): v for k, v in rooms.items()},
            "pool mean": sum(rooms.values()) / len(rooms),
            "validation mean": sum(held.values()) / len(held),
            "validation rooms at 0 / between / 1": room_spread(held.values()),
            # what sharpening every partly solved room to 100% would add
            "validation sharpening ceiling": sum(1 - p for p in held.values() if 0 < p < 1)
            / len(held),
        }
    print(f"{'room':>12} | warm start | after RL")
    for s in pool:
        w, r = (result[m]["pool rooms"][str(s)] for m in models)
        print(f"{s:>12} | {w:10.1%} | {r:8.1%}")
    keys = ["pool mean", "validation mean"]
    if args.val_episodes > 1:  # one episode per room says nothing about the spread
        keys.append("validation sharpening ceiling")
    for key in keys:
        print(f"{key:>12} | {result['warm start'][key]:10.1%} | {result['after RL'][key]:8.1%}")
    if args.val_episodes > 1:
        key = "validation rooms at 0 / between / 1"
        print(f"{key}: warm start {result['warm start'][key]}, after RL {result['after RL'][key]}")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), **result}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli(main))
