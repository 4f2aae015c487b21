"""Trainer step time by phase, and the update phase against a bare training loop.

    .venv/bin/python -m bench.bench_trainer                      # tiny (micro), sokoban, 8x16, 5 turns
    .venv/bin/python -m bench.bench_trainer --steps 2 --algo starpo --prompt-style compact

Runs ``--steps`` StarPO steps of the tiny model on CPU at ``env_groups x group_size``
with up to 5 turns and prints the seconds of every phase (rollout, old log-probs,
advantages incl. values, update) per step. Then, in the same process, it replays the
exact token count the trainer's update phase processed through a bare loop: the same
sequences packed into equal-length rows (no padding), plain forward + backward +
AdamW step on an actor-sized and a critic-sized model, the same number of optimizer
steps. The ratio (trainer update tokens/s) / (bare loop tokens/s) shows the trainer's
overhead and padding waste.

``--bf16-cpu off,on`` runs the whole measurement once per setting of
``trainer.bf16_cpu`` in this process (the bare loop then runs under the same autocast),
so the two precisions are compared side by side; ``--size`` picks the tiny preset::

    .venv/bin/python -m bench.bench_trainer --size nano --bf16-cpu off,on --threads 1

``--sft-episodes N`` (N > 0) measures the SFT step the same way instead: one epoch of
``ragen.sft.trainer.train_sft`` on N expert episodes of ``--env`` (batch 32, compact
prompts), then the bare loop over the same real tokens and optimizer steps, with
``SFTConfig.bf16`` (and the bare loop's autocast) per ``--bf16-cpu`` setting::

    .venv/bin/python -m bench.bench_trainer --size nano --sft-episodes 128 --bf16-cpu off,on --threads 1

``--share-prefix off,on`` runs each measurement without and with the shared-prompt-
prefix forward of ``ragen.models.logprobs`` (the prefix all rows of a micro-batch share
runs once; off = ``MIN_SHARED_PREFIX`` set out of reach), and ``--demo`` takes the
demo's rollout shape for ``--env`` (compact prompts, one state per turn, the demo's
SFT noise) for the SFT data and the trainer::

    .venv/bin/python -m bench.bench_trainer --size nano --sft-episodes 256 --demo --share-prefix off,on --threads 1
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import torch


def bare_update(actor, critic, batch, n_optimizer_steps: int, autocast=None) -> float:
    """Seconds for fwd+bwd+AdamW on the same real tokens, padding-free, actor + critic."""
    ids = batch.input_ids[batch.attention_mask.bool()]  # all real tokens, flattened
    row = int(batch.lengths.float().mean())  # typical sequence length
    n_rows = max(1, ids.numel() // row)
    dense = ids[: n_rows * row].view(n_rows, row)
    per_step = max(1, n_rows // n_optimizer_steps)
    models = [m for m in (actor, critic) if m is not None]
    opts = [
        torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-6) for m in models
    ]
    autocast = autocast or contextlib.nullcontext()
    tic = time.perf_counter()
    for start in range(0, n_rows, per_step):
        chunk = dense[start : start + per_step]
        for model, opt in zip(models, opts):
            with autocast:
                out = model(input_ids=chunk, use_cache=False).logits
            out.float().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    return time.perf_counter() - tic


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--env", default="sokoban")
    p.add_argument("--algo", default="starpo-s")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--prompt-style", default="full")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--size", default="micro", help="tiny preset (model=tiny:SIZE)")
    p.add_argument("--bf16-cpu", default="off", help="comma-separated of off,on")
    p.add_argument("--sft-episodes", type=int, default=0, help="> 0: measure the SFT step")
    p.add_argument("--share-prefix", default="on", help="comma-separated of off,on")
    p.add_argument("--demo", action="store_true", help="the demo's rollout shape for --env")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from ragen.models import logprobs

    default_min = logprobs.MIN_SHARED_PREFIX
    for setting in args.bf16_cpu.split(","):
        for share in args.share_prefix.split(","):
            logprobs.MIN_SHARED_PREFIX = default_min if share == "on" else 10**9
            print(f"\n== bf16 {setting}, shared prefix {share} ==")
            (run_sft if args.sft_episodes else run)(args, setting == "on")
    logprobs.MIN_SHARED_PREFIX = default_min


def _rollout_config(args):
    """The demo's rollout shape for ``--env`` (``--demo``), else 5 turns of ``--prompt-style``."""
    from ragen.agent.rollout import RolloutConfig

    if args.demo:
        from ragen.recipes import BUDGETS, ENV_SHAPE

        return ENV_SHAPE[args.env].rollout(BUDGETS["classic"], args.env)
    return RolloutConfig(max_turns=5, max_new_tokens=48, prompt_style=args.prompt_style)


def run_sft(args, bf16: bool) -> None:
    """One epoch of SFT against the bare loop over the same tokens (see the module doc)."""
    from ragen.batching import collate
    from ragen.models.precision import cpu_autocast
    from ragen.models.tiny import build_model, build_tokenizer
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data
    from ragen.sft.trainer import train_sft

    tok = build_tokenizer("chatml")
    demo = {}
    if args.demo:
        from ragen.recipes import BUDGETS, ENV_SHAPE

        budget = BUDGETS["classic"]
        demo = dict(
            epsilon=budget.sft_epsilon[args.env],
            actions_per_turn=ENV_SHAPE[args.env].actions_per_turn,
            lr=budget.sft_lr,
        )
    cfg = SFTConfig(
        env=args.env,
        rollout=_rollout_config(args),
        episodes=args.sft_episodes,
        epochs=1,
        batch_size=32,
        bf16=bf16,
        **demo,
    )
    data = make_expert_data(tok, cfg)
    model = build_model(args.size, tok, seed=0)
    tic = time.perf_counter()
    history = train_sft(model, tok, data, cfg, log=lambda m: None)
    sft_s = time.perf_counter() - tic
    batch = collate(data, tok.pad_token_id)
    tokens = float(batch.attention_mask.sum())
    bare_s = bare_update(model, None, batch, len(history), cpu_autocast(bf16))
    print(
        f"SFT {args.env}: {len(data)} sequences, {int(tokens)} real tokens, {len(history)} "
        f"optimizer steps, tiny:{args.size}, {args.threads} threads, SFTConfig.bf16={bf16}"
    )
    print(f"SFT steps:  {tokens / sft_s:8.0f} tokens/s  ({sft_s:.2f}s)")
    print(f"bare loop:  {tokens / bare_s:8.0f} tokens/s  ({bare_s:.2f}s)")
    print(f"ratio SFT/bare: {bare_s / sft_s:.2f}")


def run(args, bf16_cpu: bool) -> None:

    from ragen.recipes import BUDGETS, rollout_overrides
    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            [
                f"env={args.env}",
                f"algo={args.algo}",
                "model=tiny",
                f"model.path=tiny:{args.size}",
                f"trainer.bf16_cpu={str(bf16_cpu).lower()}",
                f"rollout.env_groups={args.groups}",
                f"rollout.group_size={args.group_size}",
                *(rollout_overrides(args.env, BUDGETS["classic"]) if args.demo else []),
                *(
                    []
                    if args.demo
                    else ["rollout.max_turns=5", f"rollout.prompt_style={args.prompt_style}"]
                ),
                f"trainer.total_steps={args.steps}",
                "trainer.val_every=0",
                "trainer.save_every=0",
                "trainer.console=false",
                "trainer.save_trajectories=false",
                "trainer.tensorboard=false",
                f"trainer.run_dir={Path(tmp) / 'run'}",
            ]
        )
        trainer = StarPOTrainer(cfg)
        captured = {}
        original = trainer.update

        def update(batch, step):  # keep the last trained batch for the bare replay
            captured["batch"] = batch.rows(range(batch.size))  # indexed copies of the tensors
            return original(batch, step)

        trainer.update = update
        history = trainer.train()
        last = history[-1]
        phases = ["rollout", "prepare", "old_log_prob", "advantage", "update", "step"]
        print(
            f"{args.env} {args.algo}: {args.groups}x{args.group_size}, <=5 turns, tiny:{args.size}, "
            f"{args.threads} threads, trainer.bf16_cpu={bf16_cpu}"
        )
        print(
            f"{'phase':<14}" + "".join(f"{'step ' + str(i + 1):>10}" for i in range(len(history)))
        )
        for ph in phases:
            print(
                f"{ph:<14}"
                + "".join(f"{h.get('timing/' + ph, float('nan')):>9.2f}s" for h in history)
            )
        batch = captured["batch"]
        tokens = float(batch.attention_mask.sum())
        n_mb = -(-batch.input_ids.shape[0] // cfg.algo.ppo_mini_batch_size) * cfg.algo.ppo_epochs
        print(
            f"\nupdate phase: {int(tokens)} real tokens, {batch.input_ids.shape[0]} samples, "
            f"padding fraction {last['perf/padding_fraction']:.3f}, {n_mb} optimizer steps"
        )
        trainer_tps = last["perf/update_tokens_per_s"]
        bare_s = bare_update(trainer.actor, trainer.critic, batch, n_mb, trainer.autocast)
        bare_tps = tokens / bare_s
        print(f"trainer update: {trainer_tps:8.0f} tokens/s")
        print(f"bare loop:      {bare_tps:8.0f} tokens/s  ({bare_s:.2f}s)")
        print(f"ratio trainer/bare: {trainer_tps / bare_tps:.2f}")
        print(f"rollout generation: {last['perf/rollout_tokens_per_s']:.0f} tokens/s")
        keys = ("actor/gen_logprob_abs_diff", "actor/entropy", "actor/grad_norm", "actor/pg_loss")
        print("last step: " + ", ".join(f"{k} {last.get(k, float('nan')):.4g}" for k in keys))


if __name__ == "__main__":
    main()
