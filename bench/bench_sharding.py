"""Training ranks on this machine: steps per second and memory per rank, replicated vs
FSDP2-sharded, for 1, 2 and 4 CPU ranks; and what Ray costs a training step.

Run from the repository root (needs the ``scale`` extra)::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_sharding                 # tiny:base
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_sharding --ranks 1 2 --steps 1
    # docs/SCALING.md's memory per rank (part 1 only, written to a results file):
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_sharding --ranks 1 2 4 --steps 1 \
        --ray-steps 0 --results bench/results/sharding_memory.json

Part 1, the model phases of a step (what the ranks do: ``score_batch`` then ``update``;
StarPO-S, actor + critic, 16 samples) on a fixed batch, for each rank count and
``trainer.train_sharding``: a fresh trainer per row, the ranks started and (FSDP)
sharded, one untimed step, then ``--steps`` timed ones. Per rank it reads the exact
bytes of the weights, gradients and AdamW state the rank holds (shards only), and the
process's peak resident memory over the timed steps (Linux ``VmHWM``, reset before
them): the state falls as 1/ranks when sharded; the peak also holds the process's
fixed costs (torch, transformers: ~0.5 GB) and the activations.

Part 2, Ray per step (``--ray-steps``, 0 skips it): whole training steps of the demo's
small Sokoban workload in one process vs on 2 rollout workers, and the one-time cost of
starting Ray and the workers.

Every rank runs one thread; the machine is named in the output. On a shared 2-core
machine, 4 ranks share 2 cores (and the neighbours' load): the steps/s column shows the
overheads of the collectives, not a speed-up.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path


def _config(size: str, run_dir: str, seed: int, *extra: str):
    from ragen.trainer.config import load_config

    return load_config(
        [
            "env=sokoban",
            "algo=starpo-s",
            f"model=tiny:{size}",
            "rollout.env_groups=4",
            "rollout.group_size=4",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=24",
            "rollout.max_model_len=2048",
            "algo.filter.value=1.0",  # every group: the whole batch trains
            "algo.ppo_mini_batch_size=16",
            "trainer.console=false",
            "trainer.tensorboard=false",
            "trainer.val_every=0",
            "trainer.reasoning_samples=0",
            f"trainer.seed={seed}",
            f"trainer.run_dir={run_dir}",
            *extra,
        ]
    )


def _batch(trainer):
    result = trainer.rollout(trainer.train_envs, trainer.train_envs.seeds_for_step(0), 1.0, 0)
    batch = trainer.prepare_batch([t for t in result.trajectories if t.num_response_tokens])
    trainer.score_batch(batch, {})
    trainer.compute_advantages(batch, {})
    return batch


def _phases(phases, batch, step: int) -> None:
    """What the ranks do in a step: score the batch, then update on it."""
    scored = copy.copy(batch)
    phases.score_batch(scored, {})
    phases.update(batch, step)


def sharding_rows(ray, args) -> list[dict]:
    from ragen.distributed.data_parallel import DataParallelUpdater, rank_memory
    from ragen.trainer.starpo import StarPOTrainer

    rows = []
    batch = None
    for ranks in args.ranks:
        for mode in ("replicate", "fsdp") if ranks > 1 else ("one process",):
            run_dir = f"/tmp/ragen-bench-sharding-{os.getpid()}-{ranks}-{mode.replace(' ', '')}"
            trainer = StarPOTrainer(_config(args.size, run_dir, args.seed))
            if batch is None:
                batch = _batch(trainer)
            phases, updater = trainer, None
            if ranks > 1:
                updater = DataParallelUpdater(
                    ray, trainer, ranks, {"num_cpus": 1.0, "num_gpus": 0.0}, mode == "fsdp"
                )
                phases = updater
            _phases(phases, batch, 0)  # untimed: broadcasts, first optimizer state
            memory = updater.memory(reset=True) if updater else [rank_memory(trainer.models, True)]
            tic = time.perf_counter()
            for step in range(args.steps):
                _phases(phases, batch, 1 + step)
            seconds = (time.perf_counter() - tic) / args.steps
            memory = updater.memory() if updater else [rank_memory(trainer.models)]
            if updater is not None:
                updater.close()
            trainer.close()
            state = [m["weights"] + m["gradients"] + m["optimizer"] for m in memory]
            rows.append(
                {
                    "ranks": ranks,
                    "mode": mode,
                    "seconds": seconds,
                    "state_mb": max(state) / 1e6,
                    "peak_mb": max(m["peak_rss"] for m in memory) / 1e6,
                    "peak0_mb": memory[0]["peak_rss"] / 1e6,
                    # every rank's own figures (rank 0 is the trainer's process)
                    "per_rank": [
                        {
                            "weights_mb": m["weights"] / 1e6,
                            "gradients_mb": m["gradients"] / 1e6,
                            "optimizer_mb": m["optimizer"] / 1e6,
                            "peak_rss_mb": m["peak_rss"] / 1e6,
                        }
                        for m in memory
                    ],
                }
            )
            r = rows[-1]
            print(
                f"{ranks} ranks, {mode}: {seconds:.1f} s/step, state {r['state_mb']:.0f} MB, "
                f"peak RSS {r['peak_mb']:.0f} MB per rank",
                flush=True,
            )
    return rows


def ray_rows(args) -> dict:
    """Seconds per training step in one process vs on 2 rollout workers, and the start."""
    from ragen.distributed import ScaleOut
    from ragen.trainer.starpo import StarPOTrainer

    out = {}
    for workers in (0, 2):
        run_dir = f"/tmp/ragen-bench-ray-{os.getpid()}-{workers}"
        tic = time.perf_counter()
        trainer = StarPOTrainer(
            _config("nano", run_dir, args.seed, f"trainer.rollout_workers={workers}"),
            scale_out=ScaleOut,
        )
        out[f"start_{workers}"] = time.perf_counter() - tic
        trainer.train_step(0)  # untimed: first weight push, chat-template probes
        times = []
        for step in range(1, 1 + args.ray_steps):
            tic = time.perf_counter()
            trainer.train_step(step)
            times.append(time.perf_counter() - tic)
        out[f"step_{workers}"] = statistics.median(times)
        trainer.logger.close()
        trainer.close()
        print(f"{workers} workers: {out[f'step_{workers}']:.2f} s/step", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--size", default="base", help="tiny model size (default base: 29.8M)")
    p.add_argument("--steps", type=int, default=2, help="timed steps per row")
    p.add_argument("--ray-steps", type=int, default=3, help="timed steps with/without Ray")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--results",
        default=None,
        help="also write the measurements to this JSON file (docs/SCALING.md's memory per "
        "rank is read from bench/results/sharding_memory.json)",
    )
    args = p.parse_args(argv)

    import ray
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("RAY_worker_niceness", "0")  # as ragen.distributed.ray_setup
    tic = time.perf_counter()
    ray.init(num_cpus=max(args.ranks) + 2, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - tic
    rows = sharding_rows(ray, args)
    extra = ray_rows(args) if args.ray_steps else {}
    ray.shutdown()

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores ({platform.processor() or '?'}), "
        f"shared with other jobs; torch threads per process: 1; ray.init: {ray_start:.1f} s"
    )
    print(
        f"workload: tiny:{args.size}, StarPO-S (actor + critic), 16 samples, one minibatch; "
        f"{args.steps} timed steps (score_batch + update) per row"
    )
    print(
        "\n| ranks | weights, gradients, AdamW | s per step | steps/s "
        "| training state per rank | peak RSS per rank |\n|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['ranks']} | {r['mode']} | {r['seconds']:.1f} | {1 / r['seconds']:.3f} "
            f"| {r['state_mb']:.0f} MB | {r['peak_mb']:.0f} MB |"
        )
    if args.results:
        from ragen.models.tiny import describe
        from ragen.trainer.config import machine_memory

        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": "OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_sharding "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{(machine_memory() or 0) / 1e9:.0f} GB, shared with other jobs",
            "workload": f"{describe(args.size)}, StarPO-S (actor + critic, fp32, AdamW), 16 "
            f"samples, one minibatch; {args.steps} timed steps (score_batch + update) per "
            "row after one untimed; peak RSS = Linux VmHWM over the timed steps",
            "rows": rows,
            **({"ray": extra} if extra else {}),
        }
        Path(args.results).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.results}")
    if extra:
        print(
            "\n| training step (nano, 4 groups x 4) | s |\n|---|---|\n"
            f"| in one process | {extra['step_0']:.2f} |\n"
            f"| 2 rollout workers (Ray) | {extra['step_2']:.2f} |\n"
            f"| trainer start, one process | {extra['start_0']:.1f} |\n"
            f"| trainer start with 2 workers (Ray running) | {extra['start_2']:.1f} |"
        )


if __name__ == "__main__":
    main()
