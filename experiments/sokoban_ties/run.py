"""How often does a Sokoban state have more than one optimal move? (Is the expert's tie-break a lever?)

    .venv/bin/python -m experiments.sokoban_ties.run --rooms 150

Plays ``--rooms`` rooms (seeds from 100,000) the way the SFT data does: the solver's
move, replaced by a random one with probability ``--epsilon``, up to ``--max-turns``
moves. At every visited state it counts the moves that keep an optimal plan: the move
solves the room, or the solver's plan from the next state is one move shorter than from
this one. A state with several optimal moves is one where the expert's tie-break
(:func:`ragen.envs.games.sokoban.solver.solve_path` explores up, down, left, right in order)
decides the label; if such states were common, a tie-break that is easier for a small
model to learn could make the SFT data easier, as the discounted oracle did on
FrozenLake (docs/RESULTS.md).
"""

from __future__ import annotations

import argparse
import collections
import copy
import random
from pathlib import Path

from experiments.common import cli, parse_study_args, write_results


def optimal_moves(env) -> list[str]:
    """The moves from ``env``'s state that keep an optimal plan (empty when unsolvable)."""
    from ragen.envs.games.sokoban.solver import solve_room

    plan = solve_room(env.room)
    if plan is None:
        return []
    moves = []
    for action in env.action_names:
        after = copy.deepcopy(env)
        after.step(action)
        if after.success:
            moves.append(action)
        elif not after.done:
            rest = solve_room(after.room)
            if rest is not None and len(rest) + 1 == len(plan):
                moves.append(action)
    return moves


def main(argv: list[str] | None = None) -> None:
    import ragen.envs as envs

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="sokoban")
    p.add_argument("--rooms", type=int, default=150)
    p.add_argument("--epsilon", type=float, default=0.1)
    p.add_argument("--max-turns", type=int, default=10)
    p.add_argument("--json", default=None, help="also write the counts here (with provenance)")
    args = parse_study_args(p, argv, __file__)

    env = envs.make(args.env)
    counts: collections.Counter = collections.Counter()
    for seed in range(100_000, 100_000 + args.rooms):
        env.reset(seed)
        rng = random.Random(seed)
        for _ in range(args.max_turns):
            if env.done:
                break
            moves = optimal_moves(env)
            if not moves:  # a deadlock after a random move: no expert label
                break
            counts[len(moves)] += 1
            explore = rng.random() < args.epsilon
            env.step(rng.choice(list(env.action_names)) if explore else env.oracle_action())
    total = sum(counts.values())
    print(f"{total} states visited in {args.rooms} rooms (epsilon {args.epsilon})")
    for k in sorted(counts):
        print(f"  {k} optimal move(s): {counts[k] / total:6.1%}")
    if args.json:
        payload = {"rooms": args.rooms, "epsilon": args.epsilon, "states": total,
                   "optimal_moves": {str(k): counts[k] for k in sorted(counts)}}  # fmt: skip
        command = f"python -m experiments.sokoban_ties.run --rooms {args.rooms}"
        write_results(Path(args.json), payload, command)


if __name__ == "__main__":
    raise SystemExit(cli(main))
