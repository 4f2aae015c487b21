"""Rollout workers on Ray: the same trajectories as one process (sampling seeded per
episode, never by the worker or the batch), any worker count for any number of groups,
weights pushed when they change, and a killed worker replaced with its groups played
again to the same result."""

import dataclasses
import os
import signal
import sys

import pytest
import torch

ray = pytest.importorskip("ray")

from ragen.agent.env_manager import EnvStateManager  # noqa: E402
from ragen.agent.policies import ModelPolicy  # noqa: E402
from ragen.agent.rollout import RolloutConfig, run_rollout  # noqa: E402
from ragen.distributed.ray_setup import import_ray  # noqa: E402
from ragen.distributed.rollout_workers import (  # noqa: E402
    EnvSpec,
    RolloutWorkerPool,
    batches_of,
    rollout_groups,
    shard_manager,
)
from ragen.distributed.sharding import shard_groups, split_rows  # noqa: E402
from ragen.engines.hf import HFEngine  # noqa: E402
from ragen.errors import ConfigError  # noqa: E402
from ragen.models import load_policy  # noqa: E402
from ragen.trainer.config import load_config  # noqa: E402

CFG = RolloutConfig(
    env_groups=3,
    group_size=2,
    max_turns=2,
    max_new_tokens=12,
    max_model_len=1024,
    temperature=1.0,
    seed=123,
)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    policy_model, tokenizer = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    return policy_model, tokenizer


@pytest.fixture(scope="module")
def pool(local_ray, tiny_model_dir):
    workers = RolloutWorkerPool(
        local_ray,
        2,
        model_path=tiny_model_dir,
        lora=None,
        device="cpu",
        dtype=torch.float32,
        resources={"num_cpus": 1.0, "num_gpus": 0.0},
    )
    yield workers
    workers.close()


def _manager(groups=CFG.env_groups, size=CFG.group_size):
    return EnvStateManager("sokoban", {}, env_groups=groups, group_size=size)


def _policy(model):
    policy_model, tokenizer = model
    return ModelPolicy(HFEngine(policy_model, tokenizer), tokenizer)


def _one_process(model, seeds, manager=None):
    """``trainer.rollout_workers=0``: every episode in one batched rollout."""
    return run_rollout(_policy(model), manager or _manager(), CFG, seeds)


def _same(a, b, n=CFG.env_groups * CFG.group_size):
    assert len(a.trajectories) == len(b.trajectories) == n
    for x, y in zip(a.trajectories, b.trajectories):
        assert (x.group_id, x.episode_id, x.seed) == (y.group_id, y.episode_id, y.seed)
        assert x.input_ids == y.input_ids
        assert x.response_mask == y.response_mask
        assert x.turn_rewards == pytest.approx(y.turn_rewards)
        assert x.end_reason == y.end_reason
        assert x.gen_logprobs == pytest.approx(y.gen_logprobs, abs=1e-5)


def test_shards_batches_and_row_splits_cover_everything_once():
    assert shard_groups(3, 2) == [[0, 1], [2]]
    assert shard_groups(1, 3) == [[0], [], []]
    assert batches_of([3, 4, 5, 6, 7], 2) == [[3, 4], [5, 6], [7]]
    assert batches_of([3, 4, 5], 0) == [[3, 4, 5]]  # 0: no cap
    lengths = [5, 9, 2, 7, 7]
    parts = split_rows([4, 0, 3, 1], lengths, 2)
    assert sorted(r for p in parts for r in p) == [0, 1, 3, 4]
    assert parts == [[0, 1], [4, 3]]  # longest first to the lighter rank: 9+5 | 7+7


def test_a_shard_samples_what_the_whole_batch_samples(model):
    """Per-episode sampling seeds: groups played one at a time (capped batches) or as
    the shard of groups [1, 2] give the episodes of the one-batch rollout."""
    seeds = _manager().seeds_for_step(3)
    whole = _one_process(model, seeds)
    spec = EnvSpec.of(_manager())
    one_at_a_time = rollout_groups(
        _policy(model), lambda n: shard_manager(spec, n), CFG, [0, 1, 2], seeds, batch_groups=1
    )
    _same(whole, one_at_a_time)
    shard = rollout_groups(_policy(model), lambda n: shard_manager(spec, n), CFG, [1, 2], seeds)
    size = CFG.group_size
    assert [t.group_id for t in shard.trajectories] == [1, 1, 2, 2]
    assert [t.episode_id for t in shard.trajectories] == [size, size + 1, 2 * size, 2 * size + 1]
    tail = dataclasses.replace(whole, trajectories=whole.trajectories[size:])
    _same(tail, shard, n=2 * size)


def test_workers_play_the_same_trajectories_as_one_process(pool, model):
    seeds = _manager().seeds_for_step(0)
    local = _one_process(model, seeds)  # 0 workers: one batch; 2 workers: groups [0, 1] | [2]
    distributed = pool.collect(model[0], _manager(), CFG, seeds)
    _same(local, distributed)
    # every episode samples its own replies (none shares another's stream)
    assert len({tuple(t.input_ids) for t in local.trajectories}) == len(local.trajectories)
    # the workers played this model's weights (the same trajectories as one process);
    # whether this call pushed them depends on which test used the pool first
    assert distributed.stats["scale/weight_sync_s"] >= 0
    assert distributed.stats["generated_tokens"] == local.stats["generated_tokens"]


def test_changed_weights_are_pushed_once(pool, model):
    policy_model = model[0]
    seeds = _manager().seeds_for_step(1)
    # pushes the weights unless an earlier test of this module's pool did (the order of
    # tests on a pytest-xdist worker is not the file's)
    pool.collect(policy_model, _manager(), CFG, seeds)
    before = pool.collect(policy_model, _manager(), CFG, seeds)
    assert before.stats["scale/weight_sync_s"] == 0.0  # unchanged since the last push
    with torch.no_grad():  # what an optimizer step does: change weights in place
        for p in policy_model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    after = pool.collect(policy_model, _manager(), CFG, seeds)
    assert after.stats["scale/weight_sync_s"] > 0
    _same(_one_process(model, seeds), after)
    assert [t.input_ids for t in after.trajectories] != [t.input_ids for t in before.trajectories]


def test_a_killed_worker_is_replaced_and_its_groups_played_again(pool, model):
    seeds = _manager().seeds_for_step(2)
    killed = []

    def kill_first_worker(worker, pid):
        if worker == 0 and not killed:
            os.kill(pid, signal.SIGKILL)  # dies with its rollout in flight
            killed.append(pid)

    pool.on_dispatch = kill_first_worker
    try:
        result = pool.collect(model[0], _manager(), CFG, seeds)
    finally:
        pool.on_dispatch = None
    _same(_one_process(model, seeds), result)
    assert result.stats["scale/worker_restarts"] == 1.0
    (event,) = pool.events
    assert event["event"] == "rollout_worker_restart"
    assert event["dead_pid"] == killed[0] and event["new_pid"] != killed[0]
    assert event["groups"] == [0, 1]
    pool.events.clear()


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'ragen\[scale\]'"):
        import_ray()
    # and the config says so before any model loads
    with pytest.raises(ConfigError, match=r"trainer.train_ranks: needs Ray.*ragen\[scale\]"):
        load_config(["env=sokoban", "model=tiny", "trainer.train_ranks=2"])
    load_config(["env=sokoban", "model=tiny"])  # one process needs no Ray


def test_more_workers_than_groups_idle_and_sample_the_same(pool, model):
    """Validation-like: one group of one episode on 2 workers (one idles); and a config
    with more workers than groups is accepted, not refused."""
    manager = _manager(groups=1, size=1)
    seeds = manager.validation_seeds(1)
    result = pool.collect(model[0], manager, CFG, seeds)
    assert result.stats["scale/busy_workers"] == 1.0
    _same(_one_process(model, seeds, _manager(groups=1, size=1)), result, n=1)
    load_config(["env=sokoban", "model=tiny", "rollout.env_groups=2", "trainer.rollout_workers=3"])
