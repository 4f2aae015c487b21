"""The reasoning-collapse statistics' cross-scoring, one call per prompt against batched.

Run from the repository root::

    .venv/bin/python -m bench.bench_reasoning_stats                       # tiny nano, CPU
    .venv/bin/python -m bench.bench_reasoning_stats --model runs/grids/smollm2-cpu-sk/sokoban/seed0/sft
    python -m bench.bench_reasoning_stats --model <folder> --device cuda  # on a GPU

Workload: what ``trainer.reasoning_samples`` (16) asks of every RL step. The model
plays ``--samples`` one-turn episodes on ``--env`` (compact prompts, ``no_think``
replies, distinct initial states), and :func:`ragen.trainer.reasoning_stats.
cross_prompt_logprobs` scores every reply under every distinct prompt: ``--samples``
squared rows. ``per-prompt`` runs them one prompt per call (``max_rows`` = the number
of samples: what the function did before the batching), ``batched`` all in one call
(the default ``max_rows``). Both run ``--rounds`` times in alternating order; the
script prints each one's best time, the ratio and the largest difference between the
two ``L`` matrices (float rounding: the rows are the same, only grouped differently).

The model is loaded in ``--dtype`` (default float32: the trainer keeps float32 weights).
With bfloat16 weights the two matrices differ by much more than float32's rounding,
because a row's padded width changes its bf16 rounding: on an H200, SmolLM2's largest
difference was 8.5e-01 nats in bf16 against 9.7e-05 in float32 (docs/SPEED.md, item 10).
``--autocast`` also scores the batched rows under bf16 autocast on float32 weights, what
the trainer does on a GPU (and on a CPU with ``trainer.bf16_cpu``), and prints how far
that moves ``L`` and the statistics the trainer logs from it.
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="cross-prompt scoring: per-prompt vs batched calls")
    p.add_argument("--model", default=None, help="a model folder, hub id or .gguf (default: tiny)")
    p.add_argument("--size", default="nano", help="tiny preset when no --model")
    p.add_argument("--env", default="sokoban")
    p.add_argument("--samples", type=int, default=16, help="replies scored (the trainer's 16)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", help="float32 (the trainer's weights) or bfloat16")
    p.add_argument("--autocast", action="store_true", help="also: bf16 autocast against none")
    args = p.parse_args(argv)

    import torch

    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.policies import ModelPolicy
    from ragen.agent.rollout import RolloutConfig, run_rollout
    from ragen.engines.hf import HFEngine
    from ragen.trainer.reasoning_stats import (
        cross_prompt_logprobs,
        distinct_prompts,
        mi_from_logprobs,
        reasoning_span,
        scored_pairs,
    )

    torch.set_num_threads(args.threads)
    if args.model:
        from ragen.models import load_policy

        model, tok = load_policy(args.model, dtype=args.dtype)
    else:
        from ragen.models.tiny import build_model, build_tokenizer

        tok = build_tokenizer("chatml")
        model = build_model(args.size, tok, seed=args.seed)
    from ragen.models.loading import pick_dtype

    model = model.to(args.device, pick_dtype(args.device, args.dtype)).eval()
    policy = ModelPolicy(HFEngine(model, tok), tok)
    manager = EnvStateManager(args.env, env_groups=args.samples, group_size=1, seed=args.seed)
    cfg = RolloutConfig(
        max_turns=1,
        max_new_tokens=16,
        prompt_style="compact",
        reasoning="no_think",
        temperature=1.0,
        seed=args.seed,
    )
    result = run_rollout(policy, manager, cfg, manager.seeds_for_step(0))
    pairs = scored_pairs(result.trajectories)
    columns, own = distinct_prompts([p for p, _ in pairs])
    responses = [r for _, r in pairs]
    spans = [reasoning_span(r, tok) for r in responses]
    pad = tok.pad_token_id or 0
    n, k = len(responses), len(columns)
    mean_prompt = sum(map(len, columns)) / k
    print(
        f"{args.model or 'tiny-' + args.size}, {args.env}, device={args.device}, "
        f"{args.dtype}, threads={args.threads}: {n} replies x {k} prompts (mean prompt {mean_prompt:.0f} ids)"
    )

    def score(max_rows: int):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        tic = time.perf_counter()
        L = cross_prompt_logprobs(model, columns, responses, spans, pad, 1.0, args.device, max_rows)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - tic, L

    variants = {"per-prompt": n, "batched": n * k}
    score(n)  # warm-up
    best: dict[str, float] = {}
    mats = {}
    for r in range(args.rounds):
        for name in variants if r % 2 == 0 else list(variants)[::-1]:
            seconds, mats[name] = score(variants[name])
            best[name] = min(best.get(name, seconds), seconds)
    diff = float((mats["per-prompt"] - mats["batched"]).abs().max())
    for name, seconds in best.items():
        print(f"{name:<11} {seconds * 1e3:9.1f} ms (best of {args.rounds})")
    print(
        f"batched / per-prompt speed: {best['per-prompt'] / best['batched']:.2f}x; "
        f"largest |L difference| {diff:.2e} nats"
    )
    if args.autocast:
        with torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16):
            _, cast = score(n * k)
        lengths = torch.tensor([e - s for s, e in spans], dtype=torch.float64)
        plain, cast_stats = (mi_from_logprobs(m, lengths, own) for m in (mats["batched"], cast))
        print(f"bf16 autocast against none: largest |L difference| "
              f"{float((cast - mats['batched']).abs().max()):.2e} nats")  # fmt: skip
        for key in ("mutual_info", "mutual_info_token", "cond_entropy", "retrieval_acc"):
            a, b = plain[f"reasoning/{key}"], cast_stats[f"reasoning/{key}"]
            print(f"  reasoning/{key:<18} {a:8.4f} -> {b:8.4f} ({b - a:+.4f})")


if __name__ == "__main__":
    main()
