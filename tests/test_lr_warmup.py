"""``model.warmup_steps``: the actor's learning rate ramps up linearly over the first
updates, and ``actor/lr`` logs the rate each update ran at (not the next one's)."""

from __future__ import annotations

import pytest

from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer


def test_each_update_runs_and_logs_its_share_of_the_warmup(tiny_model_dir, tmp_path):
    cfg = load_config(
        [
            "env=frozen_lake",
            "algo=drgrpo",
            "model=tiny",
            f"model.path={tiny_model_dir}",
            "model.device=cpu",
            "model.actor_lr=3e-4",
            "model.warmup_steps=3",
            "algo.ppo_mini_batch_size=4",
            "rollout.env_groups=2",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=8",
            "rollout.prompt_style=compact",
            "trainer.reasoning_samples=0",
            "trainer.console=false",
            "trainer.tensorboard=false",
            "trainer.save_trajectories=false",
            f"trainer.run_dir={tmp_path / 'run'}",
        ]
    )
    trainer = StarPOTrainer(cfg)
    try:
        for step, share in enumerate([1 / 3, 2 / 3, 1.0, 1.0]):
            ran_at = trainer.actor_opt.param_groups[0]["lr"]  # what this update uses
            metrics = trainer.train_step(step)
            assert ran_at == pytest.approx(3e-4 * share)
            assert metrics["actor/lr"] == pytest.approx(ran_at)
    finally:
        trainer.close()
