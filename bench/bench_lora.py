"""LoRA vs full fine-tuning in RL: peak memory and step time.

    .venv/bin/python -m bench.bench_lora                                  # tiny:small on bandit
    .venv/bin/python -m bench.bench_lora --model ~/.cache/ragen/models/SmolLM2-135M-Instruct.Q4_1.gguf

Each configuration runs in its own subprocess (so peak resident memory is its own):
``--steps`` StarPO steps (KL on, so LoRA's reference policy is the adapter-disabled
model and full fine-tuning keeps a frozen reference copy), critic off (GRPO) so the
actor is what differs. Prints trainable parameters, resident memory after setup, the peak resident memory
during training (the high-water mark is reset after setup, Linux only) and the mean
step time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile


def _rss_mb(field: str) -> float:
    """VmRSS / VmHWM (peak) of this process in MB, from /proc (Linux)."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Reset VmHWM so the peak covers training only, not model loading (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def run_one(model: str, rank: int, steps: int, env: str) -> dict:
    import torch

    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            [
                f"env={env}",
                "algo=grpo",
                "model=tiny",
                f"model.path={model}",
                f"model.lora.rank={rank}",
                "model.actor_lr=1e-4",
                "algo.kl_coef=0.001",
                "rollout.env_groups=4",
                "rollout.group_size=4",
                "rollout.max_new_tokens=32",
                "rollout.prompt_style=compact",
                "algo.ppo_mini_batch_size=16",
                f"trainer.total_steps={steps}",
                "trainer.val_every=0",
                "trainer.save_every=0",
                "trainer.console=false",
                "trainer.tensorboard=false",
                "trainer.save_trajectories=false",
                f"trainer.run_dir={tmp}/run",
            ]
        )
        trainer = StarPOTrainer(cfg)
        trainable = sum(p.numel() for p in trainer.actor.parameters() if p.requires_grad)
        total = sum(p.numel() for p in trainer.actor.parameters())
        loaded_mb = _rss_mb("VmRSS")
        _reset_peak()
        history = trainer.train()
    steps_s = [h["timing/step"] for h in history[1:]] or [history[0]["timing/step"]]
    update_s = [h["timing/update"] for h in history[1:]] or [history[0]["timing/update"]]
    return {
        "rank": rank,
        "trainable": trainable,
        "total": total,
        "loaded_rss_mb": loaded_mb,
        "peak_rss_mb": _rss_mb("VmHWM"),
        "step_s": sum(steps_s) / len(steps_s),
        "update_s": sum(update_s) / len(update_s),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny:small")
    p.add_argument("--env", default="bandit")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ranks", type=int, nargs="+", default=[0, 8])
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(run_one(args.model, args.child, args.steps, args.env)))
        return
    rows = []
    for rank in args.ranks:
        cmd = [
            sys.executable,
            "-m",
            "bench.bench_lora",
            "--model",
            args.model,
            "--env",
            args.env,
            "--steps",
            str(args.steps),
            "--child",
            str(rank),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"model {args.model}, env {args.env}, {args.steps} steps (GRPO + KL, 4x4 rollouts)")
    print(
        f"{'mode':<10} {'trainable':>12} {'after load':>11} {'train peak':>11} {'step':>8} {'update':>8}"
    )
    for r in rows:
        mode = "full" if r["rank"] == 0 else f"LoRA r={r['rank']}"
        print(
            f"{mode:<10} {r['trainable']:>12,} {r['loaded_rss_mb']:>9.0f}MB {r['peak_rss_mb']:>9.0f}MB "
            f"{r['step_s']:>7.2f}s {r['update_s']:>7.2f}s"
        )


if __name__ == "__main__":
    main()
