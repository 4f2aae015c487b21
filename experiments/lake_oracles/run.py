"""Which FrozenLake expert suits a turn budget? Oracles compared on random slippery maps.

    .venv/bin/python -m experiments.lake_oracles.run --maps 10000 --horizon 10

On ``--maps`` random 4x4 maps (the env's generator, held-out map seeds from 10,000), each
policy plays one episode per map and noise level at ``p = 0.8``, ``--horizon`` steps at
most, and the script prints its success rate (clean, and with ``epsilon`` = 0.1 of its
moves replaced by random ones, as in the SFT data) and how often, over the maps'
non-terminal cells, its move is the same as the other policies':

* ``ever`` (``oracle_gamma=1``): maximizes the chance of *ever* reaching the goal;
* ``discounted`` (``oracle_gamma=0.9``, the env's default oracle): maximizes
  ``E[0.9^T 1(goal at step T)]``;
* ``finite``: maximizes the chance of arriving within the steps left (the true optimum
  of a ``--horizon``-step episode; it depends on the step count, which the prompt shows
  only as the turn number);
* ``shortest``: the first move of a shortest hole-free path, ignoring slips;
* ``random``.
"""

from __future__ import annotations

import argparse
import collections
import random
from pathlib import Path

import numpy as np

from experiments.common import cli, parse_study_args, write_results
from ragen.envs.base import derive_seed
from ragen.envs.games.frozen_lake import (
    ACTION_NAMES,
    FrozenLakeEnv,
    generate_map,
    move,
    oracle_policy,
    transition_kernel,
)

P = 0.8


def finite_horizon(desc: tuple[str, ...], horizon: int) -> list[np.ndarray]:
    """``policies[k]``: the move maximizing the chance of arriving within ``k + 1`` steps."""
    T, terminal, goal = transition_kernel(desc, P)
    values, policies = goal.copy(), []
    for _ in range(horizon):
        q = T @ values
        policies.append(q.argmax(axis=0))
        values = np.where(terminal, goal, q.max(axis=0))
    return policies


def shortest_path(desc: tuple[str, ...]) -> list[int]:
    """Per cell, the first move of a shortest hole-free path to the goal (BFS, no slips)."""
    flat = "".join(desc)
    goal = flat.index("G")
    dist = {goal: 0}
    queue = collections.deque([goal])
    while queue:  # moves are reversible, so BFS from the goal gives distances to it
        u = queue.popleft()
        for a in range(4):
            v = move(desc, u, a)
            if v != u and v not in dist and flat[v] != "H":
                dist[v] = dist[u] + 1
                queue.append(v)
    policy = []
    for s in range(len(flat)):
        options = [
            (dist[nxt], a)
            for a in range(4)
            if (nxt := move(desc, s, a)) != s and nxt in dist and flat[nxt] != "H"
        ]
        policy.append(min(options)[1] if options else 0)
    return policy


def play(env: FrozenLakeEnv, act, rng: random.Random, epsilon: float) -> bool:
    """One episode of ``env`` (its map loaded, ``max_steps`` the horizon; the env's own
    slippery dynamics); ``act(cell, t)`` is the policy's move at flat ``cell``, step ``t``."""
    env.reset(0, rng_seed=rng.randrange(2**31))
    t = 0
    while not env.done:
        row, col = env.position
        a = rng.randrange(4) if epsilon and rng.random() < epsilon else act(row * env.cols + col, t)
        env.step(ACTION_NAMES[a])
        t += 1
    return env.success


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--maps", type=int, default=2000)
    p.add_argument("--horizon", type=int, default=10)
    p.add_argument("--json", default=None, help="also write the rates here (with provenance)")
    args = parse_study_args(p, argv, __file__)

    rng = random.Random(0)
    wins: dict[str, list[bool]] = collections.defaultdict(list)
    agree: dict[str, list[bool]] = collections.defaultdict(list)
    for seed in range(10_000, 10_000 + args.maps):
        desc = generate_map(random.Random(derive_seed("frozen-lake-map", seed)), 4, 0.2)
        ever, disc = oracle_policy(desc, P, 1.0), oracle_policy(desc, P, 0.9)
        finite, short = finite_horizon(desc, args.horizon), shortest_path(desc)
        # each policy's move at (cell s, step t), bound to this map's tables
        policies = {
            "ever": lambda s, t, pi=ever: pi[s],
            "discounted": lambda s, t, pi=disc: pi[s],
            "finite": lambda s, t, pis=finite: pis[args.horizon - 1 - t][s],
            "shortest": lambda s, t, pi=short: pi[s],
            "random": lambda s, t: rng.randrange(4),
        }
        env = FrozenLakeEnv(desc=desc, p=P, max_steps=args.horizon)
        for name, act in policies.items():
            for eps in (0.0, 0.1):
                wins[f"{name} eps={eps}"].append(play(env, act, rng, eps))
        flat = "".join(desc)
        for s, ch in enumerate(flat):
            if ch not in "HG":
                agree["ever = discounted"].append(ever[s] == disc[s])
                agree["ever = shortest"].append(ever[s] == short[s])
                agree["discounted = shortest"].append(disc[s] == short[s])
                agree[f"discounted = finite (all {args.horizon} left)"].append(
                    disc[s] == finite[-1][s]
                )
    print(f"success within {args.horizon} steps, {args.maps} maps, p = {P}")
    for name, xs in wins.items():
        print(f"  {name:<22} {100 * np.mean(xs):5.1f}%")
    print("same move, over non-terminal cells")
    for name, xs in agree.items():
        print(f"  {name:<34} {100 * np.mean(xs):5.1f}%")
    if args.json:
        payload = {
            "maps": args.maps,
            "horizon": args.horizon,
            "p": P,
            "success": {name: float(np.mean(xs)) for name, xs in wins.items()},
            "same_move": {name: float(np.mean(xs)) for name, xs in agree.items()},
        }
        command = (
            f"python -m experiments.lake_oracles.run --maps {args.maps} --horizon {args.horizon}"
        )
        write_results(Path(args.json), payload, command)


if __name__ == "__main__":
    raise SystemExit(cli(main))
