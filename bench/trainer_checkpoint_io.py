"""Checkpoint save / verify / load wall time for a small Qwen2 model with AdamW state (CPU).

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.trainer_checkpoint_io [--hidden 512 --layers 8]

Prints one row per operation: seconds, bytes on disk, and MB/s (of the checkpoint size).
``verify=sha256`` re-hashes every file; ``verify=size`` only checks sizes.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ragen.trainer.checkpoint import CheckpointManager


def build(hidden: int, layers: int, vocab: int):
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=max(hidden // 64, 1),
        num_key_value_heads=max(hidden // 256, 1),
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, vocab, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()  # materialize Adam moments (2x the parameters)
    opt.zero_grad()
    return model, opt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args()
    model, opt = build(args.hidden, args.layers, args.vocab)
    n_params = sum(p.numel() for p in model.parameters())
    rows = []
    with tempfile.TemporaryDirectory() as run_dir:
        manager = CheckpointManager(run_dir)
        tic = time.perf_counter()
        path = manager.save(1, actor=model, optimizers={"actor": opt})
        rows.append(("save (write + sha256 + fsync)", time.perf_counter() - tic))
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        for mode in ("sha256", "size"):
            fresh = CheckpointManager(run_dir, verify=mode)  # no cached verification
            tic = time.perf_counter()
            fresh.latest()
            rows.append((f"latest() verify={mode}", time.perf_counter() - tic))
        fresh = CheckpointManager(run_dir)
        tic = time.perf_counter()
        fresh.load(path, actor=model, optimizers={"actor": opt})
        rows.append(("load (verify sha256 + restore)", time.perf_counter() - tic))
    print(
        f"model: {n_params / 1e6:.1f}M params, checkpoint {size / 1e6:.0f} MB, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"{'operation':<34}{'seconds':>9}{'MB/s':>9}")
    for name, seconds in rows:
        rate = f"{size / 1e6 / seconds:.0f}" if seconds >= 0.01 else "-"
        print(f"{name:<34}{seconds:>9.2f}{rate:>9}")


if __name__ == "__main__":
    main()
