"""FSDP2-sharded updates (``trainer.train_sharding=fsdp``): 2 gloo ranks (this process +
a Ray actor) holding shards of the actor, critic and reference give the one-process
gradients before clipping (rank 0's shards), weights and metrics; averaging instead of
summing fails the check; the ranks score their shares; a whole-state round trip (what
a checkpoint and a rollback do) is exact, and the shards really hold about half."""

import pytest
import torch
from dp_check import assert_same_grads, preclip_grads, prepared, restore, state_of, update_config

ray = pytest.importorskip("ray")

from ragen.distributed import fsdp  # noqa: E402
from ragen.distributed.data_parallel import DataParallelUpdater  # noqa: E402
from ragen.trainer.starpo import StarPOTrainer  # noqa: E402

CASES = [("token-mean", 2), ("seq-mean-token-sum-norm", 2), ("seq-mean-token-mean", 3)]
FIELDS = ("old_log_prob", "ref_log_prob", "values", "final_values")


@pytest.fixture(scope="module")
def sharded(local_ray, tiny_model_dir, tmp_path_factory):
    """One-process references for every case, computed first; then the same trainer
    sharded over 2 ranks (its models become FSDP2 modules in place). One row per
    micro-batch (``update_config``): no prompt prefix is shared, so both sides compute
    the same sums and what differs is the distribution alone."""
    run = tmp_path_factory.mktemp("fsdp") / "run"
    trainer = StarPOTrainer(update_config(tiny_model_dir, run, "trainer.train_sharding=fsdp"))
    batch = prepared(trainer)
    start = state_of(trainer)
    trainer.score_batch(batch, {})  # on the rows as cut
    scores = {name: getattr(batch, name).clone() for name in FIELDS}
    references = {}
    for mode, minibatch in CASES:
        trainer.cfg.algo.loss_agg_mode, trainer.cfg.algo.ppo_mini_batch_size = mode, minibatch
        restore(trainer.actor, trainer.critic, trainer.optimizers(), start)
        with preclip_grads() as grads:
            metrics = trainer.update(batch, 0)
        references[mode, minibatch] = (metrics, grads, state_of(trainer))
    restore(trainer.actor, trainer.critic, trainer.optimizers(), start)
    whole_before = sum(p.numel() * p.element_size() for p in trainer.actor.parameters())
    updater = DataParallelUpdater(
        local_ray, trainer, 2, {"num_cpus": 1.0, "num_gpus": 0.0}, sharded=True
    )
    yield trainer, batch, start, scores, references, updater, whole_before
    updater.close()


def _load(updater, state):
    """Put a one-process state into the shards: the rollback path."""
    with updater.whole_state(load=True) as (actor, critic, optimizers):
        restore(actor, critic, optimizers, state)


def test_models_are_sharded_per_decoder_layer(sharded):
    trainer, *_, updater, whole_before = sharded
    assert fsdp.is_sharded(trainer.actor) and fsdp.is_sharded(trainer.critic)
    assert fsdp.is_sharded(trainer.ref)  # the frozen KL reference too
    layers = fsdp.layer_units(trainer.actor)
    assert layers and all(fsdp.is_sharded(layer) for layer in layers)
    held = [b["weights"] for b in updater.memory()]
    whole = 3 * whole_before  # actor, reference and a critic of the same size
    for rank_bytes in held:  # half, plus the rounding of uneven dim-0 chunks
        assert 0.45 * whole < rank_bytes < 0.56 * whole, (rank_bytes, whole)


def test_ranks_score_their_shares(sharded):
    trainer, batch, start, scores, _, updater, _ = sharded
    _load(updater, start)
    for name in FIELDS:
        setattr(batch, name, None)
    metrics = {}
    updater.score_batch(batch, metrics)
    for name in FIELDS:
        assert torch.allclose(getattr(batch, name), scores[name], atol=1e-5), name
    assert metrics["actor/gen_logprob_max_diff"] < 1e-4


@pytest.mark.parametrize("mode,minibatch", CASES)
def test_sharded_update_equals_one_process(sharded, mode, minibatch):
    trainer, batch, start, _, references, updater, _ = sharded
    one, grads_one, weights_one = references[mode, minibatch]
    trainer.cfg.algo.loss_agg_mode, trainer.cfg.algo.ppo_mini_batch_size = mode, minibatch
    _load(updater, start)
    with preclip_grads() as grads_two:
        two = updater.update(batch, 0)
    # rank 0's shard of each gradient. The first step of each model is compared as
    # tightly as replicas are; later ones start from weights that already differ by
    # ~1e-7 (the summation order of the reduce-scatter), enough to flip a token's side
    # of the value clip, which moves its gradient by ~1e-4. A scale error is 2x.
    assert_same_grads(grads_one, grads_two, world=2, later=(1e-3, 1e-3))
    with updater.whole_state() as (actor, critic, optimizers):
        for part, model in (("actor", actor), ("critic", critic)):
            for key, w in weights_one[part].items():
                assert torch.allclose(w, model.state_dict()[key], atol=1e-6), (part, key)
        # AdamW's moments too: the one-process optimizer state, whole
        saved = optimizers["actor"].state_dict()["state"]
        for index, entry in weights_one["actor_opt"]["state"].items():
            assert torch.allclose(entry["exp_avg"], saved[index]["exp_avg"], atol=1e-7)
            assert float(entry["step"]) == float(saved[index]["step"])
    for key in ("actor/pg_loss", "actor/entropy", "actor/kl_loss", "critic/value_loss"):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key
    assert two["actor/grad_norm_mean"] == pytest.approx(one["actor/grad_norm_mean"], rel=1e-4)


def test_averaging_instead_of_summing_fails_the_preclip_check(sharded):
    """FSDP's own default, averaging, on rank 0's reduce-scatter: the gradients it
    starts its step from are halves, and the check says so."""
    trainer, batch, start, _, references, updater, _ = sharded
    _one, grads_one, _ = references["token-mean", 2]
    trainer.cfg.algo.loss_agg_mode, trainer.cfg.algo.ppo_mini_batch_size = "token-mean", 2
    _load(updater, start)
    fsdp.sum_gradients(trainer.actor, divide_by=updater.world)
    fsdp.sum_gradients(trainer.critic, divide_by=updater.world)
    try:
        with preclip_grads() as grads_two:
            updater.update(batch, 0)
    finally:
        fsdp.sum_gradients(trainer.actor)
        fsdp.sum_gradients(trainer.critic)
    with pytest.raises(AssertionError, match="ratio 0.5000"):
        assert_same_grads(grads_one, grads_two, world=2)
