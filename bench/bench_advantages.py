"""Speed of the vectorized advantage estimators against loop implementations.

Run from the repository root::

    .venv/bin/python -m bench.bench_advantages                  # 256 x 4096, 5 turns
    .venv/bin/python -m bench.bench_advantages --batch 64 --seq 2048 --repeats 5

Workload: each row is a 200-token prompt followed by 5 turns of [response][observation]
with random lengths (responses 300-600 tokens, observations 100-300), truncated to
``--seq`` and right-padded; a reward at every turn end. Every estimator is timed with
1 thread and with torch's default thread count (``--repeats`` runs after a warm-up).
Printed: min and median wall time and, for 1 thread, the min process CPU time -- on a
shared machine the wall time includes waiting for a core, CPU time does not. Baselines:

* ``per-position loop``: the usual batched GAE loop over the 4096 positions
  (observation tokens skipped by masking), on the full batch.
* ``per-sample loop``: the obviously-correct references in tests/test_algo_gae.py, timed
  on ``--ref-batch`` rows and scaled linearly to the full batch.

The maximum absolute difference to the per-position loop (float32) is printed as a
correctness check.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics
import time

import torch

from ragen.algo import (
    compute_bi_level_gae,
    compute_gae,
    compute_grpo,
    compute_turn_gae,
)

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_references():
    """The per-sample loop references live in the test file; load it by path."""
    spec = importlib.util.spec_from_file_location(
        "_algo_gae_refs", REPO / "tests" / "test_algo_gae.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_batch(batch: int, seq: int, turns: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(batch, seq, dtype=torch.bool)
    ends = torch.zeros(batch, seq, dtype=torch.bool)
    for b in range(batch):  # building the layout is setup, not timed
        t = 200
        for _ in range(turns):
            resp = int(torch.randint(300, 601, (1,), generator=gen))
            if t >= seq:
                break
            stop = min(t + resp, seq)
            mask[b, t:stop] = True
            ends[b, stop - 1] = True
            t = stop + int(torch.randint(100, 301, (1,), generator=gen))
    rewards = torch.randn(batch, seq, generator=gen) * ends
    values = torch.randn(batch, seq, generator=gen)
    return rewards, values, mask, ends


def per_position_gae(rewards, values, mask, gamma, lam):
    """Batched loop over positions; masked positions pass value and advantage through."""
    m = mask.float()
    next_value = torch.zeros(rewards.shape[0])
    last_adv = torch.zeros(rewards.shape[0])
    out = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * last_adv
        next_value = values[:, t] * m[:, t] + (1 - m[:, t]) * next_value
        last_adv = adv * m[:, t] + (1 - m[:, t]) * last_adv
        out[:, t] = last_adv
    return out * m, (out + values) * m


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(min wall, median wall, min process-CPU) time in ms over ``repeats`` runs after a
    warm-up. With one thread, CPU time excludes the time spent waiting for a core, so it is
    the robust number on a shared machine."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return min(wall) * 1e3, statistics.median(wall) * 1e3, min(cpu) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ref-batch", type=int, default=2, help="rows for the per-sample loops")
    args = parser.parse_args(argv)

    rewards, values, mask, ends = make_batch(args.batch, args.seq, args.turns)
    index = torch.arange(args.batch) // 16
    boot = torch.randn(args.batch, generator=torch.Generator().manual_seed(1))
    print(
        f"batch {args.batch} x seq {args.seq}, {args.turns} turns, "
        f"{int(mask.sum()) / args.batch:.0f} response tokens/row; {args.repeats} runs each (ms)"
    )
    default_threads = torch.get_num_threads()
    rows = [
        ("compute_gae", lambda: compute_gae(rewards, values, mask, 0.99, 0.95)),
        (
            "compute_gae (bootstrap_value)",
            lambda: compute_gae(rewards, values, mask, 0.99, 0.95, bootstrap_value=boot),
        ),
        (
            "compute_bi_level_gae",
            lambda: compute_bi_level_gae(rewards, values, mask, ends, 0.95, 1.0, 0.99, 0.95),
        ),
        ("compute_turn_gae", lambda: compute_turn_gae(rewards, values, mask, ends, 0.95, 1.0)),
        ("compute_grpo", lambda: compute_grpo(rewards, mask, index)),
        ("per-position loop gae", lambda: per_position_gae(rewards, values, mask, 0.99, 0.95)),
    ]
    refs = load_references()
    sl = slice(0, args.ref_batch)
    scale = args.batch / args.ref_batch
    ref_rows = [
        ("per-sample loop gae", lambda: refs.reference_gae(rewards[sl], values[sl], mask[sl], 0.99, 0.95)),
        ("per-sample loop bi_level", lambda: refs.reference_bi_level_gae(
            rewards[sl], values[sl], mask[sl], ends[sl], 0.95, 1.0, 0.99, 0.95)),
    ]  # fmt: skip

    print(f"{'':<30}{'--- 1 thread ---':>30}{f'--- {default_threads} threads ---':>22}")
    print(
        f"{'estimator':<30}{'wall min':>10}{'median':>10}{'cpu min':>10}{'wall min':>11}{'median':>11}"
    )
    for name, fn in rows:
        torch.set_num_threads(1)
        one = timed(fn, args.repeats)
        torch.set_num_threads(default_threads)
        many = timed(fn, args.repeats)
        print(
            f"{name:<30}{one[0]:>10.1f}{one[1]:>10.1f}{one[2]:>10.1f}{many[0]:>11.1f}{many[1]:>11.1f}"
        )
    torch.set_num_threads(1)
    for name, fn in ref_rows:
        one = timed(fn, 1)
        print(f"{name + ' (scaled)':<30}{one[0] * scale:>10.0f}{'':>10}{one[2] * scale:>10.0f}")
    torch.set_num_threads(default_threads)

    adv, ret = compute_gae(rewards, values, mask, 0.99, 0.95)
    loop_adv, loop_ret = per_position_gae(rewards, values, mask, 0.99, 0.95)
    print(f"max |compute_gae - per-position loop|: {float((adv - loop_adv).abs().max()):.2e}")
    ref_adv, _ = refs.reference_bi_level_gae(
        rewards[sl].double(), values[sl].double(), mask[sl], ends[sl], 0.95, 1.0, 0.99, 0.95
    )
    got, _ = compute_bi_level_gae(
        rewards[sl], values[sl], mask[sl], ends[sl], 0.95, 1.0, 0.99, 0.95
    )
    print(f"max |compute_bi_level_gae - per-sample loop| ({args.ref_batch} rows): "
          f"{float((got.double() - ref_adv).abs().max()):.2e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
