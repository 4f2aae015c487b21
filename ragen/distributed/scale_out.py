"""What ``trainer.rollout_workers`` and ``trainer.train_ranks`` attach to a trainer.

:class:`ScaleOut` owns the rollout worker pool and the data-parallel updater of one
:class:`~ragen.trainer.starpo.StarPOTrainer`. The trainer calls it for rollouts
(``rollout``, then ``after_rollout`` for metrics and events), reaches the updater as
its model phases (``StarPOTrainer.phases()``, ``ragen.trainer.phase_context.ModelPhases``), and
closes it when the run ends. Everything else in the trainer is the single-process code.

Where Ray would only cost time it is not used, and the log says so: one rollout worker
on a local CPU machine plays exactly what the trainer process plays (sampling is seeded
per episode), only later and on fewer cores, so its rollouts run in the trainer process
instead; ``train_sharding=fsdp`` on one rank has nothing to shard. Ray itself starts
once per process and is reused by every later trainer in it.
"""

from __future__ import annotations

import os
from typing import Any

from .data_parallel import DataParallelUpdater
from .ray_setup import actor_resources, connect
from .rollout_workers import RolloutWorkerPool


def plan(cfg: Any, device_type: str) -> tuple[int, int, list[str]]:
    """``(rollout workers, training ranks)`` this run starts, and why any differ from
    the config (lines for the log)."""
    t = cfg.trainer
    workers, ranks, notes = t.rollout_workers, t.train_ranks, []
    cluster = t.ray_address or os.environ.get("RAY_ADDRESS")
    sharded = t.train_sharding == "fsdp" and ranks > 1
    if workers == 1 and not cluster and device_type == "cpu" and not sharded:
        workers = 0
        notes.append(
            "trainer.rollout_workers=1 on this machine: rollouts run in the trainer process "
            "instead (the same samples, sampling is seeded per episode; one local worker "
            "only adds Ray's start and transfers, and gets fewer cores; docs/SCALING.md). "
            "Join a cluster (trainer.ray_address) or ask for 2+ workers to use Ray"
        )
    if t.train_sharding == "fsdp" and ranks == 1:
        notes.append(
            "trainer.train_sharding=fsdp with trainer.train_ranks=1: nothing to shard, "
            "the update runs in the trainer process (checkpoints are the same either way)"
        )
    return workers, ranks, notes


class ScaleOut:
    def __init__(self, trainer: Any):
        t = trainer.cfg.trainer
        self.trainer = trainer
        self.collector = None
        self.updater = None
        workers, ranks, notes = plan(trainer.cfg, trainer.device.type)
        for note in notes:
            print(note)
        self.ray = None
        if workers == 0 and ranks <= 1:
            return
        resources = actor_resources(t.worker_cpus, t.worker_gpus, trainer.device.type)
        wanted = resources["num_cpus"] * (workers + max(ranks - 1, 0))
        self.ray = connect(t.ray_address, logical_cpus=wanted)
        sharded = t.train_sharding == "fsdp"
        try:
            if ranks > 1:
                self.updater = DataParallelUpdater(self.ray, trainer, ranks, resources, sharded)
            if workers > 0:
                self.collector = RolloutWorkerPool(
                    self.ray,
                    workers,
                    model_path=trainer.model_path,
                    lora=trainer.cfg.model.lora if trainer.use_lora else None,
                    device="cuda" if trainer.device.type == "cuda" else "cpu",
                    dtype=trainer.dtype,
                    resources=resources,
                    batch_groups=t.worker_batch_groups,
                    engine=trainer.cfg.model.engine,
                )
                if self.updater is not None and self.updater.sharded:
                    # the trainer holds shards: the weights to push are gathered first
                    self.collector.state_source = self.updater.actor_state
        except BaseException:
            self.close()
            raise

    def rollout(self, manager: Any, config: Any, seeds: list[int]) -> Any:
        """The trainer's rollout on the workers (``config.seed``: the sample seed)."""
        return self.collector.collect(self.trainer.actor, manager, config, seeds)

    def after_rollout(self, step: int, stats: dict[str, float]) -> dict[str, float]:
        """The workers' metrics of the rollout just played; restarts become events."""
        out = {k: float(v) for k, v in stats.items() if k.startswith("scale/")}
        if self.collector is not None:
            logger = self.trainer.logger
            for event in self.collector.events:
                fields = {k: v for k, v in event.items() if k != "event"}
                logger.print(
                    f"step {step}: rollout worker {event['worker']} (pid {event['dead_pid']}) "
                    f"died; replaced by pid {event['new_pid']}, groups {event['groups']} "
                    "played again"
                )
                logger.log_event(step, event["event"], **fields)
            self.collector.events.clear()
        return out

    def close(self) -> None:
        if self.collector is not None:
            self.collector.close()
            self.collector = None
        if self.updater is not None:
            self.updater.close()
            self.updater = None
