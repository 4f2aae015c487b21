"""Oracle and random reference rates of the envs users bring: reasoning-gym presets,
TextWorld, two-player TextArena (win / draw / loss against each opponent).

Run:

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_worlds               # the docs' numbers
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_worlds --episodes 10  # quick
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_worlds --textworld-timing
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_worlds --openenv --episodes 50

Each policy plays seeds ``0..N-1`` (dynamics seed ``1000 + seed``): the oracle (the env's
solver) and the random reference policy (``env.random_action``), as ``ragen envs
--summary`` plays them. The two-player games report the agent's wins, draws and losses
(the side alternates with the seed) against the random and the scripted opponent.
TextWorld games are compiled into ``$XDG_CACHE_HOME/ragen/textworld`` on first use;
``--textworld-timing`` measures instead the wall time of a reset that generates,
compiles and checks a new game, and of one that starts a cached game. ``--openenv``
plays the same policies on ragen envs served over OpenEnv (``env=openenv``, a local
``ragen.envs.serving.openenv_server.OpenEnvServer``) beside the local envs, with the time each
took.
"""

from __future__ import annotations

import argparse
import random
import time

SINGLE = ["rg_arithmetic", "rg_arithmetic_retry", "rg_puzzles", "textworld", "textworld_hard"]
DUELS = ["ta_tictactoe", "ta_connect_four", "ta_nim"]


def play(env, policy: str, seed: int, max_steps: int = 200) -> tuple[dict, float, int]:
    """``(last info, return, steps)`` of one episode."""
    env.reset(seed, rng_seed=1000 + seed)
    rng = random.Random(seed)
    total, steps, info = 0.0, 0, {}
    while not env.done and steps < max_steps:
        action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
        if action is None:
            action = env.random_action(rng)
        _, reward, _, _, info = env.step(action)
        total += reward
        steps += 1
    return info, total, steps


def textworld_timing(games: int = 10) -> None:
    """Wall seconds per reset: new games (a fresh cache folder), then the same games
    again from the cache."""
    import tempfile

    from ragen.envs import make

    with tempfile.TemporaryDirectory() as cache:
        for name in ("textworld", "textworld_hard"):
            env = make(name, cache_dir=cache)
            env.reset(0)  # warm-up: imports, the first interpreter
            for label in ("new game", "cached game"):
                t0 = time.perf_counter()
                for seed in range(1, games + 1):
                    env.reset(seed)
                print(f"{name:<16} {label:<12} {(time.perf_counter() - t0) / games:.3f} s/reset")
            env.close()


def openenv_rates(n: int) -> None:
    """The oracle and random rates of envs served over OpenEnv and of the same envs
    played locally (the same seeds and dynamics seeds: the rates must agree)."""
    from ragen.envs import make
    from ragen.envs.serving.openenv_server import OpenEnvServer

    print(f"{'env':<22} {'via':<8} {'policy':<7} {'success':>8} {'return':>7} {'s':>6}")
    for name in ("sokoban", "frozen_lake"):
        with OpenEnvServer(name) as server:
            for via, env in (("openenv", make("openenv", url=server.url)), ("local", make(name))):
                for policy in ("oracle", "random"):
                    t0 = time.perf_counter()
                    runs = [play(env, policy, seed) for seed in range(n)]
                    success = sum(bool(info.get("success")) for info, _, _ in runs) / n
                    ret = sum(r for _, r, _ in runs) / n
                    print(
                        f"{name:<22} {via:<8} {policy:<7} {success:>8.0%} {ret:>7.2f}"
                        f" {time.perf_counter() - t0:>6.1f}",
                        flush=True,
                    )
                env.close()


def main(argv: list[str] | None = None) -> None:
    from ragen.envs import make

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=100, help="seeds per policy")
    parser.add_argument(
        "--textworld-timing", action="store_true", help="time TextWorld resets instead"
    )
    parser.add_argument(
        "--openenv", action="store_true", help="served over OpenEnv vs local, instead"
    )
    args = parser.parse_args(argv)
    if args.textworld_timing:
        textworld_timing()
        return
    if args.openenv:
        openenv_rates(args.episodes)
        return
    n = args.episodes
    print(f"{'env':<22} {'policy':<7} {'success':>8} {'return':>7} {'steps':>6}  ({n} seeds)")
    for name in SINGLE:
        env = make(name)
        for policy in ("oracle", "random"):
            t0 = time.perf_counter()
            runs = [play(env, policy, seed) for seed in range(n)]
            success = sum(bool(env_info.get("success")) for env_info, _, _ in runs) / n
            ret = sum(r for _, r, _ in runs) / n
            steps = sum(s for _, _, s in runs) / n
            print(
                f"{name:<22} {policy:<7} {success:>8.0%} {ret:>7.2f} {steps:>6.1f}"
                f"  {time.perf_counter() - t0:.0f}s",
                flush=True,
            )
        env.close()
    print(f"\n{'game':<18} {'opponent':<10} {'policy':<7} {'win':>5} {'draw':>5} {'loss':>5}")
    for name in DUELS:
        for opponent in ("random", "heuristic"):
            env = make(name, opponent=opponent)
            for policy in ("oracle", "random"):
                outcomes = [play(env, policy, seed)[0]["outcome"] for seed in range(n)]
                rates = [outcomes.count(k) / n for k in ("win", "draw", "loss")]
                print(
                    f"{name:<18} {opponent:<10} {policy:<7} "
                    + " ".join(f"{r:>5.0%}" for r in rates),
                    flush=True,
                )


if __name__ == "__main__":
    main()
