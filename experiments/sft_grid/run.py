"""How fast does a tiny model learn to read a grid? SFT on the clean expert, step by step.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.sft_grid.run --env sokoban --steps 600

Trains a fresh tiny model (``--size``) on oracle trajectories (``epsilon`` 0, compact
prompts, 2 actions per turn, ``--max-turns`` turns) with a constant learning rate, and
every ``--every`` steps reports the held-out negative log-likelihood (nats) of

* ``decision``: the first action named in the thought (``...are <a1>, <a2>.``), the
  token that carries the policy: log 4 = 1.386 means the model has not read the grid;
* ``copy``: the first action in the answer, which repeats the thought's (0 once the
  model can copy from ten tokens back);
* ``all``: every assistant token.

The held-out set is 128 episodes on seeds the training data never uses.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from experiments.common import cli, parse_study_args


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="sokoban")
    p.add_argument("--size", default="nano")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--episodes", type=int, default=2048)
    p.add_argument("--max-turns", type=int, default=1)
    args = parse_study_args(p, argv, __file__)

    from ragen.agent.rollout import RolloutConfig
    from ragen.batching import collate
    from ragen.models import load_policy
    from ragen.models.logprobs import sequence_logprobs
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    torch.manual_seed(0)
    model, tok = load_policy(f"tiny:{args.size}")

    def data(episodes: int, split: str):
        rollout = RolloutConfig(
            max_turns=args.max_turns, max_actions_per_turn=2, prompt_style="compact"
        )
        cfg = SFTConfig(
            env=args.env,
            rollout=rollout,
            episodes=episodes,
            epsilon=0.0,
            actions_per_turn=2,
            seed=0,
        )
        return make_expert_data(tok, cfg, split=split)

    # held out: expert answers on validation states, which no SFT draw can meet
    train, held_out = data(args.episodes, "train"), data(128, "validation")
    answer_id = tok.convert_tokens_to_ids("<answer>")
    are_id = tok.encode(" are", add_special_tokens=False)[0]
    pad = tok.pad_token_id
    test = collate(held_out, pad)
    mask = test.response_mask
    prev = torch.nn.functional.pad(test.input_ids[:, :-1], (1, 0), value=pad)
    decision = mask * (prev == are_id)
    copy = mask * (prev == answer_id)

    def evaluate() -> dict[str, float]:
        model.eval()
        with torch.no_grad():
            lp, _ = sequence_logprobs(model, test.input_ids, test.attention_mask, positions=mask)
        model.train()
        nll = -lp
        return {
            k: float((nll * m).sum() / m.sum())
            for k, m in [("decision", decision), ("copy", copy), ("all", mask)]
        }

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rng = random.Random(0)
    print(f"{args.env}, tiny {args.size}, lr {args.lr}, batch {args.batch}, {len(train)} episodes")
    print(f"{'step':>6} {'decision':>9} {'copy':>7} {'all':>7} {'seconds':>8}")
    tic = time.perf_counter()
    model.train()
    for step in range(args.steps + 1):
        if step % args.every == 0:
            r = evaluate()
            print(
                f"{step:>6} {r['decision']:>9.3f} {r['copy']:>7.3f} {r['all']:>7.3f} "
                f"{time.perf_counter() - tic:>8.0f}",
                flush=True,
            )
        if step == args.steps:
            break
        b = collate(rng.sample(train, args.batch), pad)
        m = b.response_mask
        lp, _ = sequence_logprobs(model, b.input_ids, b.attention_mask, positions=m)
        (-(lp * m).sum() / m.sum()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    raise SystemExit(cli(main))
