"""Environment speed: Sokoban room generation and solving, env resets and steps.

Run (single core, as the rollouts use it):

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_envs           # full
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_envs --quick   # ~10x fewer samples

Prints three small tables: generator rooms/s (plus the optimal-solution-length
profile of the rooms), BFS solver time per room, and reset/step throughput per
registered environment under a uniformly random policy. Times are process CPU time
(``time.process_time``), so other load on a shared machine distorts them less than
wall-clock time would.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import ragen.envs as envs
from ragen.envs.games.sokoban import generate_room, solve_room
from ragen.errors import EnvConfigError


def bench_generation(n: int) -> None:
    print(f"Sokoban room generation and optimal solving ({n} rooms each)")
    print(
        f"{'config':<12} {'rooms/s':>9} {'solve ms mean':>14} {'p50':>6} {'max':>7} "
        f"{'opt len mean':>13} {'<=10 moves':>11}"
    )
    for dim, boxes in (((6, 6), 1), ((8, 8), 2)):
        t0 = time.process_time()
        rooms = [generate_room(random.Random(seed), dim, boxes) for seed in range(n)]
        gen_s = time.process_time() - t0
        times, lengths = [], []
        for room in rooms:
            t0 = time.process_time()
            plan = solve_room(room)
            times.append(1000 * (time.process_time() - t0))
            assert plan is not None, "generated rooms are always solvable"
            lengths.append(len(plan))
        label = f"{dim[0]}x{dim[1]}/{boxes}"
        print(
            f"{label:<12} {n / gen_s:>9.0f} {statistics.mean(times):>14.3f} "
            f"{statistics.median(times):>6.3f} {max(times):>7.2f} {statistics.mean(lengths):>13.2f} "
            f"{sum(k <= 10 for k in lengths) / n:>10.0%}"
        )


def bench_steps(steps: int) -> None:

    print(f"\nEnv throughput, random policy ({steps} steps each; resets when done)")
    print(
        f"{'env':<16} {'resets/s':>9} {'steps/s':>9}  (steps/s includes drawing the action "
        "and the resets)"
    )
    for name in envs.names():
        try:
            env = envs.make(name)
        except ImportError:
            print(f"{name:<16} {'(skipped: optional dependency missing)':>20}")
            continue
        except EnvConfigError:  # remote, openenv: a server's address, not a local env
            print(f"{name:<16} (skipped: needs settings, e.g. a server's url)")
            continue
        rng = random.Random(0)
        n_resets = 200
        env.reset(0)  # warm-up (first-call costs)
        t0 = time.process_time()
        for seed in range(n_resets):
            env.reset(seed)
        reset_s = time.process_time() - t0
        env.reset(0)
        seed = 0
        t0 = time.process_time()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(env.random_action(rng))
            if terminated or truncated:
                seed += 1
                env.reset(seed)
        step_s = time.process_time() - t0
        print(f"{name:<16} {n_resets / reset_s:>9.0f} {steps / step_s:>9.0f}")
        env.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 10x fewer samples")
    args = parser.parse_args(argv)
    bench_generation(300 if args.quick else 3000)
    bench_steps(2000 if args.quick else 20000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
