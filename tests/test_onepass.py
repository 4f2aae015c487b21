"""The rebuilt RL step (docs/SPEED.md) trains the same numbers as the unoptimized one.

A seeded step in the demo's shape (FrozenLake, StarPO-S with its critic, one state per
turn, one optimizer step per step, groups whose episodes share their first prompt) runs
twice: as rebuilt, and with every rebuild switched off (separate old-log-prob and value
passes, ``trainer.fuse_passes=false``; every prompt prefilled, no identical rows or
prompts computed once). The stated tolerance: metrics within 1e-5 (absolute) + 1e-4
(relative), weights within 1e-5: float rounding of kernels run on other shapes (the
grouped training forward), nothing more: the same episodes are played, the same rows
trained. Over more steps that rounding grows (Adam scales every gradient component to
about the learning rate, so a 1e-7 difference in a component near 0 can become 1e-4 of
a weight, and the next step's values and advantages follow): runs then agree in
distribution, not in digits. The fused passes and the engine's prompt dedupe alone
change no digit (the second test: two steps, 1e-6).
"""

import pytest
import torch

from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer

SKIP = ("timing/", "perf/")


def _run(model_dir, run_dir, steps: int, *extra):
    cfg = load_config(
        [
            "env=frozen_lake",
            "algo=starpo-s",
            "model=tiny",
            f"model.path={model_dir}",
            "model.device=cpu",  # float32 numbers on any machine
            "rollout.env_groups=3",
            "rollout.group_size=4",
            "rollout.max_turns=3",
            "rollout.max_actions_per_turn=1",
            "rollout.context_window=0",
            "rollout.max_new_tokens=12",
            "rollout.prompt_style=compact",
            "algo.ppo_mini_batch_size=36",  # 3 x 4 episodes x 3 turns: one optimizer step
            "algo.filter.value=1.0",  # every group trained: more rows, more copies
            "trainer.reasoning_samples=0",
            "trainer.console=false",
            "trainer.tensorboard=false",
            "trainer.save_trajectories=false",
            f"trainer.run_dir={run_dir}",
            *extra,
        ]
    )
    trainer = StarPOTrainer(cfg)
    try:
        metrics = [trainer.train_step(step) for step in range(steps)]
        weights = [p.detach().clone() for p in trainer.actor.parameters()]
        weights += [p.detach().clone() for p in trainer.critic.parameters()]
        stats = trainer.engine.stats.as_dict()
    finally:
        trainer.logger.close()
        trainer.close()
    return metrics, weights, stats


def test_rebuilt_step_matches_the_unoptimized_step(tiny_model_dir, tmp_path, monkeypatch):
    from ragen.engines.hf import HFEngine
    from ragen.models import logprobs

    fast, fast_weights, fast_stats = _run(tiny_model_dir, tmp_path / "fast", 1)
    monkeypatch.setattr(HFEngine, "dedupe_prompts", False)
    monkeypatch.setattr(logprobs, "MIN_SAVED_SHARE", 2.0)  # no copies ever worth it
    slow, slow_weights, slow_stats = _run(
        tiny_model_dir, tmp_path / "slow", 1, "trainer.fuse_passes=false"
    )
    # the rebuilt step took its shortcuts, the other did not
    assert fast_stats["duplicate_prompts"] > 0 and slow_stats["duplicate_prompts"] == 0
    assert all("timing/old_log_prob" not in m for m in fast)
    assert all("timing/old_log_prob" in m for m in slow)
    # the fused critic update is a phase of its own in the step's time
    assert all("timing/critic" in m and "timing/critic" not in n for m, n in zip(fast, slow))
    for m in fast:
        assert m["timing/step"] == pytest.approx(
            sum(v for k, v in m.items() if k.startswith("timing/") and k != "timing/step")
        )
    _assert_same(fast, slow, fast_weights, slow_weights, atol=1e-5)


def test_fused_passes_change_no_digit_over_two_steps(tiny_model_dir, tmp_path):
    fused, fused_weights, _ = _run(tiny_model_dir, tmp_path / "fused", 2)
    apart, apart_weights, _ = _run(
        tiny_model_dir, tmp_path / "apart", 2, "trainer.fuse_passes=false"
    )
    _assert_same(fused, apart, fused_weights, apart_weights, atol=1e-6)


def _assert_same(fast, slow, fast_weights, slow_weights, atol: float) -> None:
    for a, b in zip(fast, slow):
        assert "trainer/untrained_step" not in a  # the step trained
        keys = {k for k in b if not k.startswith(SKIP)}
        assert keys <= set(a)
        for k in sorted(keys):
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-5, nan_ok=True), k
    for a, b in zip(fast_weights, slow_weights):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)


def test_fuse_passes_needs_one_epoch_over_one_minibatch():
    from ragen.trainer import onepass

    cfg = load_config(["algo=starpo-s"])
    cfg.algo.ppo_mini_batch_size = 64
    assert onepass.shares_actor_forward(cfg, 64, data_parallel=False)
    assert onepass.shares_critic_forward(cfg, 64, data_parallel=False)
    assert not onepass.shares_actor_forward(cfg, 65, data_parallel=False)  # two minibatches
    assert not onepass.shares_actor_forward(cfg, 64, data_parallel=True)
    cfg.algo.ppo_epochs = 2
    assert not onepass.shares_actor_forward(cfg, 64, data_parallel=False)
    cfg.algo.ppo_epochs = 1
    cfg.algo.adv_estimator = "grpo"  # looks across rows: the critic keeps its own pass
    assert not onepass.shares_critic_forward(cfg, 64, data_parallel=False)
    cfg.algo.adv_estimator = "gae"
    cfg.algo.kl_coef = 0.001  # a reference pass: the old log-probs keep theirs
    assert not onepass.shares_actor_forward(cfg, 64, data_parallel=False)
