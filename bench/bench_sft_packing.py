"""The grids' SFT step with and without length-split micro-batches.

    .venv/bin/python -m bench.bench_sft_packing --min-fill 0.75   # today's SFT
    .venv/bin/python -m bench.bench_sft_packing --min-fill 0      # one pack per step
    # whole processes, the two alternated (any timer; e.g. hyperfine):
    hyperfine -r 4 '.venv/bin/python -m bench.bench_sft_packing --min-fill 0' \\
        '.venv/bin/python -m bench.bench_sft_packing --min-fill 0.75'

The demo's grid warm start (``ragen.demo.GRID_SFT``) trains on the solver's moves (about
110 tokens a sample on Sokoban, compact prompts, one state per turn) mixed with as many
episodes of the auxiliary grounding reply (about 170 tokens). Packed into one
micro-batch, every move sample is padded to the auxiliary length; with
``ragen.sft.trainer.SFT_MIN_FILL`` a row shorter than that share of its pack's longest
starts a new pack. The loss is summed over tokens and divided by the step's token count
either way, so the gradient is the same.

Runs ``--steps`` optimizer steps of ``train_sft`` on the tiny nano model and prints the
seconds per step (the first two steps, which pay one-off costs, are not counted).
``tests/test_sft.py`` checks that the split leaves the gradient unchanged.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from ragen.sft import trainer as sft
from ragen.sft.config import SFTConfig
from ragen.sft.expert_data import auxiliary_config, make_expert_data


def _data(tokenizer, episodes: int):
    """Sokoban's demo SFT samples: solver moves + the auxiliary grounding reply."""
    from ragen.recipes import BUDGETS, ENV_SHAPE, GRID_SFT

    budget = BUDGETS["full"]
    cfg = SFTConfig(
        env="sokoban",
        rollout=ENV_SHAPE["sokoban"].rollout(budget, "sokoban"),
        episodes=episodes,
        epsilon=0.1,
        **{k: v for k, v in GRID_SFT.items() if k != "heldout_episodes"},
    )
    cfg = replace(cfg, aux_episodes=episodes, heldout_episodes=0)
    data = make_expert_data(tokenizer, cfg) + make_expert_data(tokenizer, auxiliary_config(cfg))
    return cfg, data


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--min-fill", type=float, default=sft.SFT_MIN_FILL)
    p.add_argument("--episodes", type=int, default=64, help="of each kind (moves, auxiliary)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from ragen.models import load_policy
    from ragen.models.tiny import create_tiny

    with tempfile.TemporaryDirectory() as tmp:
        path = create_tiny(Path(tmp) / "nano", size="nano", seed=0)
        model, tokenizer = load_policy(str(path), device="cpu", dtype=torch.float32)
    cfg, data = _data(tokenizer, args.episodes)
    cfg = replace(cfg, epochs=1)
    data = (data * (1 + args.steps * cfg.batch_size // len(data)))[: args.steps * cfg.batch_size]
    sft.SFT_MIN_FILL = args.min_fill
    history = sft.train_sft(model, tokenizer, data, cfg, log=lambda *_: None)
    elapsed = [h["elapsed_s"] for h in history]
    per_step = (elapsed[-1] - elapsed[1]) / (len(elapsed) - 2)
    lengths = sorted({len(t.input_ids) for t in data})
    print(
        f"min_fill {args.min_fill}: {per_step:.3f} s per SFT step of {cfg.batch_size} rows "
        f"(sample lengths {lengths[0]}-{lengths[-1]} tokens, {args.threads} thread(s))"
    )


if __name__ == "__main__":
    main()
