"""Rollout freshness (``trainer.rollout_reuse``): a rollout's batch trains N steps."""

import pytest
import torch

from ragen.errors import ConfigError
from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer


def _trainer(model_dir, run_dir, reuse, *extra):
    cfg = load_config(
        [
            "env=bandit",
            "algo=starpo",
            f"model.path={model_dir}",
            "model.device=cpu",
            "model.actor_lr=1e-3",
            "rollout.max_turns=1",
            "rollout.env_groups=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "algo.ppo_mini_batch_size=4",
            "trainer.total_steps=4",
            "trainer.val_every=0",
            "trainer.save_every=0",
            "trainer.reasoning_samples=0",
            "trainer.console=false",
            "trainer.tensorboard=false",
            f"trainer.run_dir={run_dir}",
            f"trainer.rollout_reuse={reuse}",
            *extra,
        ]
    )
    return StarPOTrainer(cfg)


def test_reused_step_after_a_fused_step_trains_on_the_kept_behaviour_log_probs(
    tiny_model_dir, tmp_path
):
    """A fresh step whose scoring was the update's own forward (``ragen.trainer.onepass``:
    one epoch, one minibatch, a critic, no KL) is followed by a reuse step that runs the
    whole update: the actor's ratio is against the fresh step's log-probs (not 1), and
    the critic trains again (its metrics are its own, not the fresh step's)."""
    fused = ("algo=starpo-s", "algo.filter.value=1.0", "model.critic_lr=1e-3")
    trainer = _trainer(tiny_model_dir, tmp_path / "run", 2, *fused)
    try:
        fresh, reused = trainer.train_step(0), trainer.train_step(1)
    finally:
        trainer.logger.close()
        trainer.close()
    assert "timing/old_log_prob" not in fresh  # the fused path ran
    assert reused["rollout/reuse_age"] == 1.0
    assert reused["actor/ppo_kl"] != 0.0
    assert reused["critic/value_loss"] != fresh["critic/value_loss"]


def test_reused_rollout_trains_again_without_rolling_out(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path / "run", reuse=2)
    rollouts, batches, weights = [], [], []
    real_rollout, real_update = trainer.rollout, trainer.update

    def count_rollout(*args, **kwargs):
        rollouts.append(len(weights))
        return real_rollout(*args, **kwargs)

    def keep_batch(batch, step):
        batches.append(batch)
        out = real_update(batch, step)
        weights.append(trainer.actor.lm_head.weight.detach().clone())
        return out

    trainer.rollout, trainer.update = count_rollout, keep_batch
    history = trainer.train()
    assert rollouts == [0, 2]  # fresh rollouts before the 1st and 3rd update only
    assert len(batches) == 4 and batches[1] is batches[0] and batches[3] is batches[2]
    assert batches[2] is not batches[0]
    assert not torch.equal(weights[0], weights[1])  # the reused step still updates
    ages = [h.get("rollout/reuse_age") for h in history]
    assert ages == [0.0, 1.0, 0.0, 1.0]
    # rollout metrics belong to the steps that rolled out
    assert ["rollout/success_rate" in h for h in history] == [True, False, True, False]


def test_rollout_reuse_must_be_positive():
    with pytest.raises(ConfigError, match="trainer.rollout_reuse"):
        load_config(["trainer.rollout_reuse=0"])
