"""Scale-out costs on this machine: rollout workers, weight sync, data-parallel update.

Run from the repository root (needs the ``scale`` extra: ``pip install -e '.[scale]'``)::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_scaling            # demo workload, 3 rounds
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_scaling --rounds 1 --groups 4

Workload: the demo's Sokoban RL rollout (``ragen.demo``: tiny:nano, 16 groups x 4,
10 turns, one action per turn, windowed context, its reply format and token budget),
played by the randomly initialized nano model (no SFT warm start, so replies tend to run
to the token limit: more generation per turn than the warmed demo policy).

Every measurement runs ``--rounds`` times, the variants interleaved round-robin, so a
neighbour's load hits all of them alike; the table gives medians and the ratios of
medians. Rows:

* ``rollout in-process`` -- ``trainer.rollout_workers=0``: one generate call per turn
  for all 64 episodes (one thread);
* ``rollout in batches, in-process`` -- the same episodes in generate batches of
  ``--batch-groups`` groups (``ragen.distributed.rollout_workers.rollout_groups``; the
  same samples, sampling is seeded per episode): the cost of smaller batches, no Ray;
* ``rollout 1 worker`` / ``2 workers`` -- ``RolloutWorkerPool`` (one thread each);
* ``weight sync`` -- pushing the changed weights to the 2 workers (what happens after
  every update), and its size;
* ``control: 2 processes vs 1`` -- the same matmul loop (one thread) in 1 process,
  then in 2 processes at once: how much parallel CPU this machine gives right now;
* ``update 1 rank`` / ``2 ranks`` -- ``StarPOTrainer.update`` on one batch of this
  rollout (StarPO-S: actor + critic) in this process vs ``DataParallelUpdater`` on 2 gloo
  ranks (this process + one Ray actor), each from the same starting state.

The machine is named in the output; on a shared 2-core machine "2 workers" cannot
expect 2x when neighbours use the cores.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import platform
import statistics
import time


def _matmul_loop(n: int = 2000) -> float:
    """Seconds for ``n`` 256x256 matmuls on one thread (the parallelism control)."""
    import torch

    torch.set_num_threads(1)
    x = torch.randn(256, 256)
    tic = time.perf_counter()
    for _ in range(n):
        x @ x
    return time.perf_counter() - tic


def _control() -> float:
    """Throughput of 2 processes at once over 1 process alone, same loop (2.0 = 2 cores)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.starmap(_matmul_loop, [(50,), (50,)], chunksize=1)  # both started and warm
        solo = pool.apply(_matmul_loop)
        tic = time.perf_counter()
        pool.starmap(_matmul_loop, [(), ()], chunksize=1)
        pair = time.perf_counter() - tic
    return 2 * solo / pair


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--groups", type=int, default=None, help="env groups (default: the demo's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--batch-groups", type=int, default=4, help="groups per batch of the batched row (4)"
    )
    args = p.parse_args(argv)

    import ray
    import torch

    from ragen.agent.rollout import run_rollout
    from ragen.distributed.data_parallel import DataParallelUpdater
    from ragen.distributed.rollout_workers import (
        EnvSpec,
        RolloutWorkerPool,
        rollout_groups,
        shard_manager,
        state_to_push,
    )
    from ragen.envs.base import derive_seed
    from ragen.recipes import Budget, rollout_overrides
    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    torch.set_num_threads(1)
    budget = Budget()
    groups = args.groups or budget.env_groups
    cfg = load_config(
        [
            "algo=starpo-s",
            f"model=tiny:{budget.tiny_size}",
            *rollout_overrides("sokoban", budget),
            f"rollout.env_groups={groups}",
            f"rollout.group_size={budget.group_size}",
            "algo.filter.value=1.0",  # train on every group: the update sees the whole batch
            "trainer.console=false",
            "trainer.tensorboard=false",
            f"trainer.seed={args.seed}",
            f"trainer.run_dir=/tmp/ragen-bench-scaling-{os.getpid()}",
        ]
    )
    trainer = StarPOTrainer(cfg)
    os.environ.setdefault("RAY_worker_niceness", "0")  # as ragen.distributed.ray_setup
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    resources = {"num_cpus": 1.0, "num_gpus": 0.0}
    pools = {
        n: RolloutWorkerPool(ray, n, trainer.model_path, None, "cpu", trainer.dtype, resources)
        for n in (1, 2)
    }
    seeds = trainer.train_envs.seeds_for_step(0)
    rcfg = dataclasses.replace(cfg.rollout, seed=derive_seed(args.seed, "rollout", 0))
    spec = EnvSpec.of(trainer.train_envs)
    managers = {}

    def manager_for(n):
        if n not in managers:
            managers[n] = shard_manager(spec, n)
        return managers[n]

    def in_process():
        return run_rollout(trainer.policy, trainer.train_envs, rcfg, seeds)

    def groups_in_process():
        everything = list(range(groups))
        return rollout_groups(
            trainer.policy, manager_for, rcfg, everything, seeds, args.batch_groups
        )

    rollouts = {
        "rollout in-process": in_process,
        "rollout in batches, in-process": groups_in_process,
        "rollout 1 worker": lambda: pools[1].collect(
            trainer.actor, trainer.train_envs, rcfg, seeds
        ),
        "rollout 2 workers": lambda: pools[2].collect(
            trainer.actor, trainer.train_envs, rcfg, seeds
        ),
    }
    for pool in pools.values():
        pool.sync(trainer.actor)  # the first push is not part of a rollout's time
    for fn in rollouts.values():  # warm-up, untimed: chat-template probe, env managers
        fn()
    times: dict[str, list[float]] = {k: [] for k in rollouts}
    tokens: dict[str, float] = {}
    result = None
    control = []
    for r in range(args.rounds):
        control.append(_control())
        print(f"round {r + 1} control: 2 processes = {control[-1]:.2f}x one", flush=True)
        for name, fn in rollouts.items():
            tic = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - tic)
            tokens[name] = out.stats["generated_tokens"]
            if name == "rollout in-process":
                result = out
            print(f"round {r + 1} {name}: {times[name][-1]:.1f} s", flush=True)

    # weight sync: change the weights in place (as an optimizer step does) and push
    sync_times = []
    size_mb = sum(
        t.numel() * t.element_size() for t in state_to_push(trainer.actor, False).values()
    )
    for _ in range(max(3, args.rounds)):
        with torch.no_grad():
            for p_ in trainer.actor.parameters():
                p_.mul_(1.0)
        sync_times.append(pools[2].sync(trainer.actor))
    for pool in pools.values():
        pool.close()

    # the update: one batch from the in-process rollout, 1 rank vs 2 ranks
    kept = [t for t in result.trajectories if t.num_response_tokens > 0]
    batch = trainer.prepare_batch(kept)
    trainer.score_batch(batch, {})
    trainer.compute_advantages(batch, {})
    start = copy.deepcopy(
        [trainer.actor.state_dict(), trainer.critic.state_dict(),
         trainer.actor_opt.state_dict(), trainer.critic_opt.state_dict()]
    )  # fmt: skip

    def restore():
        trainer.actor.load_state_dict(start[0])
        trainer.critic.load_state_dict(start[1])
        trainer.actor_opt.load_state_dict(start[2])
        trainer.critic_opt.load_state_dict(start[3])

    updater = DataParallelUpdater(ray, trainer, 2, resources)
    updates = {
        "update 1 rank": lambda step: trainer.update(batch, step),
        "update 2 ranks": lambda step: updater.update(batch, step),
    }
    utimes: dict[str, list[float]] = {k: [] for k in updates}
    broadcast = []
    for r in range(args.rounds):
        for name, fn in updates.items():
            restore()  # the same start; on 2 ranks the next update broadcasts it first
            fn(0)  # untimed: includes that broadcast
            tic = time.perf_counter()
            out = fn(1)  # timed: a steady-state update, as every step after the first
            utimes[name].append(time.perf_counter() - tic)
            if name == "update 2 ranks":
                broadcast.append(out["scale/state_broadcast"])
            print(f"round {r + 1} {name}: {utimes[name][-1]:.1f} s", flush=True)
    updater.close()
    ray.shutdown()
    assert not any(broadcast), "a steady-state update broadcast the state"

    med = {k: statistics.median(v) for k, v in {**times, **utimes}.items()}
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores ({platform.processor() or '?'}), "
        f"shared with other jobs; torch threads per process: 1; rounds: {args.rounds}"
    )
    print(
        f"workload: demo Sokoban rollout, tiny:{budget.tiny_size} (random init), "
        f"{groups} groups x {budget.group_size}, {cfg.rollout.max_turns} turns, "
        f"max_new_tokens {cfg.rollout.max_new_tokens}; update batch: {batch.size} samples, "
        f"{int(batch.attention_mask.sum())} tokens"
    )
    print("\n| measurement | median s | generated tokens/s |\n|---|---|---|")
    for name in rollouts:
        print(f"| {name} | {med[name]:.2f} | {tokens[name] / med[name]:.0f} |")
    for name in updates:
        print(f"| {name} | {med[name]:.2f} | |")
    print(
        f"| weight sync to 2 workers ({size_mb / 1e6:.1f} MB) | {statistics.median(sync_times):.3f} | |"
    )
    print(
        "| control: matmul loop, 2 processes at once vs 1 alone | "
        f"{statistics.median(control):.2f}x the throughput | |"
    )
    print("\nratios (of medians):")
    print(
        f"  rollout 2 workers vs 1 worker: {med['rollout 1 worker'] / med['rollout 2 workers']:.2f}x"
    )
    print(
        "  rollout 2 workers vs in-process: "
        f"{med['rollout in-process'] / med['rollout 2 workers']:.2f}x"
    )
    print(
        f"  batches of {args.batch_groups} groups vs one batch, in-process: "
        f"{med['rollout in batches, in-process'] / med['rollout in-process']:.2f}x the time"
    )
    print(
        "  weight sync per step / 2-worker rollout: "
        f"{statistics.median(sync_times) / med['rollout 2 workers']:.3f}"
    )
    print(f"  update 2 ranks vs 1 rank: {med['update 1 rank'] / med['update 2 ranks']:.2f}x")


if __name__ == "__main__":
    main()
