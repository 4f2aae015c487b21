"""A synthetic training run folder, Sokoban-shaped, for the viewer's benchmark and tests.

:func:`synthesize` writes what ``ragen train`` writes, in its formats:

* ``config.yaml`` (env, rollout and the collapse thresholds);
* ``metrics.jsonl``: per step the curves, ``actor/lr``, the ``collapse/*`` diagnostics
  and the ``reasoning/*`` statistics, and the events of a collapse warning that rolled
  back (``collapse`` + ``rollback``, with the change and the rates read back) and of a
  later warning that only warned;
* ``trajectories/step_N.jsonl`` and, every 10 steps, ``val_step_N.jsonl`` (the same 32
  validation states each time, one episode each), in the trainer's per-episode format
  (``ragen.trainer.trajectory_log``);
* ``superseded/rollback1_step<W>/``: the abandoned branch's metrics and trajectories.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ACTIONS = ["up", "down", "left", "right"]
WORDS = "near far wall corner open blocked free path plan first then again careful row col".split()
GRID = "######\n#O___#\n#____#\n##_X##\n#_P_##\n######"
LR = 1e-3


def episode(
    rng: random.Random, step: int, group: int, member: int, group_size: int, seed: int = 0
) -> dict:
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
        if rng.random() < 0.04:  # a malformed reply: no answer, nothing runs
            # it rambles: "Lighthouse" is in no thought, answer or observation, only in
            # these raw replies (what a search of early-training replies must find)
            response = f"<think>{thought}</think> Lighthouse ahead, so {a}"
            turns.append(_malformed(k, n, response))
            continue
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
        "seed": seed or 1000 * step + group,
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


def _malformed(k: int, n: int, response: str) -> dict:
    return {
        "observation": GRID,
        "prompt": f"Turn {k + 1} of 5:\nState:\n{GRID}\nYou have {10 - k} actions left.",
        "response": response,
        "thought": "",
        "actions": [],
        "executed_actions": [],
        "env_reward": 0.0,
        "format_ok": False,
        "reward": -0.1,
        "done": k == n - 1,
        "info": {
            "format_error": "no <answer> block",
            "action_is_valid": [],
            "reasoning_scores": {},
        },
    }


def _row(rng: random.Random, step: int, steps: int, lr: float, branch: bool = False) -> dict:
    """One step's metrics; the abandoned branch's entropy falls (what the warning saw)."""
    entropy = 1 - step / (2 * steps) - (0.3 * rng.random() if branch else 0.0)
    mi_max = 1.3863  # log 4: 4 groups cross-scored
    return {
        "step": step,
        "time": 0.0,
        "rollout/success_rate": min(0.9, 0.1 + step / 250),
        "rollout/reward_mean": rng.random(),
        "rollout/group_reward_std": 2 * rng.random(),
        "rollout/format_error_rate": 0.05 * rng.random(),
        "actor/entropy": entropy,
        "actor/grad_norm_max": rng.random(),
        "actor/lr": lr,
        "rollout/response_length": 30.0,
        "reasoning/mutual_info": rng.random(),
        "reasoning/mutual_info_max": mi_max,
        "reasoning/retrieval_acc": 0.25 + 0.5 * rng.random(),
        "collapse/entropy": min(1.0, 0.6 + 0.4 * rng.random()) - (0.35 if branch else 0.0),
        "collapse/group_reward_std": 0.5 + 0.5 * rng.random(),
        "collapse/grad_norm": 0.5 + 2 * rng.random(),
        "collapse/format_errors": 0.05 * rng.random(),
        "collapse/warnings": 0.0,
    }


def _write_step(rng, folder: Path, step: int, episodes: int, group_size: int) -> None:
    eps = [
        episode(rng, step, g, i, group_size)
        for g in range(episodes // group_size)
        for i in range(group_size)
    ]
    text = "".join(json.dumps(e) + "\n" for e in eps)
    (folder / f"step_{step:06d}.jsonl").write_text(text)


def synthesize(run: Path, steps: int, episodes: int, group_size: int = 16) -> None:
    """Write the run folder (module docstring): ``steps`` steps of ``episodes`` episodes
    in groups of ``group_size``; the rollback leaves step ``steps // 2`` for the
    checkpoint 5 steps before it (when there are at least 8 steps)."""
    rng = random.Random(0)
    (run / "trajectories").mkdir(parents=True)
    (run / "config.yaml").write_text(
        "env:\n  name: sokoban\n  config: {}\nrollout:\n  reasoning: free_think\n"
        "  separator: '||'\ntrainer:\n  on_collapse: rollback\n  collapse:\n"
        "    signals: [group_reward_std, entropy, grad_norm, thought_diversity, format_errors]\n"
        "    entropy_ratio: 0.4\n    group_std_ratio: 0.55\n    grad_norm_spike: 5.0\n"
        "    format_error_rise: 0.2\n    window: 3\n"
    )
    warned = steps // 2 if steps >= 8 else None
    restored = warned - 5 if warned else None
    if warned:
        branch = run / "superseded" / f"rollback1_step{warned}"
        (branch / "trajectories").mkdir(parents=True)
        brng = random.Random(1)
        with open(branch / "metrics.jsonl", "w") as m:
            for step in range(restored + 1, warned + 1):
                m.write(json.dumps(_row(brng, step, steps, LR, branch=True)) + "\n")
        _write_step(brng, branch / "trajectories", warned, episodes, group_size)
    lr = LR
    val_seeds = [10_000 + g for g in range(32)]
    with open(run / "metrics.jsonl", "w") as m:
        if warned:
            change = {"model.actor_lr": [LR, LR / 2]}
            m.write(
                json.dumps(
                    {
                        "step": warned,
                        "event": "collapse",
                        "signal": "entropy",
                        "message": "actor/entropy fell to 0.31 (3-step mean), 38% of its "
                        "peak 0.82 (threshold 40%)",
                        "action": "rollback",
                        "value": 0.31,
                        "reference": 0.82,
                        "onset": restored,
                        "restored_step": restored,
                        "change": change,
                    }
                )
                + "\n"
            )
            rollback = {"step": restored, "event": "rollback", "from_step": warned}
            rollback.update(checkpoint=f"checkpoints/step_{restored:06d}", change=change)
            rollback.update(signals=["entropy"], lr={"actor": LR / 2})
            m.write(json.dumps(rollback) + "\n")
        for step in range(1, steps + 1):
            if warned and step > restored:
                lr = LR / 2
            row = _row(rng, step, steps, lr)
            if step % 10 == 0:
                row["val/success_rate"] = row["rollout/success_rate"]
            m.write(json.dumps(row) + "\n")
            if step == steps - 1:
                event = {"step": step, "event": "collapse", "signal": "group_reward_std"}
                event.update(value=0.2, reference=0.9, onset=step - 3, action="warn")
                m.write(json.dumps({**event, "message": "synthetic"}) + "\n")
            _write_step(rng, run / "trajectories", step, episodes, group_size)
            if step % 10 == 0:
                val = [episode(rng, step, g, 0, 1, seed=seed) for g, seed in enumerate(val_seeds)]
                text = "".join(json.dumps(e) + "\n" for e in val)
                (run / "trajectories" / f"val_step_{step:06d}.jsonl").write_text(text)
