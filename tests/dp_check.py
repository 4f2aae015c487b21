"""Shared helpers of the data-parallel equivalence tests: capture the gradients an
optimizer step starts from (BEFORE clipping: a uniform scale error, such as averaging
over ranks instead of summing, disappears after clipping and under Adam), and compare
them with the one-process ones."""

import contextlib
import copy

import torch

from ragen.trainer.config import load_config


@contextlib.contextmanager
def preclip_grads():
    """Record, in this process, every parameter list's gradients as
    ``clip_grad_norm_`` receives them (a sharded parameter: this rank's shard)."""
    from torch.distributed.tensor import DTensor

    captured: list[list[torch.Tensor]] = []
    original = torch.nn.utils.clip_grad_norm_

    def capture(parameters, *args, **kwargs):
        parameters = list(parameters)
        grads = []
        for p in parameters:
            g = p.grad
            if isinstance(g, DTensor):
                g = g.to_local()
            grads.append(None if g is None else g.detach().clone())
        captured.append(grads)
        return original(parameters, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = capture
    try:
        yield captured
    finally:
        torch.nn.utils.clip_grad_norm_ = original


def shard_of(full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s dim-0 shard of ``full`` as FSDP2 cuts it (``torch.chunk``)."""
    chunks = torch.chunk(full, world, dim=0)
    return chunks[rank] if rank < len(chunks) else full[:0]


def assert_same_grads(one, other, rtol=1e-4, atol=1e-7, world=1, later=None):
    """Every captured gradient of ``other`` equals the one-process gradient of ``one``
    (with ``world`` > 1, ``other`` holds rank 0's FSDP shards). ``later``: the
    ``(rtol, atol)`` for the steps after the first two (actor and critic), whose weights
    already differ by the previous step's rounding; default: the same as the first."""
    assert len(one) == len(other) and len(one) > 0
    for step, (g1, g2) in enumerate(zip(one, other)):
        if step == 2 and later is not None:
            rtol, atol = later
        assert len(g1) == len(g2), step
        for i, (a, b) in enumerate(zip(g1, g2)):
            assert (a is None) == (b is None), (step, i)
            if a is None:
                continue
            if world > 1:
                a = shard_of(a, 0, world)
            assert a.shape == b.shape, (step, i, a.shape, b.shape)
            assert torch.allclose(a, b, rtol=rtol, atol=atol), (
                f"minibatch step {step}, parameter {i}: max |diff| {(a - b).abs().max():.3g}, "
                f"ratio {(b.norm() / a.norm().clamp_min(1e-30)):.4f}"
            )


def state_of(trainer):
    """Deep copies of the one-process state (weights and optimizer state)."""
    out = {"actor": trainer.actor.state_dict(), "actor_opt": trainer.actor_opt.state_dict()}
    if trainer.critic is not None:
        out["critic"] = trainer.critic.state_dict()
        out["critic_opt"] = trainer.critic_opt.state_dict()
    return copy.deepcopy(out)


def restore(actor, critic, optimizers, state):
    """Put :func:`state_of`'s copy into (whole) models and optimizers."""
    actor.load_state_dict(state["actor"])
    optimizers["actor"].load_state_dict(state["actor_opt"])
    if critic is not None:
        critic.load_state_dict(state["critic"])
        optimizers["critic"].load_state_dict(state["critic_opt"])


def update_config(model_dir, run_dir, *extra):
    """StarPO with a critic and the KL loss (every loss term), gradients clipped in every
    step (the blind spot the pre-clip check closes)."""
    return load_config(
        [
            "env=sokoban",
            "algo=starpo",
            f"model.path={model_dir}",
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
            "algo.grad_clip=1e-3",
            "trainer.console=false",
            "trainer.tensorboard=false",
            f"trainer.run_dir={run_dir}",
            *extra,
        ]
    )


def prepared(trainer):
    """One scored batch with advantages, rows 0 and 1 cut short so that every
    aggregation mode weighs the rows differently."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a value head that is not all zeros
        for p in trainer.critic.score.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    result = trainer.rollout(trainer.train_envs, trainer.train_envs.seeds_for_step(0), 1.0, 0)
    kept = [t for t in result.trajectories if t.num_response_tokens > 0]
    batch = trainer.prepare_batch(kept)
    trainer.score_batch(batch, {})
    trainer.compute_advantages(batch, {})
    for row, keep in ((0, 0.8), (1, 0.5)):
        pos = batch.response_mask[row].nonzero()[:, 0]
        for mask in (batch.response_mask, batch.advantage_mask):
            mask[row, pos[int(keep * len(pos)) :]] = 0.0
    return batch
