"""How does a FrozenLake policy lose? Its moves graded against the discounted oracle.

    .venv/bin/python -m experiments.lake_moves.run --episodes 512 --temperature 0.5 1.0 \\
        --model warm=runs/fl/frozen_lake/free_think/seed0/frozen_lake/sft \\
        --model rl=runs/fl/frozen_lake/free_think/seed0/frozen_lake/rl_outcome

Each ``--model LABEL=PATH`` (an HF folder, or a ``ragen train`` run folder: its newest
actor) plays ``--episodes`` held-out validation maps, one episode each, with the demo's
FrozenLake settings (one move per turn, the current grid only, up to 10 turns) in its
``--format``, at every ``--temperature``. Every executed move is graded on the map it
was made on, with the optimal discounted values ``V`` of the env's oracle
(``discounted_success``, gamma 0.9) and ``Q(s, a) = sum_s' P(s'|s,a) V(s')``:

* ``into_hole``: the intended cell is a hole (it falls in with probability p = 0.8);
* ``wall``: the intended move leaves the map (the agent stays, or slips sideways);
* ``oracle``: the oracle's move; ``near_tie``: another move within 0.02 of the best Q;
* ``other``: every other move (a detour, a risky neighbour of a hole, ...).

``regret`` is the mean of ``max_a Q(s, a) - Q(s, a_taken)`` per move: the discounted
success the move gives away. Episodes end in ``goal``, ``hole`` or ``turn_limit``.
The warm start and its RL run on the same maps and temperature make a paired
comparison: where RL changes the moves, and whether a gain at the training
temperature (1.0) survives at the evaluation's (0.5).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np

from experiments.common import play_heldout
from ragen.envs.games.frozen_lake import (
    ACTION_NAMES,
    discounted_success,
    move,
    oracle_policy,
    transition_kernel,
)

P, GAMMA = 0.8, 0.9  # the env's defaults: slip chance and the oracle's discount
NEAR_TIE = 0.02
GRID_TILES = {"_": "F", "O": "H", "G": "G", "P": "F", "X": "H", "√": "G"}
KINDS = ("oracle", "near_tie", "other", "wall", "into_hole")


def read_grid(observation: str) -> tuple[tuple[str, ...], int] | None:
    """``(desc, flat player cell)`` of a rendered FrozenLake grid (``P`` the player, ``_``
    ice, ``O`` hole, ``G`` goal), or None for anything else."""
    rows = observation.strip().split("\n")
    if not rows or any(not row or set(row) - set(GRID_TILES) for row in rows):
        return None
    flat = "".join(rows)
    if flat.count("P") != 1 or len({len(row) for row in rows}) != 1:
        return None
    desc = tuple("".join(GRID_TILES[ch] for ch in row) for row in rows)
    return desc, flat.index("P")


def grade_move(desc: tuple[str, ...], pos: int, action: int) -> tuple[str, float]:
    """``(kind, regret)`` of ``action`` from flat cell ``pos`` (see the module doc)."""
    T, _, _ = transition_kernel(desc, P)
    values = np.array(discounted_success(desc, P, gamma=GAMMA, oracle_gamma=GAMMA))
    q = T[:, pos] @ values  # (4,): the discounted success after each move
    regret = float(q.max() - q[action])
    target = move(desc, pos, action)
    if target == pos:
        kind = "wall"
    elif desc[target // len(desc[0])][target % len(desc[0])] == "H":
        kind = "into_hole"
    elif action == oracle_policy(desc, P, GAMMA)[pos]:
        kind = "oracle"
    elif regret <= NEAR_TIE:
        kind = "near_tie"
    else:
        kind = "other"
    return kind, regret


def grade_policy(model: str, episodes: int, temperature: float, fmt: str, seed: int) -> dict:
    """Play ``episodes`` held-out maps (:func:`~experiments.common.play_heldout`); the share of each kind of move, the mean regret,
    and how the episodes ended."""
    result = play_heldout(model, "frozen_lake", episodes, temperature, fmt, seed)
    episodes_by_id = collections.defaultdict(list)
    for sample in result.trajectories:
        episodes_by_id[sample.episode_id].append(sample)
    kinds: collections.Counter[str] = collections.Counter()
    ends: collections.Counter[str] = collections.Counter()
    regrets = []
    for samples in episodes_by_id.values():
        turns = max(samples, key=lambda s: len(s.turns)).turns  # the episode's every turn
        for turn in turns:
            state = read_grid(turn.observation)
            if state is None or not turn.executed_actions:
                continue
            kind, regret = grade_move(*state, ACTION_NAMES.index(turn.executed_actions[0]))
            kinds[kind] += 1
            regrets.append(regret)
        if samples[0].success:
            ends["goal"] += 1
        elif samples[0].end_reason == "terminated":
            ends["hole"] += 1
        else:
            ends["turn_limit"] += 1
    moves = max(1, sum(kinds.values()))
    return {
        "success": float(result.metrics["success_rate"]),
        "moves": sum(kinds.values()),
        **{k: kinds[k] / moves for k in KINDS},
        "regret": float(np.mean(regrets)) if regrets else 0.0,
        **{f"end_{k}": ends[k] / len(episodes_by_id) for k in ("goal", "hole", "turn_limit")},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True, help="LABEL=PATH")
    p.add_argument("--episodes", type=int, default=512)
    p.add_argument("--temperature", type=float, nargs="+", default=[0.5])
    p.add_argument("--format", default="free_think", help="the models' reply format")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = []
    header = "| model | T | success | " + " | ".join(KINDS) + " | regret | ends hole / limit |"
    print(header + "\n" + "|---" * (header.count("|") - 1) + "|", flush=True)
    for spec in args.model:
        label, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"--model {spec!r}: expected LABEL=PATH")
        for temperature in args.temperature:
            row = grade_policy(path, args.episodes, temperature, args.format, args.seed)
            rows.append({"model": label, "path": path, "temperature": temperature, **row})
            shares = " | ".join(f"{100 * row[k]:.1f}%" for k in KINDS)
            print(
                f"| {label} | {temperature} | {100 * row['success']:.1f}% | {shares} | "
                f"{row['regret']:.3f} | {100 * row['end_hole']:.1f}% / "
                f"{100 * row['end_turn_limit']:.1f}% |",
                flush=True,
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
