"""VAGEN on a CPU: the tiny VLM on visual Sokoban and FrozenLake, random / warm start /
after RL / oracle, TRICO against StarPO-S, and the cost of pictures.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.visual.run --seeds 0 --out runs/visual
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.visual.run --stage cost --out runs/visual
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.visual.run --stage families --out runs/visual
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.visual.run --config toy --out /tmp/bv  # smoke

Stage ``learn`` (per env and seed; every step is a ``ragen`` command in its own process):

1. ``ragen models create-tiny-vlm --seed S`` (LLaVA: CLIP encoder + nano Qwen2);
2. ``ragen eval --model random|oracle`` on held-out validation states;
3. ``ragen sft``: warm start on noisy expert episodes WITH their pictures, then eval;
4. from the warm start, the same budget of RL twice: ``algo=trico`` and
   ``algo=starpo-s`` (``ragen train``), each then evaluated.

Every run plays the same episode shape: up to 5 turns, one move per turn, the whole
history in the prompt (TRICO's turn rewards need it: at most 5 pictures), compact
prompts, ``free_think`` replies. Evaluation: ``--eval-n`` validation episodes at
temperature 0.5. Results go to ``<out>/<env>/seed<S>/results.json`` and the table to
``<out>/visual.md``.

Stage ``cost``: the same ``algo=trico`` training steps on a text env with the nano LM and
on its visual twin with the tiny VLM (same LM, same budgets): mean seconds per step
(after the first) and the peak resident memory of the training process
(``ru_maxrss`` of that child alone, via ``os.wait4``).

Stage ``families``: the same ``algo=trico`` steps on ``sokoban_visual`` with the tiny VLM
in each architecture family (``create-tiny-vlm --architecture llava | idefics3 |
qwen2_vl | qwen2_5_vl``: the same nano LM, a 2-layer vision encoder of the family), one
run after another: CPU seconds of the training process, mean seconds per step, peak
RSS, image ids per picture, and the largest generation-vs-trainer log-prob gap
(M-RoPE positions for the Qwen2-VL family). Table in ``<out>/families/families.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from experiments.common import cli, fmt_stats, parse_study_args

ENVS = ("sokoban_visual", "frozen_lake_visual")
LAST_CPU_SECONDS = 0.0  # of the last _ragen child (wall time is noisy on a shared machine)
ALGOS = ("trico", "starpo-s")


@dataclass(frozen=True)
class Budget:
    max_turns: int = 5
    new_tokens: int = 40
    sft_episodes: int = 1024
    sft_epochs: int = 4  # 128 optimizer steps of 32 episodes
    sft_epsilon: float = 0.1
    sft_lr: float = 3e-3
    sft_batch: int = 32
    rl_steps: int = 20
    env_groups: int = 8
    group_size: int = 4
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    eval_n: int = 64
    cost_steps: int = 4
    extra: list[str] = field(default_factory=list)


BUDGETS = {
    "full": Budget(),
    "toy": Budget(
        sft_episodes=8,
        sft_epochs=1,
        rl_steps=2,
        env_groups=2,
        group_size=2,
        eval_n=2,
        new_tokens=12,
        cost_steps=2,
    ),
}


def _ragen(args: list[str], log: Path) -> tuple[float, int]:
    """Run ``python -m ragen.cli ARGS`` (output to ``log``); (wall s, peak RSS MiB).
    The child's CPU seconds (user + system) are in :data:`LAST_CPU_SECONDS`."""
    global LAST_CPU_SECONDS
    tic = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"$ ragen {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragen.cli", *args], stdout=out, stderr=subprocess.STDOUT
        )
        _, status, usage = os.wait4(proc.pid, 0)
    LAST_CPU_SECONDS = usage.ru_utime + usage.ru_stime
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"ragen {' '.join(args)} failed; see {log}")
    return time.perf_counter() - tic, int(usage.ru_maxrss // 1024)


def _rollout_flags(b: Budget) -> list[str]:
    return [
        "--max-turns", str(b.max_turns), "--max-actions-per-turn", "1",
        "--max-actions-per-trajectory", str(b.max_turns), "--reasoning", "free_think",
        "--prompt-style", "compact",
    ]  # fmt: skip


def _train_overrides(b: Budget, env: str, algo: str, model: str, run: Path, seed: int, steps: int):
    kept = b.env_groups * b.group_size
    if algo == "starpo-s":  # keeps the top half of the groups by reward std
        kept = max(1, b.env_groups // 2) * b.group_size
    return [
        f"env={env}", f"algo={algo}", f"model.path={model}",
        f"model.actor_lr={b.actor_lr}", f"model.critic_lr={b.critic_lr}",
        f"rollout.env_groups={b.env_groups}", f"rollout.group_size={b.group_size}",
        f"rollout.max_turns={b.max_turns}", "rollout.max_actions_per_turn=1",
        f"rollout.max_actions_per_trajectory={b.max_turns}",
        f"rollout.max_new_tokens={b.new_tokens}", "rollout.max_model_len=2048",
        "rollout.prompt_style=compact", "rollout.reasoning=free_think",
        f"algo.ppo_mini_batch_size={kept}", f"trainer.total_steps={steps}",
        "trainer.val_every=0", f"trainer.save_every={steps}", "trainer.console=false",
        "trainer.tensorboard=false", "trainer.reasoning_samples=0",
        f"trainer.seed={seed}", f"trainer.run_dir={run}",
        *(["algo.filter.value=0.5"] if algo == "starpo-s" else []), *b.extra,
    ]  # fmt: skip


def _eval(b: Budget, model: str, env: str, out: Path, log: Path) -> float:
    if not (out / "metrics.json").exists():
        args = ["eval", "--model", model, "--env", env, "--n", str(b.eval_n)]
        args += ["--max-new-tokens", str(b.new_tokens), "--temperature", "0.5", "--out", str(out)]
        _ragen(args + _rollout_flags(b), log)
    return float(json.loads((out / "metrics.json").read_text())["metrics"]["success_rate"])


def learn(b: Budget, env: str, seed: int, root: Path) -> dict:
    folder = root / env / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "log.txt"
    results_file = folder / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}

    def save() -> None:
        results_file.write_text(json.dumps(results, indent=2) + "\n")

    base = folder / "tiny_vlm"
    if not (base / "config.json").exists():
        _ragen(["models", "create-tiny-vlm", "--out", str(base), "--seed", str(seed)], log)
    for ref in ("random", "oracle"):
        results[ref] = _eval(b, ref, env, folder / f"eval_{ref}", log)
    sft = folder / "sft"
    if not (sft / "config.json").exists():
        wall, rss = _ragen(
            ["sft", "--model", str(base), "--env", env, "--out", str(sft),
             "--episodes", str(b.sft_episodes), "--epochs", str(b.sft_epochs),
             "--epsilon", str(b.sft_epsilon), "--lr", str(b.sft_lr),
             "--batch-size", str(b.sft_batch), "--seed", str(seed), *_rollout_flags(b)],
            log,
        )  # fmt: skip
        results["sft_seconds"], results["sft_peak_rss_mib"] = wall, rss
    results["warm start"] = _eval(b, str(sft), env, folder / "eval_sft", log)
    save()
    for algo in ALGOS:
        run = folder / f"rl_{algo}"
        ckpt = run / "checkpoints" / f"step_{b.rl_steps:06d}"
        if not ckpt.exists():
            wall, rss = _ragen(
                ["train", *_train_overrides(b, env, algo, str(sft), run, seed, b.rl_steps)], log
            )
            results[f"{algo}_seconds"], results[f"{algo}_peak_rss_mib"] = wall, rss
        results[f"after {algo}"] = _eval(b, str(ckpt), env, folder / f"eval_{algo}", log)
        save()
    return results


def cost(b: Budget, root: Path) -> list[dict]:
    """Seconds per TRICO step and peak RSS: text env + nano LM vs visual env + tiny VLM."""
    folder = root / "cost"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "log.txt"
    vlm = folder / "tiny_vlm"
    if not (vlm / "config.json").exists():
        _ragen(["models", "create-tiny-vlm", "--out", str(vlm)], log)
    rows = []
    for env, model in (
        ("sokoban", "tiny:nano"),
        ("sokoban_visual", str(vlm)),
        ("frozen_lake", "tiny:nano"),
        ("frozen_lake_visual", str(vlm)),
    ):
        run = folder / env
        if run.exists():
            import shutil

            shutil.rmtree(run)
        overrides = _train_overrides(b, env, "trico", model, run, 0, b.cost_steps)
        wall, rss = _ragen(["train", *overrides], log)
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        steps = [m["timing/step"] for m in lines[1:]] or [lines[0]["timing/step"]]
        rows.append(
            {
                "env": env,
                "model": "tiny VLM (LLaVA, nano LM)" if "visual" in env else "tiny:nano",
                "seconds_per_step": statistics.mean(steps),
                "rollout_s": statistics.mean(m["timing/rollout"] for m in lines[1:] or lines),
                "update_s": statistics.mean(m["timing/update"] for m in lines[1:] or lines),
                "peak_rss_mib": rss,
                "wall_s": wall,
                "cpu_s": LAST_CPU_SECONDS,  # the whole run: load + cost_steps steps + save
            }
        )
    (folder / "cost.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows


FAMILIES = ("llava", "idefics3", "qwen2_vl", "qwen2_5_vl")


def families(b: Budget, root: Path, env: str = "sokoban_visual") -> list[dict]:
    """TRICO steps on ``env`` with the tiny VLM of each family (see the module docstring)."""
    import shutil

    folder = root / "families"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "log.txt"
    rows = []
    for family in FAMILIES:
        vlm = folder / f"tiny_{family}"
        if not (vlm / "config.json").exists():
            _ragen(["models", "create-tiny-vlm", "--out", str(vlm), "--architecture", family], log)
        info = json.loads((vlm / "ragen_tiny_vlm.json").read_text())
        run = folder / f"run_{family}"
        if run.exists():
            shutil.rmtree(run)
        overrides = _train_overrides(b, env, "trico", str(vlm), run, 0, b.cost_steps)
        wall, rss = _ragen(["train", *overrides], log)
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        later = lines[1:] or lines
        rows.append(
            {
                "family": family,
                "parameters": info["num_parameters"],
                "image_ids_per_picture": info["image_tokens_per_image"],
                "seconds_per_step": statistics.mean(m["timing/step"] for m in later),
                "cpu_s": LAST_CPU_SECONDS,  # the whole run: load + cost_steps steps + save
                "peak_rss_mib": rss,
                "wall_s": wall,
                "gen_logprob_max_diff": max(m["actor/gen_logprob_max_diff"] for m in lines),
                "context_inexact": max(m["rollout/context_inexact"] for m in lines),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    (folder / "families.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows


def table(per: dict[str, dict[int, dict]]) -> str:
    cols = ["random", "warm start", "after trico", "after starpo-s", "oracle"]
    lines = ["| env | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for env, seeds in per.items():
        cells = [fmt_stats([r[c] for r in seeds.values() if c in r]) for c in cols]
        lines.append(f"| {env} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--envs", nargs="+", default=list(ENVS))
    p.add_argument("--stage", choices=["learn", "cost", "families", "all"], default="learn")
    p.add_argument("--out", default="runs/visual")
    p.add_argument("--rl-steps", type=int, help="override the budget's RL steps")
    p.add_argument("--env-groups", type=int, help="override the budget's groups per RL step")
    p.add_argument("--group-size", type=int, help="override the budget's rollouts per group")
    p.add_argument("--sft-episodes", type=int, help="override the budget's SFT episodes")
    p.add_argument("--sft-epochs", type=int, help="override the budget's SFT epochs")
    p.add_argument("--extra", nargs="*", default=[], help="more `ragen train` overrides")
    args = parse_study_args(p, argv, __file__, budgets=BUDGETS)
    b, root = args.budget, Path(args.out)
    changes = {
        k: getattr(args, k)
        for k in ("rl_steps", "env_groups", "group_size", "sft_episodes", "sft_epochs")
        if getattr(args, k)
    }
    b = dataclasses.replace(b, **changes, extra=[*b.extra, *args.extra])
    root.mkdir(parents=True, exist_ok=True)
    if args.stage in ("learn", "all"):
        per = {env: {s: learn(b, env, s, root) for s in args.seeds} for env in args.envs}
        text = f"config {args.config}, seeds {args.seeds}\n\n{table(per)}\n"
        (root / "visual.md").write_text(text)
        print(text)
        for env, seeds in per.items():
            for s, r in seeds.items():
                print(env, s, json.dumps(r))
    if args.stage in ("cost", "all"):
        for row in cost(b, root):
            print(json.dumps(row))
    if args.stage == "families":
        families(b, root)


if __name__ == "__main__":
    raise SystemExit(cli(main))
