"""Oracle and random success rates of every reasoning-gym task through the ragen env.

Run:

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_reasoning_gym            # 50 seeds
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_reasoning_gym --seeds 10 --tasks gcd lcm

For each task (``ragen.envs.adapters.reasoning_gym_env.task_names()``) with its default
settings, the oracle (the generator's own answer) and the random policy (the answer of
another question of the same task) answer the questions of seeds ``0..N-1``; the table
gives each policy's success rate (score >= 1) and mean score, and marks tasks that
cannot be built offline or that raise. The oracle's rate is below 100% where a task's
stored answer is not the only accepted one (its verifier checks a property instead) or
where the task has no answer at all.
"""

from __future__ import annotations

import argparse
import random
import time


def measure(task: str, seeds: int) -> dict[str, float] | str:
    from ragen.envs.adapters.reasoning_gym_env import ReasoningGymEnv

    try:
        env = ReasoningGymEnv(task=task)
    except Exception as err:  # noqa: BLE001 - report the task as unavailable
        return f"unavailable: {type(err).__name__}: {str(err)[:60]}"
    row: dict[str, float] = {}
    t0 = time.perf_counter()
    for policy in ("oracle", "random"):
        wins, scores = 0, 0.0
        for seed in range(seeds):
            env.reset(seed)
            if policy == "oracle":
                action = env.oracle_action()
            else:
                action = env.random_action(random.Random(seed))
            if action is None:
                continue
            _, reward, _, _, info = env.step(action)
            wins += bool(info["success"])
            scores += reward
        row[f"{policy}_success"] = wins / seeds
        row[f"{policy}_score"] = scores / seeds
    row["seconds"] = time.perf_counter() - t0
    return row


def main(argv: list[str] | None = None) -> None:
    from ragen.envs.adapters.reasoning_gym_env import task_names

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=50, help="questions per task and policy")
    parser.add_argument("--tasks", nargs="*", default=None, help="tasks (default: all)")
    args = parser.parse_args(argv)
    tasks = args.tasks or task_names()
    print(f"reasoning-gym via ragen: success rate (mean score) over {args.seeds} seeds")
    print(f"{'task':<28} {'oracle':>14} {'random':>14} {'s':>6}")
    for task in tasks:
        row = measure(task, args.seeds)
        if isinstance(row, str):
            print(f"{task:<28} {row}")
            continue
        oracle = f"{row['oracle_success']:.0%} ({row['oracle_score']:.2f})"
        rand = f"{row['random_success']:.0%} ({row['random_score']:.2f})"
        print(f"{task:<28} {oracle:>14} {rand:>14} {row['seconds']:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
