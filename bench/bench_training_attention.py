"""The update of one demo RL step with the CPU training attention on and off, in turn.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_training_attention \\
        --model runs/grids/tiny-cpu-aux/frozen_lake/seed0/sft --rounds 12

Builds the demo's FrozenLake step as ``bench.bench_rl_step`` does (``--groups x
--group-size`` episodes, the ``--set`` overrides; by default the grids' configuration:
Dr.GRPO, every group, ``no_think`` replies, one optimizer step), plays one warm-up step,
then captures the next step's update (its batch, advantages and micro-batches) and runs
that same update ``--rounds`` times each way from the same weights, alternating which
goes first: with ``ragen.models.attention.training_attention`` (grouped-query SDPA, K/V
heads read in place) and without it (transformers' SDPA, which expands K/V to every
query head). Prints process CPU seconds per run, the ratio of the medians and of each
pair. Both run in one process on one batch, so the machine's drift between processes
does not enter the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the warm start (a grids or demo sft folder)")
    p.add_argument("--env", default="frozen_lake")
    p.add_argument("--groups", type=int, default=16)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    grids = [
        "rollout.reasoning=no_think", "algo=drgrpo", "algo.filter.value=1.0",
        "rollout.max_new_tokens=16",
    ]  # fmt: skip
    p.add_argument(
        "--set",
        action="append",
        default=None,
        help=f"overrides (default {grids} and one minibatch of every turn of the step)",
    )
    args = p.parse_args(argv)
    # one optimizer step over the whole step: groups x episodes x up to 10 turns
    grids.append(f"algo.ppo_mini_batch_size={args.groups * args.group_size * 10}")

    import torch

    torch.set_num_threads(args.threads)
    import ragen.trainer.forward as forward
    import ragen.trainer.update as update
    from bench.bench_rl_step import demo_overrides
    from ragen.models.attention import training_attention
    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    args.reasoning = None
    args.set = grids if args.set is None else args.set
    with tempfile.TemporaryDirectory() as tmp:
        trainer = StarPOTrainer(load_config(demo_overrides(args, tmp + "/run")))
        try:
            trainer.train_step(0)  # warm-up: first calls, the C kernel's load
            real, captured = update.ppo_update, {}

            def capture(*a, **k):
                captured["call"] = (a, k)
                return real(*a, **k)

            update.ppo_update = capture
            try:
                trainer.train_step(1)
            finally:
                update.ppo_update = real
            call_args, call_kwargs = captured["call"]
            weights = {n: t.clone() for n, t in trainer.actor.state_dict().items()}
            ways = {"gqa": training_attention, "repeat": lambda m: contextlib.nullcontext()}
            seconds: dict[str, list[float]] = {"gqa": [], "repeat": []}
            try:
                for r in range(args.rounds):
                    for name in ("gqa", "repeat") if r % 2 == 0 else ("repeat", "gqa"):
                        forward.training_attention = ways[name]
                        trainer.actor.load_state_dict(weights)
                        tic = time.process_time()
                        real(*call_args, **call_kwargs)
                        seconds[name].append(time.process_time() - tic)
            finally:
                forward.training_attention = training_attention
        finally:
            trainer.logger.close()
            trainer.close()
    for name, values in seconds.items():
        print(f"{name:>6}: " + " ".join(f"{s:.3f}" for s in values) + " CPU s")
    pairs = [r / g for r, g in zip(seconds["repeat"], seconds["gqa"])]
    ratio = statistics.median(seconds["repeat"]) / statistics.median(seconds["gqa"])
    print(
        f"update, transformers' SDPA / grouped-query SDPA: {ratio:.2f}x (pairs "
        + ", ".join(f"{x:.2f}" for x in pairs)
        + ")"
    )


if __name__ == "__main__":
    main()
