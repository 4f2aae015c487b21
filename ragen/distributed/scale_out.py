"""What ``trainer.rollout_workers`` and ``trainer.train_ranks`` attach to a trainer.

:class:`ScaleOut` owns the rollout worker pool and the data-parallel updater of one
:class:`~ragen.trainer.starpo.StarPOTrainer`; the trainer calls it at three points
(``rollout``, ``update``, after each rollout for metrics and events) and closes it when
the run ends. Everything else in the trainer is the single-process code.
"""

from __future__ import annotations

from typing import Any

from .ray_setup import actor_resources, connect


class ScaleOut:
    def __init__(self, trainer: Any):
        t = trainer.cfg.trainer
        self.trainer = trainer
        self.collector = None
        self.updater = None
        resources = actor_resources(t.worker_cpus, t.worker_gpus, trainer.device.type)
        wanted = resources["num_cpus"] * (t.rollout_workers + max(t.train_ranks - 1, 0))
        self.ray = connect(t.ray_address, logical_cpus=wanted)
        try:
            if t.rollout_workers > 0:
                from .rollout_workers import RolloutWorkerPool

                self.collector = RolloutWorkerPool(
                    self.ray,
                    t.rollout_workers,
                    model_path=trainer.model_path,
                    lora=trainer.cfg.model.lora if trainer.use_lora else None,
                    device="cuda" if trainer.device.type == "cuda" else "cpu",
                    dtype=trainer.dtype,
                    resources=resources,
                    batch_groups=t.worker_batch_groups,
                    engine=trainer.cfg.model.engine,
                )
            if t.train_ranks > 1:
                from .data_parallel import DataParallelUpdater

                self.updater = DataParallelUpdater(self.ray, trainer, t.train_ranks, resources)
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

    def update(self, batch: Any, step: int) -> dict[str, float]:
        return self.updater.update(batch, step)

    def close(self) -> None:
        if self.collector is not None:
            self.collector.close()
            self.collector = None
        if self.updater is not None:
            self.updater.close()
            self.updater = None
