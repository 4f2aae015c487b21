"""Rollout workers on Ray: the same trajectories as one process (sampling seeded by the
group, never the worker), weights pushed when they change, and a killed worker replaced
with its groups played again to the same result."""

import os
import signal
import sys

import pytest
import torch

ray = pytest.importorskip("ray")

from ragen.agent.env_manager import EnvStateManager  # noqa: E402
from ragen.agent.policies import ModelPolicy  # noqa: E402
from ragen.agent.rollout import RolloutConfig  # noqa: E402
from ragen.distributed.ray_setup import import_ray  # noqa: E402
from ragen.distributed.rollout_workers import (  # noqa: E402
    EnvSpec,
    RolloutWorkerPool,
    rollout_units,
    sampling_units,
    units_manager,
)
from ragen.distributed.sharding import shard_groups, split_rows  # noqa: E402
from ragen.engines.hf import HFEngine  # noqa: E402
from ragen.errors import ConfigError  # noqa: E402
from ragen.models import load_policy  # noqa: E402
from ragen.trainer.config import load_config  # noqa: E402

BATCH_GROUPS = 2  # sampling units [0, 1] and [2]: one per worker, uneven
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
        batch_groups=BATCH_GROUPS,
    )
    yield workers
    workers.close()


def _manager():
    return EnvStateManager("sokoban", {}, env_groups=CFG.env_groups, group_size=CFG.group_size)


def _one_process(model, seeds):
    policy_model, tokenizer = model
    policy = ModelPolicy(HFEngine(policy_model, tokenizer), tokenizer)
    spec = EnvSpec.of(_manager())
    units = sampling_units(len(seeds), BATCH_GROUPS)
    return rollout_units(policy, lambda n: units_manager(spec, n), CFG, units, seeds)


def _same(a, b):
    assert len(a.trajectories) == len(b.trajectories) == CFG.env_groups * CFG.group_size
    for x, y in zip(a.trajectories, b.trajectories):
        assert (x.group_id, x.episode_id, x.seed) == (y.group_id, y.episode_id, y.seed)
        assert x.input_ids == y.input_ids
        assert x.response_mask == y.response_mask
        assert x.turn_rewards == pytest.approx(y.turn_rewards)
        assert x.end_reason == y.end_reason
        assert x.gen_logprobs == pytest.approx(y.gen_logprobs, abs=1e-5)


def test_units_shards_and_row_splits_cover_everything_once():
    assert sampling_units(5, 2) == [[0, 1], [2, 3], [4]]
    assert shard_groups(3, 2) == [[0, 1], [2]]
    assert shard_groups(1, 3) == [[0], [], []]
    lengths = [5, 9, 2, 7, 7]
    parts = split_rows([4, 0, 3, 1], lengths, 2)
    assert sorted(r for p in parts for r in p) == [0, 1, 3, 4]
    assert parts == [[0, 1], [4, 3]]  # longest first to the lighter rank: 9+5 | 7+7


def test_workers_play_the_same_trajectories_as_one_process(pool, model):
    seeds = _manager().seeds_for_step(0)
    local = _one_process(model, seeds)
    distributed = pool.collect(model[0], _manager(), CFG, seeds)
    _same(local, distributed)
    # every episode samples its own replies (none shares another's stream)
    assert len({tuple(t.input_ids) for t in local.trajectories}) == len(local.trajectories)
    assert distributed.stats["scale/weight_sync_s"] > 0  # the first rollout pushes weights
    assert distributed.stats["generated_tokens"] == local.stats["generated_tokens"]


def test_changed_weights_are_pushed_once(pool, model):
    policy_model = model[0]
    seeds = _manager().seeds_for_step(1)
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


def test_more_workers_than_sampling_units_is_a_config_error():
    base = ["env=sokoban", "model=tiny", "rollout.env_groups=8", "trainer.worker_batch_groups=4"]
    load_config([*base, "trainer.rollout_workers=2"])  # 2 units, 2 workers
    with pytest.raises(ConfigError, match=r"3 workers for 2 sampling unit.*worker_batch_groups=2"):
        load_config([*base, "trainer.rollout_workers=3"])
