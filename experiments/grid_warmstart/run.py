"""How good a warm start does SFT give on a grid env? Success and decision accuracy.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.grid_warmstart.run --env sokoban
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.grid_warmstart.run --env frozen_lake --size micro
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.grid_warmstart.run --env sokoban --window -1 \\
        --actions-per-turn 2 --max-turns 5        # the whole history in every prompt

Builds a fresh tiny model (``--size``), fine-tunes it on ``--episodes`` expert episodes
(``--epsilon`` of the expert's actions random) with compact prompts, and reports

* success rate on 128 held-out episodes, greedy and at temperature 0.5, next to the
  random policy and the oracle under the same limits;
* **decision accuracy**: on the states of 128 held-out clean-expert episodes, how often
  the model's most likely first action (among the env's four moves, at the token after
  ``...from this state is``) is the expert's, and its negative log-likelihood (nats; log 4
  = 1.386 is a uniform guess). ``majority`` is the accuracy of always naming the
  expert's most common move. Only for one action per turn.

``--window 0`` (the demo's setting) prompts each turn with the current state alone;
``--window -1`` keeps the whole history in one sample.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from experiments.common import cli, parse_study_args

MOVES = ("up", "down", "left", "right")


def decision_accuracy(model, tokenizer, env: str, max_turns: int) -> dict[str, float]:
    """Top-1 agreement with the clean expert on held-out states (one action per turn)."""
    from ragen.agent.rollout import RolloutConfig
    from ragen.batching import collate
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    rollout = RolloutConfig(
        max_turns=max_turns, max_actions_per_turn=1, prompt_style="compact", context_window=0
    )
    cfg = SFTConfig(
        env=env,
        rollout=rollout,
        episodes=128,
        epsilon=0.0,
        actions_per_turn=1,
    )
    # validation states: never among the warm start's SFT states
    batch = collate(make_expert_data(tokenizer, cfg, split="validation"), tokenizer.pad_token_id)
    ids = batch.input_ids
    before = torch.nn.functional.pad(ids[:, :-1], (1, 0), value=tokenizer.pad_token_id)
    is_id = tokenizer.encode(" is", add_special_tokens=False)[0]
    rows, cols = ((batch.response_mask > 0) & (before == is_id)).nonzero(as_tuple=True)
    move_ids = [tokenizer.encode(" " + m, add_special_tokens=False)[0] for m in MOVES]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=batch.attention_mask).logits
    scores = logits[rows, cols - 1][:, move_ids]  # (decisions, 4): the logits that pick it
    target = torch.tensor([move_ids.index(int(t)) for t in ids[rows, cols]])
    return {
        "decisions": float(len(target)),
        "accuracy": float((scores.argmax(-1) == target).float().mean()),
        "majority": float(torch.bincount(target, minlength=4).max() / len(target)),
        "nll": float(torch.nn.functional.cross_entropy(scores, target)),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="sokoban", choices=["sokoban", "frozen_lake"])
    p.add_argument("--size", default="nano")
    p.add_argument("--episodes", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--epsilon", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--window", type=int, default=0, help="-1: the whole history")
    p.add_argument("--actions-per-turn", type=int, default=1)
    p.add_argument("--max-turns", type=int, default=10)
    p.add_argument("--no-think", action="store_true")
    p.add_argument("--out", default="runs/grid_warmstart")
    args = parse_study_args(p, argv, __file__)

    from ragen.agent.evaluate import evaluate
    from ragen.agent.rollout import RolloutConfig
    from ragen.models import load_policy
    from ragen.models.tiny import create_tiny
    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft

    out = Path(args.out)
    window = None if args.window < 0 else args.window
    torch.manual_seed(0)
    tic = time.perf_counter()
    tiny = create_tiny(out / "tiny", size=args.size, seed=0)
    rollout = RolloutConfig(
        max_turns=args.max_turns,
        max_new_tokens=48,
        max_model_len=2048,
        max_actions_per_turn=args.actions_per_turn,
        prompt_style="compact",
        context_window=window,
        reasoning="no_think" if args.no_think else "free_think",
    )
    cfg = SFTConfig(
        env=args.env,
        rollout=rollout,
        episodes=args.episodes,
        epsilon=args.epsilon,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        actions_per_turn=args.actions_per_turn,
        seed=0,
    )

    def log(msg: str) -> None:  # every 100th SFT step
        if not msg.startswith("sft step") or "00/" in msg:
            print(msg, flush=True)

    sft_dir = run_sft(str(tiny), out / "sft", cfg, log=log)
    sft_seconds = time.perf_counter() - tic

    common = dict(env=args.env, n=128, max_turns=args.max_turns, seed=0, config=rollout)
    results: dict[str, float] = {}
    for name, model, temperatures in [
        ("warm start", str(sft_dir), (0.0, 0.5)),
        ("random", "random", (0.5,)),
        ("oracle", "oracle", (0.5,)),
    ]:
        extra = {} if name == "warm start" else {"actions_per_turn": args.actions_per_turn}
        for t in temperatures:
            m = evaluate(model, temperature=t, batch_groups=64, **common, **extra)
            results[f"{name} @ T={t}"] = m["success_rate"]
            print(f"{name:>10} T={t}: success {m['success_rate']:.1%}", flush=True)
    if args.actions_per_turn == 1 and not args.no_think:
        model, tok = load_policy(str(sft_dir))
        d = decision_accuracy(model, tok, args.env, args.max_turns)
        results.update({f"decision {k}": v for k, v in d.items()})
        print(
            f"decision accuracy {d['accuracy']:.1%} (majority {d['majority']:.1%}, "
            f"{d['decisions']:.0f} held-out states), nll {d['nll']:.3f}"
        )
    print(f"SFT {sft_seconds:.0f} s")
    record = {"args": vars(args), "results": results, "sft_seconds": round(sft_seconds)}
    (out / "result.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    raise SystemExit(cli(main))
