"""Data-parallel updates: 2 torch.distributed ranks (gloo, this process + a Ray actor)
give the same gradients, new weights and metrics as one process on the same batch, in
every loss aggregation mode; rank 0's state reaches the other rank whenever it changed
outside an update."""

import copy

import pytest
import torch

ray = pytest.importorskip("ray")

from ragen.distributed.data_parallel import DataParallelUpdater  # noqa: E402
from ragen.trainer.config import load_config  # noqa: E402
from ragen.trainer.starpo import StarPOTrainer  # noqa: E402

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.fixture(scope="module")
def setup(local_ray, tiny_model_dir, tmp_path_factory):
    """A StarPO trainer (critic + KL loss: every loss term), one prepared batch, and a
    2-rank updater attached to it."""
    cfg = load_config(
        [
            "env=sokoban",
            "algo=starpo",
            f"model.path={tiny_model_dir}",
            "model.actor_lr=1e-3",
            "model.critic_lr=1e-3",
            "rollout.env_groups=2",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=12",
            "rollout.max_model_len=1024",
            "algo.ppo_mini_batch_size=2",  # 2 optimizer steps per epoch
            "algo.micro_token_budget=1",  # one row per micro-batch
            "algo.kl_coef=0.01",
            "algo.kl_in_reward=false",
            "trainer.console=false",
            "trainer.tensorboard=false",
            f"trainer.run_dir={tmp_path_factory.mktemp('dp') / 'run'}",
        ]
    )
    trainer = StarPOTrainer(cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a value head that is not all zeros
        for p in trainer.critic.score.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    result = trainer.rollout(trainer.train_envs, trainer.train_envs.seeds_for_step(0), 1.0, 0)
    kept = [t for t in result.trajectories if t.num_response_tokens > 0]
    batch = trainer.prepare_batch(kept)
    trainer.compute_old_log_probs(batch, {})
    trainer.compute_values(batch)
    trainer.compute_advantages(batch, {})
    # uneven rows, so that every aggregation mode weighs them differently
    for row, keep in ((0, 0.8), (1, 0.5)):
        pos = batch.response_mask[row].nonzero()[:, 0]
        for mask in (batch.response_mask, batch.advantage_mask):
            mask[row, pos[int(keep * len(pos)) :]] = 0.0
    start = _state(trainer)
    updater = DataParallelUpdater(local_ray, trainer, 2, {"num_cpus": 1.0, "num_gpus": 0.0})
    yield trainer, batch, start, updater
    updater.close()


def _state(trainer):
    return copy.deepcopy(
        {
            "actor": trainer.actor.state_dict(),
            "critic": trainer.critic.state_dict(),
            "actor_opt": trainer.actor_opt.state_dict(),
            "critic_opt": trainer.critic_opt.state_dict(),
        }
    )


def _restore(trainer, state):
    trainer.actor.load_state_dict(state["actor"])
    trainer.critic.load_state_dict(state["critic"])
    trainer.actor_opt.load_state_dict(state["actor_opt"])
    trainer.critic_opt.load_state_dict(state["critic_opt"])


def _update_capturing_grads(trainer, run):
    """Run ``run()`` (an update) and return its metrics and every gradient the optimizers
    stepped with (after clipping)."""
    grads = []
    originals = {}
    for name in ("actor_opt", "critic_opt"):
        opt = getattr(trainer, name)
        originals[name] = opt.step

        def step(*args, _opt=opt, _name=name, **kwargs):
            params = [p for g in _opt.param_groups for p in g["params"] if p.grad is not None]
            grads.append((_name, [p.grad.detach().clone() for p in params]))
            return originals[_name](*args, **kwargs)

        opt.step = step
    try:
        metrics = run()
    finally:
        for name, fn in originals.items():
            getattr(trainer, name).step = fn
    return metrics, grads


@pytest.mark.parametrize(
    "mode,minibatch",
    [(mode, 2) for mode in MODES]
    + [("seq-mean-token-mean", 3)],  # minibatches of 3 and 1 rows: rank 1 gets none in one
)
def test_two_ranks_update_equals_one_process(setup, mode, minibatch):
    trainer, batch, start, updater = setup
    trainer.cfg.algo.loss_agg_mode = mode  # the ranks receive the config with each update
    trainer.cfg.algo.ppo_mini_batch_size = minibatch
    _restore(trainer, start)
    one, grads_one = _update_capturing_grads(trainer, lambda: trainer.update(batch, 0))
    weights_one = _state(trainer)
    _restore(trainer, start)  # changed outside an update: rank 0 broadcasts it first
    two, grads_two = _update_capturing_grads(trainer, lambda: updater.update(batch, 0))
    assert two["scale/state_broadcast"] == 1.0
    assert len(grads_one) == len(grads_two) == 4  # 2 minibatches x (actor, critic)
    for (name1, g1), (name2, g2) in zip(grads_one, grads_two):
        assert name1 == name2 and len(g1) == len(g2)
        for a, b in zip(g1, g2):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-7), name1
    for part in ("actor", "critic"):
        for key, w in weights_one[part].items():
            assert torch.allclose(w, trainer.__getattribute__(part).state_dict()[key], atol=1e-6)
    for key in (
        "actor/pg_loss",
        "actor/entropy_loss",
        "actor/entropy",
        "actor/kl_loss",
        "actor/pg_clipfrac",
        "actor/grad_norm_mean",
        "critic/value_loss",
        "critic/grad_norm_max",
    ):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key


def test_the_next_update_needs_no_broadcast_and_stays_equal(setup):
    trainer, batch, start, updater = setup
    trainer.cfg.algo.loss_agg_mode = "token-mean"
    trainer.cfg.algo.ppo_mini_batch_size = 2
    _restore(trainer, start)
    trainer.update(batch, 0)
    trainer.update(batch, 1)
    expected = _state(trainer)["actor"]
    _restore(trainer, start)
    updater.update(batch, 0)
    second = updater.update(batch, 1)
    assert second["scale/state_broadcast"] == 0.0  # the ranks stepped in lockstep
    for key, w in expected.items():
        assert torch.allclose(w, trainer.actor.state_dict()[key], atol=1e-6), key
