"""``trainer.critic_warmup``: the first steps train the critic alone; ``algo.critic_epochs``:
the critic makes more passes over a step than the actor."""

from __future__ import annotations

import pytest

from ragen.errors import ConfigError
from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer


def _config(model_dir, run_dir, *extra):
    return load_config(
        [
            "env=frozen_lake",
            "algo=starpo-s",
            "model=tiny",
            f"model.path={model_dir}",
            "model.device=cpu",
            "rollout.env_groups=2",
            "rollout.group_size=4",
            "rollout.max_turns=3",
            "rollout.context_window=0",
            "rollout.max_new_tokens=12",
            "rollout.prompt_style=compact",
            "algo.filter.value=1.0",
            "trainer.reasoning_samples=0",
            "trainer.console=false",
            "trainer.tensorboard=false",
            "trainer.save_trajectories=false",
            f"trainer.run_dir={run_dir}",
            *extra,
        ]
    )


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


def _moved(before, model) -> bool:
    return any(not b.equal(p) for b, p in zip(before, model.parameters()))


@pytest.mark.parametrize("fused", ["true", "false"])
def test_the_actor_waits_while_the_critic_learns(tiny_model_dir, tmp_path, fused):
    cfg = _config(
        tiny_model_dir, tmp_path / "run", "trainer.critic_warmup=2",
        "algo.ppo_mini_batch_size=24", f"trainer.fuse_passes={fused}",
    )  # fmt: skip
    trainer = StarPOTrainer(cfg)
    try:
        lr0 = trainer.actor_sched.get_last_lr()[0]
        for step in range(3):
            actor, critic = _weights(trainer.actor), _weights(trainer.critic)
            metrics = trainer.train_step(step)
            warming = step < 2
            assert metrics["trainer/critic_warmup"] == float(warming)
            assert _moved(critic, trainer.critic)  # the critic trains every step
            assert _moved(actor, trainer.actor) != warming
            assert ("actor/pg_loss" in metrics) != warming
            assert "critic/value_loss" in metrics
        # the actor's lr schedule stood still until its first update
        assert trainer.actor_sched.last_epoch == 1 and lr0 == trainer.actor_sched.get_last_lr()[0]
    finally:
        trainer.close()


def test_a_warmup_steps_batch_is_never_trained_on_again(tiny_model_dir, tmp_path):
    # reuse after the warm-up would train the actor on log-probs the warm-up never filled
    cfg = _config(
        tiny_model_dir, tmp_path / "run", "trainer.critic_warmup=1",
        "trainer.rollout_reuse=2", "algo.ppo_mini_batch_size=24",
    )  # fmt: skip
    trainer = StarPOTrainer(cfg)
    try:
        first, second = trainer.train_step(0), trainer.train_step(1)
        assert first["trainer/critic_warmup"] == 1.0 and "rollout/reuse_age" not in first
        assert second["rollout/reuse_age"] == 0.0  # a fresh rollout, not step 0's batch
        assert "actor/pg_loss" in second and "rollout/success_rate" in second
    finally:
        trainer.close()


def test_critic_warmup_needs_a_critic(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="trainer.critic_warmup.*no critic"):
        _config(tiny_model_dir, tmp_path / "run", "algo=grpo", "trainer.critic_warmup=3")


def _optimizer_steps(optimizer) -> int:
    return max(int(state["step"]) for state in optimizer.state.values())


@pytest.mark.parametrize("minibatch", [24, 8])
def test_critic_epochs_give_the_critic_more_passes_than_the_actor(
    tiny_model_dir, tmp_path, minibatch
):
    cfg = _config(
        tiny_model_dir, tmp_path / "run", "algo.critic_epochs=3",
        f"algo.ppo_mini_batch_size={minibatch}",
    )  # fmt: skip
    trainer = StarPOTrainer(cfg)
    try:
        metrics = trainer.train_step(0)
        per_epoch = -(-int(metrics["perf/num_trained_samples"]) // minibatch)
        assert _optimizer_steps(trainer.actor_opt) == per_epoch
        assert _optimizer_steps(trainer.critic_opt) == 3 * per_epoch
    finally:
        trainer.close()
