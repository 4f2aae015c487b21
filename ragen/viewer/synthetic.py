"""A synthetic training run folder, Sokoban-shaped, for the viewer's benchmark and tests.

:func:`synthesize` writes ``config.yaml``, ``metrics.jsonl`` (with two collapse events
and a ``reasoning/*`` metric) and ``trajectories/step_N.jsonl`` (plus ``val_step_N.jsonl``
every 10 steps) in the trainer's per-episode format (``ragen.trainer.trajectory_log``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ACTIONS = ["up", "down", "left", "right"]
WORDS = "near far wall corner open blocked free path plan first then again careful row col".split()
GRID = "######\n#O___#\n#____#\n##_X##\n#_P_##\n######"


def episode(rng: random.Random, step: int, group: int, member: int, group_size: int) -> dict:
    turns = []
    n = rng.randint(1, 5)
    for k in range(n):
        a = rng.choice(ACTIONS)
        said = a if rng.random() < 0.9 else rng.choice(ACTIONS)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))
        thought = (
            f"The box is {rng.choice(ACTIONS)} of me and the target is {words}. "
            f"I should push it, so the best next action is {said}."
        )
        turns.append(
            {
                "observation": GRID,
                "prompt": f"Turn {k + 1} of 5:\nState:\n{GRID}\nYou have {10 - k} actions left.",
                "response": f"<think>{thought}</think><answer>{a}</answer>",
                "thought": thought,
                "actions": [a],
                "executed_actions": [a],
                "env_reward": -0.1,
                "format_ok": True,
                "reward": -0.1,
                "done": k == n - 1,
                "info": {
                    "format_error": "",
                    "action_is_valid": [True],
                    "action_is_effective": [rng.random() < 0.6],
                    "reasoning_scores": {"consistency": float(said == a)},
                    "reasoning_reward": 0.0,
                },
            }
        )
    success = rng.random() < min(0.9, 0.1 + step / 250)
    kept = group % 4 == 0
    return {
        "env_name": "sokoban",
        "seed": 1000 * step + group,
        "group_id": group,
        "episode_id": group * group_size + member,
        "episode_reward": (10.0 if success else 0.0) - 0.1 * n,
        "success": success,
        "num_turns": n,
        "end_reason": "terminated" if success else "turn_limit",
        "turns": turns,
        "source": "model",
        "samples": 1,
        "kept": kept,
        "advantages": [round(rng.gauss(0, 1), 4) if kept else None for _ in range(n)],
    }


def synthesize(run: Path, steps: int, episodes: int, group_size: int = 16) -> None:
    rng = random.Random(0)
    (run / "trajectories").mkdir(parents=True)
    (run / "config.yaml").write_text("env:\n  name: sokoban\n  config: {}\n")
    with open(run / "metrics.jsonl", "w") as m:
        for step in range(1, steps + 1):
            row = {
                "step": step,
                "time": 0.0,
                "rollout/success_rate": min(0.9, 0.1 + step / 250),
                "rollout/reward_mean": rng.random(),
                "rollout/group_reward_std": 2 * rng.random(),
                "actor/entropy": 1 - step / (2 * steps),
                "actor/grad_norm_max": rng.random(),
                "rollout/response_length": 30.0,
                "reasoning/mutual_info": rng.random(),
            }
            if step % 10 == 0:
                row["val/success_rate"] = row["rollout/success_rate"]
            m.write(json.dumps(row) + "\n")
            if step in (steps // 2, steps - 1):
                event = {"step": step, "event": "collapse", "signal": "group_reward_std"}
                m.write(json.dumps({**event, "message": "synthetic", "action": "warn"}) + "\n")
            eps = [
                episode(rng, step, g, i, group_size)
                for g in range(episodes // group_size)
                for i in range(group_size)
            ]
            text = "".join(json.dumps(e) + "\n" for e in eps)
            (run / "trajectories" / f"step_{step:06d}.jsonl").write_text(text)
            if step % 10 == 0:
                val = "".join(json.dumps(e) + "\n" for e in eps[:32])
                (run / "trajectories" / f"val_step_{step:06d}.jsonl").write_text(val)
