"""Data-parallel updates on replicas: 2 torch.distributed ranks (gloo, this process + a
Ray actor) give the same gradients BEFORE clipping, new weights and metrics as one
process on the same batch, in every loss aggregation mode; averaging the gradients
instead of summing them fails that check (and passes every check after clipping);
the ranks score their shares of the rows to the one-process scores; rank 0's state
reaches the other rank whenever it changed outside an update."""

import pytest
import torch
from dp_check import assert_same_grads, preclip_grads, prepared, restore, state_of, update_config

ray = pytest.importorskip("ray")

import ragen.distributed.data_parallel as dp  # noqa: E402
from ragen.distributed.data_parallel import DataParallelUpdater  # noqa: E402
from ragen.trainer.starpo import StarPOTrainer  # noqa: E402

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.fixture(scope="module")
def setup(local_ray, tiny_model_dir, tmp_path_factory):
    """The trainer, its batch, its starting state, and a 2-rank updater attached to it."""
    trainer = StarPOTrainer(update_config(tiny_model_dir, tmp_path_factory.mktemp("dp") / "run"))
    batch = prepared(trainer)
    start = state_of(trainer)
    updater = DataParallelUpdater(local_ray, trainer, 2, {"num_cpus": 1.0, "num_gpus": 0.0})
    yield trainer, batch, start, updater
    updater.close()


def _restore(trainer, state):
    restore(trainer.actor, trainer.critic, trainer.optimizers(), state)


def _update(run):
    """``run()`` (an update): its metrics and the gradients its steps started from."""
    with preclip_grads() as grads:
        metrics = run()
    return metrics, grads


METRICS = (
    "actor/pg_loss",
    "actor/entropy_loss",
    "actor/entropy",
    "actor/kl_loss",
    "actor/pg_clipfrac",
    "actor/grad_norm_mean",
    "critic/value_loss",
    "critic/grad_norm_max",
)


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
    one, grads_one = _update(lambda: trainer.update(batch, 0))
    weights_one = state_of(trainer)
    _restore(trainer, start)  # changed outside an update: rank 0 broadcasts it first
    two, grads_two = _update(lambda: updater.update(batch, 0))
    assert two["scale/state_broadcast"] == 1.0
    assert len(grads_one) == len(grads_two) == 4  # 2 minibatches x (actor, critic)
    assert_same_grads(grads_one, grads_two)
    assert one["actor/grad_norm_mean"] > trainer.cfg.algo.grad_clip  # clipping was active
    for part in ("actor", "critic"):
        for key, w in weights_one[part].items():
            assert torch.allclose(w, getattr(trainer, part).state_dict()[key], atol=1e-6)
    for key in METRICS:
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key


def test_averaging_instead_of_summing_fails_the_preclip_check(setup, monkeypatch):
    """The mutation the check exists for: rank 0 averages the all-reduced gradients.
    After clipping (active here) and in the new weights it is invisible; before
    clipping every gradient is half the one-process one, and the check says so."""
    trainer, batch, start, updater = setup
    trainer.cfg.algo.loss_agg_mode = "token-mean"
    trainer.cfg.algo.ppo_mini_batch_size = 2
    _restore(trainer, start)
    one, grads_one = _update(lambda: trainer.update(batch, 0))
    weights_one = state_of(trainer)["actor"]
    summed = dp.allreduce_grads

    def averaged(params):
        summed(params)
        for p in params:
            if p.grad is not None:
                p.grad /= updater.world

    monkeypatch.setattr(dp, "allreduce_grads", averaged)
    _restore(trainer, start)
    try:
        two, grads_two = _update(lambda: updater.update(batch, 0))
    finally:
        updater._fingerprint = object()  # the ranks diverged: the next phase resyncs
    with pytest.raises(AssertionError, match="ratio 0.5000"):
        assert_same_grads(grads_one, grads_two)
    # what a check after clipping compares is blind to it: the new weights
    for key, w in weights_one.items():
        assert torch.allclose(w, trainer.actor.state_dict()[key], atol=1e-6), key
    assert two["actor/grad_norm_mean"] == pytest.approx(one["actor/grad_norm_mean"] / 2, rel=1e-4)


def test_the_next_update_needs_no_broadcast_and_stays_equal(setup):
    trainer, batch, start, updater = setup
    trainer.cfg.algo.loss_agg_mode = "token-mean"
    trainer.cfg.algo.ppo_mini_batch_size = 2
    _restore(trainer, start)
    trainer.update(batch, 0)
    trainer.update(batch, 1)
    expected = state_of(trainer)["actor"]
    _restore(trainer, start)
    updater.update(batch, 0)
    second = updater.update(batch, 1)
    assert second["scale/state_broadcast"] == 0.0  # the ranks stepped in lockstep
    for key, w in expected.items():
        assert torch.allclose(w, trainer.actor.state_dict()[key], atol=1e-6), key


def test_ranks_score_their_shares_to_the_one_process_scores(setup):
    trainer, batch, start, updater = setup
    _restore(trainer, start)
    fields = ("old_log_prob", "ref_log_prob", "values", "final_values")
    trainer.score_batch(batch, {})
    expected = {name: getattr(batch, name).clone() for name in fields}
    for name in fields:
        setattr(batch, name, None)
    metrics = {}
    updater.score_batch(batch, metrics)
    for name in fields:
        assert torch.allclose(getattr(batch, name), expected[name], atol=1e-5), name
    assert metrics["actor/gen_logprob_max_diff"] < 1e-4
