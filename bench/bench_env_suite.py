"""The procedural puzzles, the TextArena games and served envs: oracle vs random, speed.

Run (single core):

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_env_suite           # full (~2 min)
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_env_suite --quick   # ~5x fewer episodes

Prints three tables:

1. **Env level**: :func:`ragen.envs.cli.solver_summary` (the oracle and a uniformly random
   policy, one action per step, up to 1,000 steps, seeds 0..n-1) with the oracle's CPU
   time per move. This is what the env offers with an unlimited episode.
2. **Agent loop**: ``ragen eval --model oracle|random`` on the validation seeds, with the
   rollout budgets of :data:`BUDGETS` (those of ``ragen/configs/env/*.yaml`` where there is
   one; enough actions for the oracle's solution elsewhere); the agent-side view.
3. **Served envs**: the same oracle eval on ``cube2x2`` locally and through ``ragen
   serve-env`` in another process (same results, the HTTP cost per episode), and one
   turn of 16 episodes on a served env whose steps take 50 ms, stepped concurrently vs
   one after another.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ENVS = [
    "sudoku",
    "sudoku_9x9",
    "game_2048_small",
    "game_2048",
    "cube2x2",
    "cube2x2_hard",
    "ta_tower_of_hanoi",
    "ta_guess_the_number",
    "ta_mastermind",
]
# rollout budgets for the agent-loop table: (max_turns, actions per turn, per trajectory)
BUDGETS = {
    "sudoku": (5, 2, 10),
    "sudoku_9x9": (10, 5, 50),
    "game_2048_small": (10, 5, 50),
    "game_2048": (30, 5, 150),
    "cube2x2": (5, 3, 10),
    "cube2x2_hard": (5, 3, 15),
    "ta_tower_of_hanoi": (8, 1, 8),
    "ta_guess_the_number": (5, 1, 5),
    "ta_mastermind": (8, 1, 8),
}


def bench_env_level(episodes: int) -> None:
    from ragen.envs import make
    from ragen.envs.cli import solver_summary

    print(f"1. Env level: oracle vs random ({episodes} episodes each, <= 1000 steps)")
    header = (
        f"{'env':<20} {'oracle succ':>11} {'steps':>7} {'ms/move':>8}   "
        f"{'random succ':>11} {'steps':>7}"
    )
    print(header)
    print("-" * len(header))
    for name in ENVS:
        t0 = time.process_time()
        rows = solver_summary([name], episodes=episodes, max_steps=1000)
        if not rows:
            print(f"{name:<20} (skipped: optional dependency missing)")
            continue
        (row,) = rows
        # the oracle's own time per move, measured apart from the random episodes
        env = make(name)
        moves, t0 = 0, time.process_time()
        for seed in range(min(episodes, 20)):
            env.reset(seed)
            while not env.done and moves < 100_000:
                action = env.oracle_action()
                if action is None:
                    break
                env.step(action)
                moves += 1
        ms = 1000 * (time.process_time() - t0) / max(moves, 1)
        print(
            f"{name:<20} {row['oracle_success']:>11.0%} {row['oracle_steps']:>7.1f} {ms:>8.2f}   "
            f"{row['random_success']:>11.0%} {row['random_steps']:>7.1f}"
        )


REPEATS = {"cube2x2": 2, "game_2048": 2, "game_2048_small": 4}


def bench_agent_loop(n: int) -> None:
    from ragen.agent.evaluate import evaluate
    from ragen.agent.rollout import RolloutConfig

    print(f"\n2. Agent loop: ragen eval on {n} validation episodes, the env's rollout budget")
    header = f"{'env':<20} {'turns x acts (max)':>18} {'oracle succ':>11} {'random succ':>11}"
    print(header)
    print("-" * len(header))
    for name in ENVS:
        turns, per_turn, per_traj = BUDGETS.get(name, (5, 5, 10))
        config = RolloutConfig(
            max_turns=turns, max_actions_per_turn=per_turn, max_actions_per_trajectory=per_traj
        )
        # envs with few distinct initial states play each validation state several times
        # (the validation list holds each state once: cube2x2 has 37, game_2048 60,
        # game_2048_small 19)
        group = REPEATS.get(name, 1)
        try:
            results = [
                evaluate(
                    policy,
                    name,
                    n=n,
                    group_size=group,
                    max_turns=turns,
                    config=config,
                    actions_per_turn=k,
                )  # fmt: skip
                for policy, k in (("oracle", per_turn), ("random", per_turn))
            ]
        except ImportError:
            print(f"{name:<20} (skipped: optional dependency missing)")
            continue
        budget = f"{turns} x {per_turn} ({per_traj})"
        print(
            f"{name:<20} {budget:>18} {results[0]['success_rate']:>11.0%} "
            f"{results[1]['success_rate']:>11.0%}"
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(*args: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "ragen.cli", "serve-env", *args, "--port", str(port), "--quiet"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as reply:
                if json.loads(reply.read())["ok"]:
                    return process, url
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the env server did not start")


def bench_served(n: int) -> None:
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.evaluate import evaluate
    from ragen.agent.policies import OraclePolicy
    from ragen.agent.rollout import RolloutConfig, run_rollout
    from ragen.envs.serving.http_server import EnvServer

    print("\n3. Served envs (wall clock; the server is another process)")
    process, url = _serve("cube2x2")
    try:
        rows = []
        for label, env, env_config in (
            ("local", "cube2x2", {}),
            ("served", "remote", {"url": url}),
        ):
            t0 = time.perf_counter()
            m = evaluate(
                "oracle", env, n=n, group_size=REPEATS["cube2x2"], env_config=env_config,
                max_turns=5,
            )  # fmt: skip
            rows.append((label, m["success_rate"], m["mean_actions"], time.perf_counter() - t0))
    finally:
        process.kill()
        process.wait()
    for label, success, actions, wall in rows:
        print(
            f"cube2x2 oracle eval, {label:<7} n={n}: success {success:.0%}, "
            f"{actions:.2f} actions/episode, {wall:.2f}s ({1000 * wall / n:.1f} ms/episode)"
        )

    # concurrency: 16 episodes, one step of 50 ms each (an env that waits on something)
    from ragen.envs import names, register

    if "bench_sleepy_cube" not in names():
        register("bench_sleepy_cube", f"{__name__}:SleepyCube", "cube2x2 with 50 ms steps")
    config = RolloutConfig(max_turns=1, max_actions_per_turn=1, max_actions_per_trajectory=1)
    with EnvServer("bench_sleepy_cube") as server:
        manager = EnvStateManager("remote", {"url": server.url}, env_groups=8, group_size=2)
        timings = {}
        for mode in ("concurrent", "one by one"):
            for env in manager.envs:
                type(env).concurrent_steps = mode == "concurrent"
            t0 = time.perf_counter()
            run_rollout(OraclePolicy(), manager, config, list(range(8)))
            timings[mode] = time.perf_counter() - t0
        type(manager.envs[0]).concurrent_steps = True
        manager.close()
    print(
        "one turn of 16 served episodes with 50 ms steps: "
        + ", ".join(f"{k} {v:.2f}s" for k, v in timings.items())
    )


def _sleepy_cube():
    from ragen.envs.games.cube2x2 import Cube2x2Env

    class SleepyCube(Cube2x2Env):
        description = "cube2x2 whose steps take 50 ms"

        def _step(self, action):
            time.sleep(0.05)
            return super()._step(action)

    return SleepyCube


SleepyCube = _sleepy_cube()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 5x fewer episodes")
    args = parser.parse_args(argv)
    bench_env_level(20 if args.quick else 100)
    bench_agent_loop(16 if args.quick else 64)
    bench_served(16 if args.quick else 64)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
