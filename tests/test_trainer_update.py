"""The trainer's update on a real rollout: micro-batching never changes the loss or the
gradient, truncated episodes bootstrap from the critic, and masked_gae gets its M_adv."""

import pytest
import torch

from ragen.trainer import update
from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer


def _trainer(model_dir, run_dir, *extra):
    cfg = load_config(
        [
            "env=sokoban",
            "algo=starpo",
            f"model.path={model_dir}",
            # float32 on the CPU on any machine: these tests compare numbers at 1e-4, and
            # CUDA's bf16 autocast would be the comparison's noise, not the trainer's
            "model.device=cpu",
            "rollout.env_groups=2",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=12",
            "rollout.max_model_len=1024",
            "algo.ppo_mini_batch_size=4",
            "algo.kl_coef=0.01",
            "trainer.console=false",
            "trainer.tensorboard=false",
            f"trainer.run_dir={run_dir}",
            *extra,
        ]
    )
    return StarPOTrainer(cfg)


def _prepared(trainer):
    """A real rollout, filtered to trainable samples, up to the advantages. The critic's
    value head (zero at creation) gets seeded random weights, so values are not all 0."""
    if trainer.critic is not None:
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in trainer.critic.score.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
    result = trainer.rollout(trainer.train_envs, trainer.train_envs.seeds_for_step(0), 1.0, 0)
    kept = [t for t in result.trajectories if t.num_response_tokens > 0]
    batch = trainer.prepare_batch(kept)
    metrics = {}
    trainer.compute_old_log_probs(batch, metrics)
    if trainer.critic is not None:
        trainer.compute_values(batch)
    trainer.compute_advantages(batch, metrics)
    return kept, batch


def _grads_of_one_minibatch(trainer, batch, budget, monkeypatch):
    """Loss metrics and gradients of one minibatch over all rows, micro-batched by
    ``budget`` padded tokens; the optimizer step is replaced by a capture."""
    captured = {}

    def capture(ctx, model, optimizer, prefix, nonfinite=""):
        captured[prefix] = [
            p.grad.detach().clone() for p in model.parameters() if p.grad is not None
        ]
        optimizer.zero_grad(set_to_none=True)
        return {}

    monkeypatch.setattr(update, "optimizer_step", capture)
    trainer.cfg.algo.micro_token_budget = budget
    ctx = trainer.context()
    rows = list(range(batch.size))
    micros = ctx.micro_batches(batch, rows)
    actor = update.actor_minibatch(ctx, batch, rows, micros)
    critic = update.critic_minibatch(ctx, batch, rows, micros) if trainer.critic else {}
    return len(micros), {**actor, **critic}, captured


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_accumulated_micro_batches_equal_one_batch(tiny_model_dir, tmp_path, mode, monkeypatch):
    trainer = _trainer(tiny_model_dir, tmp_path / "run", f"algo.loss_agg_mode={mode}")
    _, batch = _prepared(trainer)
    # uneven rows (the random model fills every turn's budget): drop the tail of row 0's
    # response, half of row 1's, and all of row 2's, so every mode weighs rows differently
    for row, keep in ((0, 0.8), (1, 0.5), (2, 0.0)):
        pos = batch.response_mask[row].nonzero()[:, 0]
        dropped = pos[int(keep * len(pos)) :]
        for mask in (batch.response_mask, batch.advantage_mask):
            mask[row, dropped] = 0.0
    n_one, one, grads_one = _grads_of_one_minibatch(trainer, batch, 10**9, monkeypatch)
    n_many, many, grads_many = _grads_of_one_minibatch(trainer, batch, 1, monkeypatch)
    assert n_one == 1 and n_many == batch.size  # one row per micro-batch
    for key in ("actor/pg_loss", "actor/entropy_loss", "actor/kl_loss", "critic/value_loss"):
        assert many[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    for prefix in ("actor", "critic"):
        for g1, g2 in zip(grads_one[prefix], grads_many[prefix]):
            assert (g1 - g2).norm() <= 1e-4 * g1.norm() + 1e-8, prefix


def test_truncated_episodes_bootstrap_from_the_critic(tiny_model_dir, tmp_path):
    # 1 turn per episode: every episode ends at the turn limit (or terminates)
    common = ("rollout.max_turns=1", "algo.gamma=1.0", "algo.lam=1.0")
    terminal = _trainer(tiny_model_dir, tmp_path / "a", *common)
    kept, batch = _prepared(terminal)
    assert batch.bootstrap_mask.sum() == 0  # the budget is terminal by default
    open_ended = _trainer(tiny_model_dir, tmp_path / "b", *common, "algo.budget_is_terminal=false")
    kept2, batch2 = _prepared(open_ended)
    at_limit = torch.tensor([t.end_reason == "turn_limit" for t in kept2])
    assert at_limit.any()
    assert torch.equal(batch2.bootstrap_mask.bool(), at_limit)
    # gamma = lam = 1: A_t = R + bootstrap - V_t, so the difference is the bootstrap value
    diff = (batch2.advantages - batch.advantages) * batch.response_mask
    expected = (batch2.final_values * at_limit)[:, None] * batch.response_mask
    assert torch.allclose(diff, expected, atol=1e-5)
    assert batch2.final_values[at_limit].abs().sum() > 0  # a real value, not zero


def test_masked_gae_runs_over_turn_close_tokens(tiny_model_dir, tmp_path):
    base = ("algo.adv_estimator=masked_gae", "algo.gamma=0.9", "algo.lam=0.8")
    plain = _trainer(tiny_model_dir, tmp_path / "a", *base)
    _, response_only = _prepared(plain)
    gae = _trainer(tiny_model_dir, tmp_path / "c", "algo.gamma=0.9", "algo.lam=0.8")
    _, with_gae = _prepared(gae)
    # M_adv = M_loss: masked_gae is gae exactly
    assert torch.equal(response_only.advantages, with_gae.advantages)
    wide = _trainer(
        tiny_model_dir, tmp_path / "b", *base, "algo.advantage_tokens=response_and_turn_end"
    )
    kept, with_close = _prepared(wide)
    close = with_close.advantage_mask - with_close.response_mask
    assert close.sum() > 0 and close.min() >= 0  # turn-close tokens joined the recursion
    assert not torch.equal(response_only.advantages, with_close.advantages)
    # rows without a turn-close token (single-turn episodes) are unchanged
    no_close = close.sum(-1) == 0
    assert torch.equal(response_only.advantages[no_close], with_close.advantages[no_close])
    # the policy still trains on sampled ids only
    assert (with_close.advantages * (1 - with_close.response_mask)).abs().sum() == 0


def test_advantage_tokens_need_an_estimator_that_takes_the_mask(tmp_path):
    from ragen.errors import ConfigError

    with pytest.raises(ConfigError, match="algo.advantage_tokens"):
        load_config(["algo.advantage_tokens=response_and_turn_end", "algo.adv_estimator=gae"])
