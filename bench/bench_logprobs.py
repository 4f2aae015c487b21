"""Log-prob recomputation with the LM head at response positions only vs everywhere.

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_logprobs --size nano --repeats 5

Multi-turn Sokoban trajectories from the oracle (compact prompts, 5 turns, 2 actions a
turn, the demo's setting), collated into one batch of ``--batch`` samples. Times
forward + backward of ``sequence_logprobs`` (log-probs and entropy, as in the PPO
update) with ``positions=response_mask`` (head only where a response token is
predicted) and with ``positions=None`` (head at every position), interleaved, and
reports the minimum wall time of each and their ratio.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="nano")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    from ragen.agent.rollout import RolloutConfig
    from ragen.batching import collate
    from ragen.models import load_policy
    from ragen.models.logprobs import sequence_logprobs
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    torch.manual_seed(0)
    model, tok = load_policy(f"tiny:{args.size}")
    rollout = RolloutConfig(max_turns=5, max_actions_per_turn=2, prompt_style="compact")
    # labels=played: whole multi-turn episodes as samples (the expert's labels need one
    # state per sample once moves are noisy, and long samples are what this measures)
    cfg = SFTConfig(
        env="sokoban",
        rollout=rollout,
        episodes=args.batch,
        epsilon=0.25,
        actions_per_turn=2,
        labels="played",
    )
    batch = collate(make_expert_data(tok, cfg), tok.pad_token_id)
    ids, attn, mask = batch.input_ids, batch.attention_mask, batch.response_mask
    model.train()

    def run(positions) -> float:
        tic = time.perf_counter()
        lp, ent = sequence_logprobs(model, ids, attn, 1.0, positions, with_entropy=True)
        ((lp * mask).sum() + (ent * mask).sum()).backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - tic

    run(mask), run(None)  # warm-up
    head_only, full = [], []
    for _ in range(args.repeats):
        head_only.append(run(mask))
        full.append(run(None))
    real = int(attn.sum())
    print(
        f"tiny {args.size}, {ids.shape[0]} samples, {real} tokens, "
        f"{int(mask.sum())} response tokens ({mask.sum() / real:.0%}), vocab {len(tok)}"
    )
    print(f"head at every position : {min(full) * 1e3:8.1f} ms  ({real / min(full):,.0f} tokens/s)")
    print(
        f"head at response tokens: {min(head_only) * 1e3:8.1f} ms  "
        f"({real / min(head_only):,.0f} tokens/s)"
    )
    print(f"speed-up: {min(full) / min(head_only):.2f}x")


if __name__ == "__main__":
    main()
